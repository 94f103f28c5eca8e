"""The resident models of one Restorer: at most one generator, one detector and one parser.

:class:`ModelCache` loads what a request needs (``generator`` / ``detector`` /
``parser``), frees the previous model before loading another, rolls back to the
previous generator when a new one fails to load, and frees everything on demand.
Weights are looked up in ``models_dir`` (downloaded only with ``allow_download``);
``synthetic_weights`` builds registry generators with random weights instead.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from gpen_core.engine.lifetime import Lifetime, Stage
from gpen_core.engine.prepare import busy_note, token
from gpen_core.result import NetworkRuntime
from gpen_core.errors import GPENError
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.platform.oom import release
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions


# Face-parsing weights in the order they are looked for: GPEN's own, then facexlib's copy
# (the same ParseNet class and key table; see gpen_core.networks.parsenet).
PARSER_WEIGHTS = ("ParseNet-latest", "parsenet")


class _Loaded:
    """One resident model plus the key it was loaded for."""

    def __init__(self, key: tuple[Any, ...], obj: Any, name: str) -> None:
        self.key, self.obj, self.name = key, obj, name


class ModelCache:
    """Generator, detector and parser cache; not thread-safe (the Restorer's lock serialises it)."""

    def __init__(
        self, models_dir: str | os.PathLike[str] | None = None, *, allow_download: bool = False, synthetic_weights: bool = False,
        one_shot: bool = False, lifetime: Lifetime | None = None,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.allow_download = allow_download
        self.synthetic_weights = synthetic_weights
        # What stays loaded between stages and requests (engine.lifetime); ``one_shot=True`` is
        # Lifetime.ONE_SHOT, kept for older callers.
        self.lifetime = lifetime or (Lifetime.ONE_SHOT if one_shot else Lifetime.RESIDENT)
        # What ran each network of the current request, in the order loaded (RestoreResult.runtimes).
        self.runtimes: dict[str, NetworkRuntime] = {}
        self._generator: _Loaded | None = None
        # The generator runtime of the last request ("torch" / "openvino") and why it was picked.
        self.backend, self.backend_reason = "torch", ""
        self._detector: _Loaded | None = None
        self._parser: _Loaded | None = None
        self._upscaler: _Loaded | None = None

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

    def generator(self, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any = None):
        """(forward, size, torch dtype, name, note) for this request; switching frees the old
        generator first and rolls back to it when the new one fails to load.

        ``opts.backend`` picks the runtime (see :mod:`gpen_core.runtimes.openvino.generator`); what ran and why
        is left in :attr:`backend` / :attr:`backend_reason`. ``progress(fraction, message)``
        hears about a first-use OpenVINO conversion.
        """
        import torch

        from gpen_core.runtimes.openvino import generator as ov_backend

        name = generator_name(mode, opts.task, opts.model)
        synthetic = self.synthetic_weights and opts.model is None
        path = Path(f"synthetic:{name}") if synthetic else self._resolve(name)
        plan, note, backend, why = self._generator_choice(mode, opts, device)
        precision, precision_note = ov_backend.choose_precision(plan.dtype) if backend == "openvino" else ("f32", None)
        if backend == "openvino" and opts.backend == "auto" and not synthetic:
            # Only auto trades OpenVINO for torch here: an explicit openvino converts as asked.
            need, measured = ov_backend.conversion_ram(_registry_size(name), path)
            cached = ov_backend.graph_is_current(ov_backend.cache_key(path, precision), self._ov_models_dir())
            fallback = _torch_instead("auto", cached, need, device, token("generator", name), f"the generator {name}",
                                      estimated=not measured, converting=path.name)
            if fallback:
                backend, why, precision, precision_note = "torch", fallback, "f32", fallback
        key = (str(path), plan, backend, precision)
        fresh = self._generator is None or self._generator.key != key
        if fresh:
            previous = self._generator
            prev_key = previous.key if previous else None
            self._generator = None
            del previous
            release(device)
            try:
                self._generator = _Loaded(key, self._load(key, progress), name)
            except Exception as exc:  # clean up and re-raise: the caller decides what the failure means
                self._generator = None
                release(device)
                if prev_key is not None:  # roll back to the model that worked
                    try:
                        self._generator = _Loaded(prev_key, self._load(prev_key, None), Path(prev_key[0]).stem)
                    except (GPENError, MemoryError, RuntimeError, OSError) as again:
                        # Out of memory, the file gone or damaged meanwhile: nothing stays loaded
                        # (the next request loads what it needs); the first failure is the one
                        # reported, with this one beside it.
                        self._generator = None
                        exc.add_note(f"the previous generator {Path(prev_key[0]).stem} could not be reloaded either: {again}")
                raise
        forward, size = self._generator.obj
        self.backend, self.backend_reason = backend, why
        self.runtimes["generator"] = NetworkRuntime("generator", name, backend, why)
        notes = [n for n in (note, precision_note) if n]
        if backend == "openvino":
            if fresh and forward.convert_s is not None:
                notes.append(f"converted the generator to OpenVINO on first use in {forward.convert_s:.1f} s (cached in the models folder)")
            return forward, size, (torch.bfloat16 if precision == "bf16" else torch.float32), name, ("; ".join(notes) or None)
        return forward, size, plan.dtype_torch, name, ("; ".join(notes) or None)

    def _ov_models_dir(self) -> Path:
        from gpen_core.weights.lookup import models_dir

        return self.models_dir if self.models_dir is not None else models_dir()

    def generator_runtime(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> str:
        """"torch" or "openvino": the runtime :meth:`generator` would pick for this request (before
        a free-RAM fallback), without loading anything."""
        return self._generator_choice(mode, opts, device)[2]

    def _generator_choice(self, mode: MemoryMode, opts: RestoreOptions, device: str):
        """(plan, plan note, runtime, why) for ``mode``'s generator, before any free-RAM fallback."""
        from gpen_core.networks.plan import choose_plan
        from gpen_core.runtimes.openvino import generator as ov_backend

        plan, note = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)
        size = _registry_size(generator_name(mode, opts.task, opts.model))
        backend, why = ov_backend.choose_mode_backend(mode, opts.backend, size, plan.dtype, models_dir=self._ov_models_dir(), device=device)
        return plan, note, backend, why

    def _load(self, key: tuple[Any, ...], progress: Any):
        path, plan, backend, precision = Path(key[0]), key[1], key[2], key[3]
        if backend == "openvino":
            return _load_openvino(path, precision, self._ov_models_dir(), progress)
        return _load_forward(path, plan)

    def detector(self, network: str, device: str, opts: RestoreOptions | None = None, notes: list[str] | None = None,
                 mode: MemoryMode | None = None):
        """The cached :class:`~gpen_core.faces.detect.FaceDetector` for ``network`` on ``device``.

        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one at
        1000 px, :func:`gpen_core.runtimes.openvino.generator.choose_mode_backend`: a ``mode``
        without :attr:`~gpen_core.modes.MemoryMode.auto_openvino` keeps it on torch); no opts:
        torch. ``notes`` hears which backend ran when it is OpenVINO."""
        from gpen_core.runtimes.openvino import generator as ov_backend
        from gpen_core.engine.backends import openvino_detector
        from gpen_core.faces.detect import FaceDetector

        requested = opts.backend if opts is not None else "torch"
        kw = dict(network=f"retinaface-{network}", models_dir=self._ov_models_dir(), device=device)
        backend, why = (ov_backend.choose_mode_backend(mode, requested, 1000, "float32", **kw) if mode is not None
                        else ov_backend.choose_backend(requested, 1000, "float32", **kw))
        key = (network, device, backend)
        if self._detector is None or self._detector.key != key:
            path: Path | None
            if self.synthetic_weights:
                from gpen_core.weights import lookup as weights

                path = weights.locate(DETECTOR_WEIGHTS[network], models_dir=self.models_dir)
                path = self._resolve(DETECTOR_WEIGHTS[network]) if path is not None else None
            else:
                path = self._resolve(DETECTOR_WEIGHTS[network])
            if backend == "openvino" and path is not None:
                from gpen_core.runtimes.openvino import detector as ov_detect

                cached = ov_backend.is_cached(ov_detect.detector_key(path, network), self._ov_models_dir())
                fallback = _torch_instead(requested, cached, ov_detect.CONVERT_RAM_MEASURED[network], device,
                                          token("detector", network), f"the {network} detector")
                if fallback:
                    backend, why, key = "torch", fallback, (network, device, "torch")
                    if notes is not None:
                        notes.append(fallback)
            self._detector = None
            release(device)
            if backend == "openvino":
                detector = openvino_detector(path, network, models_dir=self._ov_models_dir())  # type: ignore[arg-type]
            else:
                detector = FaceDetector(path, network, device=device)  # type: ignore[arg-type]
            self._detector = _Loaded(key, detector, network)
            if notes is not None and detector.convert_s is not None:
                notes.append(f"converted the {network} detector to OpenVINO on first use in {detector.convert_s:.1f} s "
                             "(cached in the models folder)")
        if backend == "openvino" and notes is not None:
            notes.append(f"face detector: {network} on OpenVINO float32 ({why.replace(' per face', ' per detection')})")
        self.runtimes["detector"] = NetworkRuntime("detector", network, self._detector.key[2], why)
        return self._detector.obj

    def parser(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None):
        """GPEN's face-parsing mask when the mode affords it and its weights are present, else None
        (GPEN's feathered rectangle). Either way a note says which paste mask was used.
        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one for
        this input size and dtype, :func:`gpen_core.runtimes.openvino.generator.choose_backend`); no opts: torch."""
        from gpen_core.weights import lookup as weights

        if not mode.parsing:
            if self._parser is not None:
                self._parser = None
                release(device)
            notes.append(f"paste mask: GPEN's feathered rectangle ({mode.name} skips the face-parsing mask to save time)")
            return None
        path = None
        for name in PARSER_WEIGHTS:  # GPEN's own file first, then facexlib's copy of the same network
            if weights.locate(name, models_dir=self.models_dir) is not None:
                path = self._resolve(name)  # verified (size, sha256 or its sidecar) before loading
                break
        if path is None and not self.synthetic_weights:
            notes.append(
                "paste mask: GPEN's feathered rectangle, because no face-parsing weights are in the models folder "
                "(GPEN's ParseNet-latest.pth or facexlib's parsing_parsenet.pth; "
                "`python -m gpen_core download ParseNet-latest`)"
            )
            return None
        from gpen_core.runtimes.openvino import generator as ov_backend
        from gpen_core.engine.backends import openvino_masker
        from gpen_core.faces.parse import ParsingMasker, choose_parse_dtype

        dtype = choose_parse_dtype(device, mode.cpu_dtype)
        requested = opts.backend if opts is not None else "torch"
        backend, why = ov_backend.choose_mode_backend(mode, requested, mode.parse_input, dtype,
                                                    network="parsenet", models_dir=self._ov_models_dir(), device=device)
        if backend == "openvino" and path is not None:
            from gpen_core.runtimes.openvino import parser as ov_parse

            cached = ov_backend.is_cached(ov_parse.parse_key(path, mode.parse_input, "f32"), self._ov_models_dir())
            need = ov_parse.CONVERT_RAM_MEASURED.get(mode.parse_input, max(ov_parse.CONVERT_RAM_MEASURED.values()))
            fallback = _torch_instead(requested, cached, need, device, token("parser", str(mode.parse_input)),
                                      f"the {mode.parse_input} px parser")
            if fallback:
                backend, why = "torch", fallback
                notes.append(fallback)
        key = (str(path), device, mode.parse_input, mode.cpu_dtype, backend)
        if self._parser is None or self._parser.key != key:
            self._parser = None
            release(device)
            if backend == "openvino":
                masker = openvino_masker(path, input_size=mode.parse_input, cpu_dtype=mode.cpu_dtype,
                                         models_dir=self._ov_models_dir())
            else:
                masker = ParsingMasker(path, device=device, input_size=mode.parse_input, cpu_dtype=mode.cpu_dtype)
            self._parser = _Loaded(key, masker, path.name if path is not None else "parsenet (synthetic)")
            if masker.convert_s is not None:
                notes.append(f"converted the parser to OpenVINO on first use in {masker.convert_s:.1f} s (cached in the models folder)")
        notes.append(f"paste mask: GPEN's face-parsing mask ({self._parser.obj.description})")
        self.runtimes["parser"] = NetworkRuntime("parser", self._parser.name, self._parser.key[-1], why)
        return self._parser.obj

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
        """(RRDBNet, name) for ``opts.upscale`` > 1; with ``upscale`` 1 it drops a resident one and returns None.

        ``opts.upscaler``: a registry name or a checkpoint path (default
        ``realesrnet_x{upscale}``). InputError when its scale is not the one asked.
        """
        from gpen_core.errors import InputError, WeightsError

        if opts.upscale <= 1:
            if self._upscaler is not None:
                self._upscaler = None
                release(device)
            return None
        name = opts.upscaler or f"realesrnet_x{opts.upscale}"
        synthetic = self.synthetic_weights and opts.upscaler is None
        if synthetic:
            key: tuple[Any, ...] = (f"synthetic:{name}", device)
        else:
            looks_like_path = os.sep in name or "/" in name or name.endswith((".pth", ".pt"))
            if looks_like_path and not Path(name).expanduser().exists():
                raise WeightsError(
                    f"upscaler file {name} does not exist. Fix: pass the path of GPEN's realesrnet_x2.pth / "
                    "realesrnet_x4.pth, or drop --upscaler and run `python -m gpen_core download "
                    f"realesrnet_x{opts.upscale}` (it is then found in the models folder)."
                )
            key = (str(self._resolve(name)), device)
        if self._upscaler is None or self._upscaler.key != key:
            self._upscaler = None
            release(device)
            if synthetic:
                from gpen_core.networks.upscaler import UpscalerConfig, random_upscaler

                net = random_upscaler(UpscalerConfig(scale=opts.upscale)).to(device)
                label = f"{name} (synthetic weights)"
            else:
                from gpen_core.networks.upscaler import load_upscaler

                net = load_upscaler(key[0], device)
                label = name if not looks_like_path else Path(name).name
            self._upscaler = _Loaded(key, net, label)
        net = self._upscaler.obj
        self.runtimes["upscaler"] = NetworkRuntime("upscaler", self._upscaler.name, "torch", "the upscaler runs on torch only")
        if net.scale != opts.upscale:
            raise InputError(
                f"the upscaler {self._upscaler.name} enlarges ×{net.scale}, but ×{opts.upscale} was asked. "
                f"Choose upscale {net.scale}, or the ×{opts.upscale} upscaler (realesrnet_x{opts.upscale})."
            )
        return net, self._upscaler.name

    def drop(self, kind: str, device: str) -> None:
        """Drop one resident model (``generator``, ``detector``, ``parser`` or ``upscaler``) and hand its memory back."""
        if kind not in ("generator", "detector", "parser", "upscaler"):
            raise ValueError(f"no resident model of kind {kind!r}")
        if getattr(self, f"_{kind}") is not None:
            setattr(self, f"_{kind}", None)
            release(device)

    def free(self, device: str) -> None:
        """Drop every resident model and hand the memory back."""
        self._generator = self._detector = self._parser = self._upscaler = None
        release(device)


def _torch_instead(requested: str, cached: bool, need: int, device: str, tok: str, what: str, *,
                   estimated: bool = False, converting: str | None = None) -> str | None:
    """Why a network that ``requested`` puts on OpenVINO runs on torch for this request, or None.

    Two reasons, both passing (a later request gets OpenVINO): converting it the first time needs
    ``need`` bytes of RAM and less is free (``auto`` only, :func:`first_use_fallback`), or it is not
    converted yet and another thread is converting it right now (:func:`busy_note`), which this
    request would otherwise repeat. ``converting`` names it in the RAM sentence (default ``what``)."""
    from gpen_core.engine.budget import free_memory
    from gpen_core.runtimes.openvino.base import first_use_fallback

    first_use = first_use_fallback(requested, "openvino", cached, need, free_memory(device).ram_bytes,
                                   converting or what, estimated=estimated)
    return first_use or (None if cached else busy_note(tok, what))


def _registry_size(name: str) -> int:
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


def _load_openvino(path: Path, precision: str, models_dir: Path, progress: Any):
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


def _load_forward(path: Path, plan):
    from gpen_core.networks.checkpoint import load_generator
    from gpen_core.networks.fast import prepare

    if str(path).startswith("synthetic:"):
        from gpen_core.networks.synthetic import random_generator
        from gpen_core.weights.lookup import REGISTRY

        model = random_generator(REGISTRY[str(path).split(":", 1)[1]].arch)
    else:
        model = load_generator(path)
    return prepare(model, plan), model.config.size
