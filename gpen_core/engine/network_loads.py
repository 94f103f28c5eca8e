"""What loading each network means: the :class:`NetworkLoad` the model cache takes. The faces room never imports
a runtime: the OpenVINO detector and masker are built here and handed to it ready to run."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpen_core.engine.lifetime import Lifetime
from gpen_core.engine.runtime_choice import Network, RequestPlan, RuntimeDecision, RuntimeFacts
from gpen_core.errors import WeightsError
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions, default_upscaler
from gpen_core.runtimes.openvino.choice import BackendChoice
from gpen_core.weights import lookup as weights

if TYPE_CHECKING:
    from gpen_core.faces.detect import DetectorName, FaceDetector

# Face-parsing weights in the order they are looked for: GPEN's own, then facexlib's copy of the same network.
PARSER_WEIGHTS = ("ParseNet-latest", "parsenet")

# busy(kind, name, what): the sentence when another thread converts that network now, else None (an argument,
# so the cache and engine.prepare do not import each other).
BusyCheck = Callable[[str, str, str], "str | None"]


@dataclass(frozen=True)
class NetworkLoad:
    """One network a request wants: ``key`` (the runtime excluded), the facts its runtime is decided on, and how
    to build it in that runtime."""

    network: Network
    name: str
    key: tuple[Any, ...]
    facts: RuntimeFacts
    build: Callable[[RuntimeDecision], Any]


class LoadSource(Protocol):
    """What the load builders read off the model cache (a Protocol: the cache imports this module)."""

    models_dir: Path | None
    allow_download: bool
    synthetic_weights: bool
    lifetime: Lifetime
    busy: BusyCheck | None
    plan: RequestPlan | None
    openvino_threads: int | None


def resolve(src: LoadSource, name: str) -> Path:
    """The verified weights file ``name`` in ``src``'s models folder (downloaded when ``src`` allows it)."""
    return weights.resolve(name, models_dir=src.models_dir, allow_download=src.allow_download)


def ov_models_dir(src: LoadSource) -> Path:
    """The models folder the OpenVINO cache lives in."""
    return src.models_dir if src.models_dir is not None else weights.models_dir()


def first_use_facts(src: LoadSource, facts: RuntimeFacts, name: str, device: str) -> RuntimeFacts:
    """``facts`` with the lifetime's word on conversions and, for a first use of OpenVINO only, what it rests on
    besides: free RAM, a busy converter, whether the cache can be written (probed by a write) and the plan."""
    facts = replace(facts, conversion_pays=src.lifetime.conversion_pays)
    if facts.measured.runtime != "openvino" or facts.converted:
        return facts
    from gpen_core.engine.budget import free_memory
    from gpen_core.platform.meter import current_rss
    from gpen_core.runtimes.openvino.base import cache_root, unwritable_reason

    p = src.plan
    return replace(facts, free_ram=free_memory(device).ram_bytes,
                   busy=src.busy(facts.network, name, facts.what) if src.busy else None,
                   unwritable=unwritable_reason(cache_root(ov_models_dir(src))),
                   plan=p, plan_used=max(0, current_rss() - p.start_rss) if p is not None else 0)


def _registry_file(model: str, path: Path, folder: Path) -> bool:
    """Whether ``--model`` names a file `download` converts: a registry name, or the registry's file in ``folder``."""
    spec = weights.find_spec(path.name)
    in_folder = spec is not None and path.resolve() == (folder / spec.filename).resolve()
    return weights.registry_name(model) is not None or in_folder


def generator_load(src: LoadSource, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any):
    """(NetworkLoad, torch plan, [plan note], OpenVINO precision note) for ``mode``'s generator."""
    from gpen_core.networks.plan import choose_plan
    from gpen_core.runtimes.openvino import generator as ov

    name = generator_name(mode, opts.task, opts.model)
    synthetic = src.synthetic_weights and opts.model is None
    path = Path(f"synthetic:{name}") if synthetic else resolve(src, name)
    plan, plan_note = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)
    size = registry_size(name)
    measured = ov.choose_mode_backend(mode, opts.backend, size, plan.dtype, models_dir=ov_models_dir(src), device=device)
    precision, precision_note = ov.choose_precision(plan.dtype) if measured.runtime == "openvino" else ("f32", None)
    # The hardware check's random generator runs as chosen: it measures the runtime itself.
    converted, need, exact = True, 0, True
    if measured.runtime == "openvino" and not synthetic:
        need, exact = ov.conversion_ram(size, path)
        converted = ov.graph_is_current(ov.cache_key(path, precision), ov_models_dir(src))
    own = opts.model is not None and not synthetic and not _registry_file(opts.model, path, ov_models_dir(src))
    facts = RuntimeFacts("generator", f"the generator {name}", opts.backend, measured, plan.dtype,
                         "bfloat16" if precision == "bf16" else "float32", converted, need,
                         convert_ram_estimated=not exact, converting=path.name, own_checkpoint=own)
    facts = first_use_facts(src, facts, name, device)

    def build(decision: RuntimeDecision) -> Any:
        from gpen_core.networks.checkpoint import for_own_file, load_generator

        try:
            if decision.runtime == "openvino":
                prec = "bf16" if decision.dtype == "bfloat16" else "f32"
                return load_openvino_generator(path, prec, ov_models_dir(src), progress)
            from gpen_core.networks.prepared import prepare
            from gpen_core.networks.synthetic import random_generator

            model = random_generator(weights.REGISTRY[name].arch) if synthetic else load_generator(path)
            return prepare(model, plan), model.config.size
        except WeightsError as exc:
            if not own:
                raise
            raise for_own_file(exc) from None

    return NetworkLoad("generator", name, (str(path), plan), facts, build), plan, [plan_note] if plan_note else [], precision_note


