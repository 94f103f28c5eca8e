"""The resident models of one Restorer: at most one generator, one detector, one parser and one upscaler.

:class:`ModelCache` loads what a request needs through one method, :meth:`ModelCache.load`: the
runtime of every network (torch or OpenVINO, and its dtype) is one pure decision
(:func:`gpen_core.engine.runtime_choice.decide_runtime`) from facts the cache gathers, and the
load frees the previous model of its kind first and rolls back to it when the new one fails.
What stays loaded between stages and requests is the cache's lifetime policy
(:mod:`gpen_core.engine.lifetime`). Weights are looked up in ``models_dir`` (downloaded only
with ``allow_download``); ``synthetic_weights`` builds registry generators with random weights.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpen_core.engine.lifetime import Lifetime, Stage
from gpen_core.engine.runtime_choice import Network, RuntimeDecision, RuntimeFacts, decide_runtime
from gpen_core.errors import GPENError
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions
from gpen_core.platform.oom import release
from gpen_core.result import NetworkRuntime

# Face-parsing weights in the order they are looked for: GPEN's own, then facexlib's copy
# (the same ParseNet class and key table; see gpen_core.networks.parsenet).
PARSER_WEIGHTS = ("ParseNet-latest", "parsenet")

# busy(kind, name, what): the sentence when another thread converts that network right now, else
# None. The engine's background preparation provides it (engine.prepare.busy_note); the cache
# takes it as an argument so that it and the preparation, which loads through the cache, do not
# import each other.
BusyCheck = Callable[[str, str, str], "str | None"]


@dataclass
class _Loaded:
    """One resident model, the key it was loaded for, and how to load it again (a rollback)."""

    key: tuple[Any, ...]
    obj: Any
    name: str
    build: Callable[[], Any]


@dataclass(frozen=True)
class NetworkLoad:
    """One network a request wants: its kind, name, what identifies it (the runtime excluded),
    the facts its runtime is decided on, and how to build it in the decided runtime."""

    network: Network
    name: str
    key: tuple[Any, ...]
    facts: RuntimeFacts
    build: Callable[[RuntimeDecision], Any]


class ModelCache:
    """Generator, detector, parser and upscaler cache; not thread-safe (the Restorer's lock serialises it)."""

    def __init__(
        self, models_dir: str | os.PathLike[str] | None = None, *, allow_download: bool = False, synthetic_weights: bool = False,
        one_shot: bool = False, lifetime: Lifetime | None = None, busy: BusyCheck | None = None,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.allow_download = allow_download
        self.synthetic_weights = synthetic_weights
        # What stays loaded between stages and requests (engine.lifetime); ``one_shot=True`` is
        # Lifetime.ONE_SHOT, kept for older callers.
        self.lifetime = lifetime or (Lifetime.ONE_SHOT if one_shot else Lifetime.RESIDENT)
        self.busy = busy
        # What ran each network of the current request, in the order loaded (RestoreResult.runtimes).
        self.runtimes: dict[str, NetworkRuntime] = {}
        # The generator runtime of the last request ("torch" / "openvino") and why it was picked.
        self.backend, self.backend_reason = "torch", ""
        self._generator: _Loaded | None = None
        self._detector: _Loaded | None = None
        self._parser: _Loaded | None = None
        self._upscaler: _Loaded | None = None
        # What release_unused let go, by kind, until that kind loads again: a load that fails rolls
        # back to it, as it would had it still been resident.
        self._released: dict[str, _Loaded] = {}

    @property
    def one_shot(self) -> bool:
        """Whether this cache serves one request (:attr:`Lifetime.ONE_SHOT`)."""
        return self.lifetime is Lifetime.ONE_SHOT

    def stage_ended(self, stage: Stage, device: str) -> None:
        """A request's ``stage`` is over: drop what the lifetime policy lets go then."""
        for kind in self.lifetime.drops_after(stage):
            self.drop(kind, device)

    def loaded(self) -> dict[str, str | None]:
        """Names of the resident models (for the UI and tests)."""
        return {
            "generator": self._generator.name if self._generator else None,
            "detector": self._detector.name if self._detector else None,
            "parser": self._parser.name if self._parser else None,
            "upscaler": self._upscaler.name if self._upscaler else None,
        }

    def release_unused(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> tuple[str, ...]:
        """Drop the resident networks ``mode`` does not use for ``opts`` (another generator, detector
        or parser size; no parser, no upscaler), before the request, so that a lighter mode after a
        heavier one costs what the lighter one costs. Returns the names released."""
        unused = []
        if self._generator is not None and self._generator.name != generator_name(mode, opts.task, opts.model):
            unused.append("generator")
        if self._detector is not None and self._detector.key[0] != (opts.detector or mode.detector):
            unused.append("detector")
        if self._parser is not None and (not mode.parsing or self._parser.key[2] != mode.parse_input):
            unused.append("parser")
        if self._upscaler is not None and opts.upscale <= 1:
            unused.append("upscaler")
        names = []
        for kind in unused:
            held = getattr(self, f"_{kind}")
            names.append(held.name)
            self._released[kind] = _Loaded(held.key, None, held.name, held.build)
            del held
            self.drop(kind, device)
        return tuple(names)

    def weights_present(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> bool:
        """Whether ``mode`` can run without a download (for ``auto``)."""
        from gpen_core.weights import lookup as weights

        if self.synthetic_weights:
            return True
        if opts.model is None and not self._usable(generator_name(mode, opts.task)):
            return False
        if opts.aligned or boxes_given:
            return True
        return self._usable(DETECTOR_WEIGHTS[opts.detector or mode.detector])

    def require(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> None:
        """Raise one WeightsError naming every registry file this request loads that is not
        here (generator, detector, upscaler), so a newcomer fixes them all in one go instead of
        meeting them one restore at a time. Nothing to check when downloads are allowed (each is
        fetched) or with synthetic weights; a single missing file is left to ``weights.resolve``."""
        from gpen_core.weights import lookup as weights
        from gpen_core.weights.missing import missing_error

        if self.allow_download or self.synthetic_weights:
            return
        names = [generator_name(mode, opts.task, opts.model)]
        if not (opts.aligned or boxes_given):
            names.append(DETECTOR_WEIGHTS[opts.detector or mode.detector])
        if opts.upscale > 1 and mode.paste:
            names.append(opts.upscaler or f"realesrnet_x{opts.upscale}")
        absent = [n for n in names if n in weights.REGISTRY and weights.locate(n, models_dir=self.models_dir) is None]
        if len(absent) > 1:
            folder = self.models_dir if self.models_dir is not None else weights.models_dir()
            raise missing_error(absent, folder, "downloads are off for this call")

    def _usable(self, name: str) -> bool:
        """Present and verified (size and sha256): a corrupt file counts as missing, as in
        gpen_core.presentation.readiness (the weights panel), so auto passes over it instead of failing on it."""
        from gpen_core.weights import lookup as weights
        from gpen_core.errors import WeightsError

        path = weights.locate(name, models_dir=self.models_dir)
        if path is None:
            return False
        spec = weights.REGISTRY.get(name)
        if spec is None:
            return True
        try:
            weights.verify(path, spec, self.models_dir)  # hashed once per process while unchanged
        except WeightsError:
            return False
        return True

    def _resolve(self, name: str) -> Path:
        from gpen_core.weights import lookup as weights

        return weights.resolve(name, models_dir=self.models_dir, allow_download=self.allow_download)

    def _ov_models_dir(self) -> Path:
        from gpen_core.weights.lookup import models_dir

        return self.models_dir if self.models_dir is not None else models_dir()

    def load(self, want: NetworkLoad, device: str, notes: list[str] | None = None) -> tuple[Any, RuntimeDecision, bool]:
        """(the network, its runtime decision, whether it was loaded now) for ``want``: any network,
        in the runtime :func:`decide_runtime` picks. A resident one loaded for the same key is reused;
        else the previous model of its kind is freed first, and restored should the new one fail to
        load (the failure propagates). The decision's note, if any, goes to ``notes``."""
        decision = decide_runtime(want.facts)
        key = (*want.key, decision.runtime, decision.dtype)
        slot = f"_{want.network}"
        current = getattr(self, slot)
        fresh = current is None or current.key != key
        del current
        if fresh:
            self._swap(want.network, _Loaded(key, None, want.name, lambda: want.build(decision)), device)
        loaded = getattr(self, slot)
        self.runtimes[want.network] = NetworkRuntime(want.network, loaded.name, decision.runtime, decision.reason)
        if notes is not None and decision.note:
            notes.append(decision.note)
        return loaded.obj, decision, fresh

    def _swap(self, kind: str, new: _Loaded, device: str) -> None:
        """Free the resident ``kind`` and load ``new`` in its place; on failure load the previous one
        again (out of memory, the file gone or damaged meanwhile: then nothing stays loaded, the next
        request loads what it needs) and re-raise the first failure, with the second beside it."""
        slot = f"_{kind}"
        previous = getattr(self, slot)
        setattr(self, slot, None)
        back = self._released.pop(kind, None) if previous is None else _Loaded(previous.key, None, previous.name, previous.build)
        del previous
        release(device)
        try:
            new.obj = new.build()
            setattr(self, slot, new)
        except Exception as exc:  # clean up and re-raise: the caller decides what the failure means
            release(device)
            if back is not None:
                try:
                    back.obj = back.build()
                    setattr(self, slot, back)
                except (GPENError, MemoryError, RuntimeError, OSError) as again:
                    shown = Path(back.name).stem if "/" in back.name or os.sep in back.name else back.name
                    exc.add_note(f"the previous {kind} {shown} could not be reloaded either: {again}")
            raise

    def _facts(self, want: tuple[Network, str, str], requested: str, measured: tuple[Any, str], dtypes: tuple[str, str],
               converted: bool, convert_ram: int, device: str, *, estimated: bool = False, converting: str = "") -> RuntimeFacts:
        """The facts one runtime decision rests on. ``want``: (network, name, the network in a
        sentence); ``dtypes``: (on torch, on OpenVINO). Free RAM and another thread converting are
        read only when they can matter (OpenVINO chosen for a network not converted yet)."""
        from gpen_core.engine.budget import free_memory

        network, name, what = want
        first_use = measured[0] == "openvino" and not converted
        return RuntimeFacts(
            network=network, what=what, requested=requested, measured=measured, torch_dtype=dtypes[0],
            openvino_dtype=dtypes[1], converted=converted, convert_ram=convert_ram,
            free_ram=free_memory(device).ram_bytes if first_use else 0, convert_ram_estimated=estimated,
            converting=converting, busy=self.busy(network, name, what) if first_use and self.busy else None,
            conversion_pays=self.lifetime.conversion_pays,
        )

    def generator(self, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any = None):
        """(forward, size, torch dtype, name, note) for this request (:meth:`load`).

        ``opts.backend`` picks the runtime (see :mod:`gpen_core.runtimes.openvino.generator`); what ran and why
        is left in :attr:`backend` / :attr:`backend_reason`. ``progress(fraction, message)``
        hears about a first-use OpenVINO conversion.
        """
        import torch

        want, plan, notes, precision_note = self._generator_load(mode, opts, device, progress)
        (forward, size), decision, fresh = self.load(want, device, notes)
        self.backend, self.backend_reason = decision.runtime, decision.reason
        if decision.runtime == "openvino":
            notes.extend([precision_note] if precision_note else [])
            if fresh and forward.convert_s is not None:
                notes.append(f"converted the generator to OpenVINO on first use in {forward.convert_s:.1f} s (cached in the models folder)")
            dtype = torch.bfloat16 if decision.dtype == "bfloat16" else torch.float32
            return forward, size, dtype, want.name, ("; ".join(notes) or None)
        return forward, size, plan.dtype_torch, want.name, ("; ".join(notes) or None)

    def generator_decision(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> RuntimeDecision:
        """The runtime decision :meth:`generator` would take for this request, without loading anything."""
        return decide_runtime(self._generator_load(mode, opts, device, None)[0].facts)

    def generator_runtime(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> str:
        """"torch" or "openvino": :meth:`generator_decision`'s runtime."""
        return self.generator_decision(mode, opts, device).runtime

    def _generator_load(self, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any):
        """(NetworkLoad, torch plan, [plan note], OpenVINO precision note) for ``mode``'s generator."""
        from gpen_core.networks.plan import choose_plan
        from gpen_core.runtimes.openvino import generator as ov

        name = generator_name(mode, opts.task, opts.model)
        synthetic = self.synthetic_weights and opts.model is None
        path = Path(f"synthetic:{name}") if synthetic else self._resolve(name)
        plan, plan_note = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)
        size = registry_size(name)
        measured = ov.choose_mode_backend(mode, opts.backend, size, plan.dtype, models_dir=self._ov_models_dir(), device=device)
        precision, precision_note = ov.choose_precision(plan.dtype) if measured[0] == "openvino" else ("f32", None)
        # The hardware check's random generator runs as chosen: it measures the runtime itself.
        converted, need, exact = True, 0, True
        if measured[0] == "openvino" and not synthetic:
            need, exact = ov.conversion_ram(size, path)
            converted = ov.graph_is_current(ov.cache_key(path, precision), self._ov_models_dir())
        facts = self._facts(("generator", name, f"the generator {name}"), opts.backend, measured,
                            (plan.dtype, "bfloat16" if precision == "bf16" else "float32"), converted, need, device,
                            estimated=not exact, converting=path.name)

        def build(decision: RuntimeDecision) -> Any:
            if decision.runtime == "openvino":
                prec = "bf16" if decision.dtype == "bfloat16" else "f32"
                return load_openvino_generator(path, prec, self._ov_models_dir(), progress)
            return load_torch_generator(path, plan)

        return NetworkLoad("generator", name, (str(path), plan), facts, build), plan, [plan_note] if plan_note else [], precision_note

    def detector(self, network: str, device: str, opts: RestoreOptions | None = None, notes: list[str] | None = None,
                 mode: MemoryMode | None = None):
        """The cached :class:`~gpen_core.faces.detect.FaceDetector` for ``network`` on ``device`` (:meth:`load`).

        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one at
        1000 px, :func:`gpen_core.runtimes.openvino.generator.choose_mode_backend`: a ``mode``
        without :attr:`~gpen_core.modes.MemoryMode.auto_openvino` keeps it on torch); no opts:
        torch. ``notes`` hears which backend ran when it is OpenVINO."""
        detector, decision, fresh = self.load(self._detector_load(network, device, opts, mode), device, notes)
        if notes is not None and fresh and detector.convert_s is not None:
            notes.append(f"converted the {network} detector to OpenVINO on first use in {detector.convert_s:.1f} s "
                         "(cached in the models folder)")
        if decision.runtime == "openvino" and notes is not None:
            notes.append(f"face detector: {network} on OpenVINO float32 ({decision.reason.replace(' per face', ' per detection')})")
        return detector

    def _detector_load(self, network: str, device: str, opts: RestoreOptions | None, mode: MemoryMode | None) -> NetworkLoad:
        from gpen_core.engine.backends import openvino_detector
        from gpen_core.faces.detect import FaceDetector
        from gpen_core.runtimes.openvino import generator as ov

        requested = opts.backend if opts is not None else "torch"
        kw = dict(network=f"retinaface-{network}", models_dir=self._ov_models_dir(), device=device)
        measured = (ov.choose_mode_backend(mode, requested, 1000, "float32", **kw) if mode is not None
                    else ov.choose_backend(requested, 1000, "float32", **kw))
        path = self._detector_path(network)
        converted, need = True, 0
        if measured[0] == "openvino" and path is not None:  # None: the check's random detector runs as chosen
            from gpen_core.runtimes.openvino import detector as ov_detect

            converted = ov.is_cached(ov_detect.detector_key(path, network), self._ov_models_dir())
            need = ov_detect.CONVERT_RAM_MEASURED[network]
        facts = self._facts(("detector", network, f"the {network} detector"), requested, measured, ("float32", "float32"),
                            converted, need, device)

        def build(decision: RuntimeDecision) -> Any:
            if decision.runtime == "openvino":
                return openvino_detector(path, network, models_dir=self._ov_models_dir())  # type: ignore[arg-type]
            return FaceDetector(path, network, device=device)  # type: ignore[arg-type]

        return NetworkLoad("detector", network, (network, device), facts, build)

    def _detector_path(self, network: str) -> Path | None:
        """The detector's weights; with synthetic weights, None (random weights) unless they are here."""
        if self.synthetic_weights:
            from gpen_core.weights import lookup as weights

            if weights.locate(DETECTOR_WEIGHTS[network], models_dir=self.models_dir) is None:
                return None
        return self._resolve(DETECTOR_WEIGHTS[network])

    def parser(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None):
        """GPEN's face-parsing mask when the mode affords it and its weights are present, else None
        (GPEN's feathered rectangle). Either way a note says which paste mask was used.
        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one for
        this input size and dtype, :func:`gpen_core.runtimes.openvino.generator.choose_backend`); no opts: torch."""
        if not mode.parsing:
            self.drop("parser", device)
            notes.append(f"paste mask: GPEN's feathered rectangle ({mode.name} skips the face-parsing mask to save time)")
            return None
        path = self._parser_path()
        if path is None and not self.synthetic_weights:
            notes.append(
                "paste mask: GPEN's feathered rectangle, because no face-parsing weights are in the models folder "
                "(GPEN's ParseNet-latest.pth or facexlib's parsing_parsenet.pth; "
                "`python -m gpen_core download ParseNet-latest`)"
            )
            return None
        masker, _, fresh = self.load(self._parser_load(mode, device, opts, path), device, notes)
        if fresh and masker.convert_s is not None:
            notes.append(f"converted the parser to OpenVINO on first use in {masker.convert_s:.1f} s (cached in the models folder)")
        notes.append(f"paste mask: GPEN's face-parsing mask ({masker.description})")
        return masker

    def _parser_path(self) -> Path | None:
        """GPEN's own parsing file first, then facexlib's copy of the same network (verified); None when neither is here."""
        from gpen_core.weights import lookup as weights

        for name in PARSER_WEIGHTS:
            if weights.locate(name, models_dir=self.models_dir) is not None:
                return self._resolve(name)  # verified (size, sha256 or its sidecar) before loading
        return None

    def _parser_load(self, mode: MemoryMode, device: str, opts: RestoreOptions | None, path: Path | None) -> NetworkLoad:
        from gpen_core.engine.backends import openvino_masker
        from gpen_core.faces.parse import ParsingMasker, choose_parse_dtype
        from gpen_core.runtimes.openvino import generator as ov

        dtype = choose_parse_dtype(device, mode.cpu_dtype)
        requested = opts.backend if opts is not None else "torch"
        measured = ov.choose_mode_backend(mode, requested, mode.parse_input, dtype, network="parsenet",
                                          models_dir=self._ov_models_dir(), device=device)
        converted, need = True, 0
        if measured[0] == "openvino" and path is not None:  # None: the check's random parser runs as chosen
            from gpen_core.runtimes.openvino import parser as ov_parse

            converted = ov.is_cached(ov_parse.parse_key(path, mode.parse_input, "f32"), self._ov_models_dir())
            need = ov_parse.CONVERT_RAM_MEASURED.get(mode.parse_input, max(ov_parse.CONVERT_RAM_MEASURED.values()))
        what = f"the {mode.parse_input} px parser"
        facts = self._facts(("parser", str(mode.parse_input), what), requested, measured, (dtype, dtype), converted, need, device)

        def build(decision: RuntimeDecision) -> Any:
            if decision.runtime == "openvino":
                return openvino_masker(path, input_size=mode.parse_input, cpu_dtype=mode.cpu_dtype, models_dir=self._ov_models_dir())
            return ParsingMasker(path, device=device, input_size=mode.parse_input, cpu_dtype=mode.cpu_dtype)

        name = path.name if path is not None else "parsenet (synthetic)"
        return NetworkLoad("parser", name, (str(path), device, mode.parse_input, mode.cpu_dtype), facts, build)

    def parsing_fn(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None) -> Any:
        """The paste mask function for ``mode`` as the lifetime policy loads it: now (resident), or
        at the first face it masks (one-shot: :class:`~gpen_core.engine.one_shot.LazyParser`). None:
        GPEN's feathered rectangle."""
        from gpen_core.engine.one_shot import LazyParser

        if self.lifetime.lazy_parser:
            later: list[str] = []  # said at the first mask: the restore stage reads LazyParser.notes
            return LazyParser(lambda: self.parser(mode, device, later, opts), later)
        return self.parser(mode, device, notes, opts)

    def upscaler(self, opts: RestoreOptions, device: str):
        """(RRDBNet, name) for ``opts.upscale`` > 1 (:meth:`load`; torch only); with ``upscale`` 1 it
        drops a resident one and returns None.

        ``opts.upscaler``: a registry name or a checkpoint path (default
        ``realesrnet_x{upscale}``). InputError when its scale is not the one asked.
        """
        from gpen_core.errors import InputError

        if opts.upscale <= 1:
            self.drop("upscaler", device)
            return None
        net, _, _ = self.load(self._upscaler_load(opts, device), device)
        name = self._upscaler.name if self._upscaler is not None else ""
        if net.scale != opts.upscale:
            raise InputError(
                f"the upscaler {name} enlarges ×{net.scale}, but ×{opts.upscale} was asked. "
                f"Choose upscale {net.scale}, or the ×{opts.upscale} upscaler (realesrnet_x{opts.upscale})."
            )
        return net, name

    def _upscaler_load(self, opts: RestoreOptions, device: str) -> NetworkLoad:
        from gpen_core.errors import WeightsError

        name = opts.upscaler or f"realesrnet_x{opts.upscale}"
        synthetic = self.synthetic_weights and opts.upscaler is None
        looks_like_path = os.sep in name or "/" in name or name.endswith((".pth", ".pt"))
        if synthetic:
            source, label = f"synthetic:{name}", f"{name} (synthetic weights)"
        else:
            if looks_like_path and not Path(name).expanduser().exists():
                raise WeightsError(
                    f"upscaler file {name} does not exist. Fix: pass the path of GPEN's realesrnet_x2.pth / "
                    "realesrnet_x4.pth, or drop --upscaler and run `python -m gpen_core download "
                    f"realesrnet_x{opts.upscale}` (it is then found in the models folder)."
                )
            source, label = str(self._resolve(name)), (Path(name).name if looks_like_path else name)
        # RealESRNet has no OpenVINO conversion here: it runs on torch whatever the request asked.
        facts = self._facts(("upscaler", label, f"the upscaler {label}"), opts.backend,
                            ("torch", "torch only (no OpenVINO conversion for RealESRNet)"), ("float32", "float32"),
                            True, 0, device)

        def build(decision: RuntimeDecision) -> Any:
            if synthetic:
                from gpen_core.networks.upscaler import UpscalerConfig, random_upscaler

                return random_upscaler(UpscalerConfig(scale=opts.upscale)).to(device)
            from gpen_core.networks.upscaler import load_upscaler

            return load_upscaler(source, device)

        return NetworkLoad("upscaler", label, (source, device), facts, build)

    def drop(self, kind: str, device: str) -> None:
        """Drop one resident model (``generator``, ``detector``, ``parser`` or ``upscaler``) and hand its memory back."""
        if kind not in ("generator", "detector", "parser", "upscaler"):
            raise ValueError(f"no resident model of kind {kind!r}")
        if getattr(self, f"_{kind}") is not None:
            setattr(self, f"_{kind}", None)
            release(device)

    def free(self, device: str) -> None:
        """Drop every resident model and hand the memory back (nothing to roll back to afterwards)."""
        self._generator = self._detector = self._parser = self._upscaler = None
        self._released.clear()
        release(device)


def registry_size(name: str) -> int:
    """Face size of a generator: from the registry for a name, read off the checkpoint for a path
    (so ``--model path/to/GPEN-BFR-512.pth`` gets the same measured runtime choice as the name);
    0 when neither tells (``auto`` then has no measurement to go by)."""
    from gpen_core.weights.lookup import REGISTRY

    spec = REGISTRY.get(name)
    if spec is not None:
        return spec.arch.size if spec.arch is not None else 0
    p = Path(name).expanduser()
    if not p.is_file():
        return 0
    st = p.stat()
    return _checkpoint_size(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _checkpoint_size(path: str, nbytes: int, mtime_ns: int) -> int:
    """The face size a checkpoint file's key table says (memory-mapped: no weights are read); 0 if unreadable."""
    from gpen_core.errors import WeightsError
    from gpen_core.networks.checkpoint import infer_config, read_checkpoint, unwrap_state_dict

    try:
        return infer_config(unwrap_state_dict(read_checkpoint(path, mmap=True))).size
    except (WeightsError, KeyError, ValueError):  # not a GPEN checkpoint: the load itself will say so
        return 0


def load_openvino_generator(path: Path, precision: str, models_dir: Path, progress: Any):
    """The OpenVINO generator: from the cache, or converted now. A synthetic generator (the
    hardware check) is written once as a random checkpoint of its architecture, then converted."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    if str(path).startswith("synthetic:"):
        import os

        import torch

        from gpen_core.networks.synthetic import random_state_dict
        from gpen_core.weights.lookup import REGISTRY

        import hashlib

        name = str(path).split(":", 1)[1]
        arch = REGISTRY[name].arch
        # Named by architecture, not generator: random weights of one architecture cost the same, so
        # generators sharing it (GPEN-Colorization-1024 and GPEN-Inpainting-1024; GPEN-BFR-512 and
        # GPEN-Seg2face-512) share one file and one conversion (minutes at 1024 px) in the check.
        path = ov_backend.cache_root(models_dir) / "synthetic" / f"random-{arch.size}px-{hashlib.sha256(repr(arch).encode()).hexdigest()[:10]}.pth"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(random_state_dict(REGISTRY[name].arch), tmp)
            os.replace(tmp, path)
    forward = ov_backend.load(path, precision, models_dir=models_dir, progress=progress)  # type: ignore[arg-type]
    return forward, forward.size


def load_torch_generator(path: Path, plan):
    from gpen_core.networks.checkpoint import load_generator
    from gpen_core.networks.fast import prepare

    if str(path).startswith("synthetic:"):
        from gpen_core.networks.synthetic import random_generator
        from gpen_core.weights.lookup import REGISTRY

        model = random_generator(REGISTRY[str(path).split(":", 1)[1]].arch)
    else:
        model = load_generator(path)
    return prepare(model, plan), model.config.size


# The name engine.prepare still imports (its owner moves to registry_size).
_registry_size = registry_size