def detector_load(src: LoadSource, network: str, device: str, opts: RestoreOptions | None,
                  mode: MemoryMode | None) -> NetworkLoad:
    """The load of the ``network`` face detector (torch or OpenVINO)."""
    from gpen_core.faces.detect import FaceDetector
    from gpen_core.runtimes.openvino import generator as ov

    requested = opts.backend if opts is not None else "torch"
    kw = dict(network=f"retinaface-{network}", models_dir=ov_models_dir(src), device=device)
    measured = (ov.choose_mode_backend(mode, requested, 1000, "float32", **kw) if mode is not None
                else ov.choose_backend(requested, 1000, "float32", **kw))
    path: Path | None = None  # with synthetic weights, random ones unless the real ones are here
    if not src.synthetic_weights or weights.locate(DETECTOR_WEIGHTS[network], models_dir=src.models_dir) is not None:
        path = resolve(src, DETECTOR_WEIGHTS[network])
    converted, need = True, 0
    if measured.runtime == "openvino" and path is not None:  # None: the check's random detector runs as chosen
        from gpen_core.runtimes.openvino import detector as ov_detect

        converted = ov.is_cached(ov_detect.detector_key(path, network), ov_models_dir(src))
        need = ov_detect.CONVERT_RAM_MEASURED[network]
    facts = RuntimeFacts("detector", f"the {network} detector", requested, measured, "float32", "float32",
                         converted, need)
    facts = first_use_facts(src, facts, network, device)

    def build(decision: RuntimeDecision) -> Any:
        if decision.runtime == "openvino":
            return openvino_detector(path, network, models_dir=ov_models_dir(src),  # type: ignore[arg-type]
                                     threads=src.openvino_threads)
        return FaceDetector(path, network, device=device)  # type: ignore[arg-type]

    return NetworkLoad("detector", network, (network, device), facts, build)


def parser_path(src: LoadSource) -> Path | None:
    """GPEN's own parsing file first, then facexlib's copy of the same network (verified); None when neither is here."""
    for name in PARSER_WEIGHTS:
        if weights.locate(name, models_dir=src.models_dir) is not None:
            return resolve(src, name)  # verified (size, sha256 or its sidecar) before loading
    return None


def parser_load(src: LoadSource, mode: MemoryMode, device: str, opts: RestoreOptions | None, path: Path | None,
                progress: Any = None) -> NetworkLoad:
    """The load of ``mode``'s face parser from ``path`` (None: random weights); ``progress`` hears about a conversion."""
    from gpen_core.faces.parse import ParsingMasker, choose_parse_dtype
    from gpen_core.runtimes.openvino import generator as ov

    dtype = choose_parse_dtype(device, mode.cpu_dtype)
    requested = opts.backend if opts is not None else "torch"
    measured = ov.choose_mode_backend(mode, requested, mode.parse_input, dtype, network="parsenet",
                                      models_dir=ov_models_dir(src), device=device)
    converted, need = True, 0
    if measured.runtime == "openvino" and path is not None:  # None: the check's random parser runs as chosen
        from gpen_core.runtimes.openvino import parser as ov_parse

        converted = ov.is_cached(ov_parse.parse_key(path, mode.parse_input, "f32"), ov_models_dir(src))
        need = ov_parse.CONVERT_RAM_MEASURED.get(mode.parse_input, max(ov_parse.CONVERT_RAM_MEASURED.values()))
    facts = RuntimeFacts("parser", f"the {mode.parse_input} px parser", requested, measured, dtype, dtype,
                         converted, need)
    facts = first_use_facts(src, facts, str(mode.parse_input), device)

    def build(decision: RuntimeDecision) -> Any:
        if decision.runtime == "openvino":  # CPU only, in the precision the mode's dtype gives on torch
            from gpen_core.runtimes.openvino import parser as ov_parse
            from gpen_core.runtimes.openvino.base import choose_precision

            precision = choose_precision(choose_parse_dtype("cpu", mode.cpu_dtype))[0]
            parser = ov_parse.load(path if path is not None else ov_parse.synthetic_weights(ov_models_dir(src)),
                                   mode.parse_input, precision, models_dir=ov_models_dir(src),
                                   threads=src.openvino_threads, progress=progress)
            return ParsingMasker(path, "cpu", input_size=mode.parse_input, parser=parser)
        return ParsingMasker(path, device=device, input_size=mode.parse_input, cpu_dtype=mode.cpu_dtype)

    name = path.name if path is not None else "parsenet (synthetic)"
    return NetworkLoad("parser", name, (str(path), device, mode.parse_input, mode.cpu_dtype), facts, build)


def upscaler_load(src: LoadSource, opts: RestoreOptions, device: str) -> NetworkLoad:
    """The load of ``opts``' upscaler (torch only)."""
    name = opts.upscaler_name
    synthetic = src.synthetic_weights and opts.upscaler is None
    looks_like_path = weights.registry_name(name) is None
    if synthetic:
        source, label = f"synthetic:{name}", f"{name} (synthetic weights)"
    else:
        if looks_like_path and not Path(name).expanduser().exists():
            from gpen_core.networks.upscaler import missing_upscaler_text

            raise WeightsError(missing_upscaler_text(name, default_upscaler(opts.upscale)))
        source, label = str(resolve(src, name)), (Path(name).name if looks_like_path else name)
    # RealESRNet has no OpenVINO conversion here: it runs on torch whatever the request asked.
    torch_only = BackendChoice("torch", "torch only (no OpenVINO conversion for RealESRNet)")
    facts = RuntimeFacts("upscaler", f"the upscaler {label}", opts.backend, torch_only, "float32", "float32",
                         converted=True, convert_ram=0)

    def build(decision: RuntimeDecision) -> Any:
        if synthetic:
            from gpen_core.networks.upscaler import UpscalerConfig, random_upscaler

            return random_upscaler(UpscalerConfig(scale=opts.upscale)).to(device)
        from gpen_core.networks.upscaler import load_upscaler

        return load_upscaler(source, device)

    return NetworkLoad("upscaler", label, (source, device), facts, build)


def registry_size(name: str) -> int:
    """Face size of a generator: the registry's for a name, the checkpoint's for a path; 0 when neither tells."""
    known = weights.registry_name(name)
    if known is not None:
        spec = weights.REGISTRY[known]
        return spec.arch.size if spec.arch is not None else 0
    p = Path(name).expanduser()
    if not p.is_file():
        return 0
    st = p.stat()
    return _checkpoint_size(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _checkpoint_size(path: str, nbytes: int, mtime_ns: int) -> int:
    """The face size a checkpoint file's key table says (memory-mapped: no weights are read); 0 if unreadable."""
    from gpen_core.networks.checkpoint import infer_config, read_checkpoint, unwrap_state_dict

    try:
        return infer_config(unwrap_state_dict(read_checkpoint(path, mmap=True))).size
    except (WeightsError, KeyError, ValueError):  # not a GPEN checkpoint: the load itself will say so
        return 0


def load_openvino_generator(path: Path, precision: str, models_dir: Path, progress: Any):
    """The OpenVINO generator, from the cache or converted now; a synthetic one (the hardware check) is written
    once as a random checkpoint of its architecture."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    if str(path).startswith("synthetic:"):
        from gpen_core.networks.synthetic import random_state_dict
        from gpen_core.runtimes.openvino.base import synthetic_file

        arch = weights.REGISTRY[str(path).split(":", 1)[1]].arch
        # Named by architecture: generators sharing one (GPEN-Colorization-1024 and GPEN-Inpainting-1024;
        # GPEN-BFR-512 and GPEN-Seg2face-512) share one file and one conversion (minutes at 1024 px) in the check.
        digest = hashlib.sha256(repr(arch).encode()).hexdigest()[:10]
        path = synthetic_file(models_dir, f"random-{arch.size}px-{digest}.pth", lambda: random_state_dict(arch))
    forward = ov_backend.load(path, precision, models_dir=models_dir, progress=progress)  # type: ignore[arg-type]
    return forward, forward.size


def openvino_detector(weights_path: Path | None, network: "DetectorName", *,
                      models_dir: str | os.PathLike[str] | None = None, threads: int | None = None) -> "FaceDetector":
    """RetinaFace ``network`` on OpenVINO (CPU; converted once, cached under ``models_dir``); ``weights_path``
    None: random weights (the hardware check). ResourceError when OpenVINO cannot run here."""
    from gpen_core.faces.detect import FaceDetector, build_retinaface
    from gpen_core.runtimes.openvino import detector as ov_detect

    runner = ov_detect.load(weights_path, network, lambda p: build_retinaface(p, network), models_dir=models_dir,
                            threads=threads)
    return FaceDetector(weights_path, network, "cpu", runner=runner)
