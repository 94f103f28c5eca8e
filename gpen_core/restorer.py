"""The facade, ``Restorer.__call__(image, options) -> RestoreResult``: one call at a time under the instance's lock,
each attempt under its own peak meter; one that runs out of memory frees the models and steps down a mode."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpen_core.engine import pipeline
from gpen_core.engine.frames import FrameSession, open_session
from gpen_core.errors import InputError
from gpen_core.platform.meter import SHARED_NOTE, PeakMeter
from gpen_core.engine.lifetime import Lifetime
from gpen_core.engine.model_cache import ModelCache
from gpen_core.modes import AUTO, get_mode
from gpen_core.platform.oom import malloc_trim
from gpen_core.options import ImageSource, RestoreOptions
from gpen_core.progress import Progress
from gpen_core.result import Attempt, RestoreResult


class Restorer:
    """Restores every face in a photo and reports what it cost.

    ``models_dir``: default ``$GPEN_HOME`` or ``~/.cache/gpen``; ``device``: "cpu", "cuda[:N]" or None (CUDA when
    available); ``allow_download``: fetch missing weights during a request (default never). ``synthetic_weights``:
    registry networks get random weights of their architecture (the hardware check: same memory and time).
    ``serves_many_modes`` (the app's instance): each mode sets its heap policy, so a lighter mode costs its own.
    """

    def __init__(self, models_dir: str | os.PathLike[str] | None = None, device: str | None = None, *,
                 allow_download: bool = False, synthetic_weights: bool = False, lifetime: Lifetime = Lifetime.RESIDENT,
                 serves_many_modes: bool = False) -> None:
        self._device_pref = device
        self._mode_heaps = serves_many_modes
        self._lock = threading.Lock()
        self.models = ModelCache(models_dir, allow_download=allow_download, synthetic_weights=synthetic_weights,
                                 lifetime=lifetime, busy=conversion_busy)

    @property
    def models_dir(self) -> Path | None:
        return self.models.models_dir

    @property
    def device(self) -> str:
        if not self._device_pref:
            return default_device()
        if self._device_pref.startswith("cuda"):
            _check_cuda(self._device_pref)
        elif self._device_pref != "cpu":  # else a ValueError deep in the first model load (a traceback in the CLI)
            raise InputError(f"unknown device {self._device_pref!r}; use 'cpu', 'cuda' or 'cuda:N'")
        return self._device_pref

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def loaded(self) -> dict[str, str | None]:
        """Names of the resident models, by kind."""
        return self.models.loaded()

    def unload(self) -> None:
        with self._lock:
            self.models.free(self.device)

    @contextmanager
    def frames(self, options: RestoreOptions, frame_size: tuple[int, int]) -> Iterator[FrameSession]:
        """A video's frames session, holding the lock and the networks until the block ends; the mode resolved once
        for ``frame_size`` (width, height). Per frame ``session.detect(rgb)``, then ``session.restore(rgb,
        detections)``. No meter (the caller measures the clip). InputError for options a video cannot take,
        WeightsError for missing weights."""
        opts = options.validated()
        with self._lock:
            pipeline.import_engine()
            malloc_trim()
            with open_session(self.models, self.device, opts, frame_size) as session:
                yield session

    def __call__(self, image: ImageSource, options: RestoreOptions | None = None, progress: Progress | None = None, *,
                 detections: "list[Any] | None" = None, mask: ImageSource | None = None) -> RestoreResult:
        """Restore ``image`` (RGB uint8 H×W×3 array, encoded bytes, or a path). ``detections`` (input pixels) replace
        the detector; ``mask`` (``inpaint``): the damage, white on black at the photo's size (default: white strokes
        in the photo). Raises InputError, WeightsError (with the fix), ResourceError (even the lightest mode OOM)."""
        opts = (options or RestoreOptions()).validated()
        report = progress or (lambda f, d: None)
        with self._lock:
            pipeline.import_engine()  # one-time import cost is the process's, not this request's
            # Hand back what earlier calls freed but the allocator kept, so this call's peak counts its
            # whole working set, not only what did not fit in leftovers (the same request read 1-100 MB apart).
            malloc_trim()
            device = self.device
            # Before the meter's baseline, so `low` after `balanced` costs what `low` costs (auto's mode is
            # known only after decoding).
            released = () if opts.mode == AUTO else pipeline.ready_for(self.models, get_mode(opts.mode), opts, device, self._mode_heaps)
            t0 = time.perf_counter()
            req: pipeline.Request | None = None
            attempts: list[Attempt] = []
            while True:
                self.models.runtimes.clear()  # this attempt's networks, as it loads or reuses them
                # One meter per attempt, on the request's own device: a stepped-down result reports the
                # attempt that made it; the first attempt's meter also covers decoding.
                with PeakMeter(device) as meter:
                    if req is None:
                        req = pipeline.start(image, opts, self.models, device, detections is not None, t0, mask)
                        if opts.mode == AUTO:
                            released = pipeline.ready_for(self.models, req.mode, opts, device, self._mode_heaps)
                        req = req.with_released(released, "openvino" if self.models.released_openvino else "torch" if self._mode_heaps else "heap")
                    # The meter's baseline is where the mode's memory plan starts (decoding included).
                    req = replace(req, given=detections, start_rss=meter.baseline_rss)
                    out = pipeline.attempt_or_none(self.models, device, req, opts, report)
                assert meter.peaks is not None
                attempts.append(Attempt(req.mode.name, meter.peaks, "ok" if out is not None else "out of memory"))
                if out is not None:
                    notes = out.notes
                    if meter.peaks.shared:  # the figures include concurrent work: say so with them
                        notes = (*notes, SHARED_NOTE)
                    return replace(out, peaks=meter.peaks, attempts=tuple(attempts), notes=notes)
                # Out of memory: free everything this call allocated, then step down one mode.
                self.models.free(device)
                req = pipeline.step_down(req, [a.mode for a in attempts], opts.task)


def conversion_busy(kind: str, name: str, what: str) -> str | None:
    """The note for a request that finds ``kind`` ``name`` being converted to OpenVINO in the background, else None."""
    from gpen_core.engine.prepare import busy_note, token

    return busy_note(token(kind, name), what)


def _check_cuda(device: str) -> None:
    """InputError for a CUDA device this machine does not have (none, or "cuda:5" with one GPU), before any
    work: torch would fail only later, deep in a model load, with a bare RuntimeError."""
    import torch

    if not torch.cuda.is_available():
        raise InputError("CUDA was requested but no CUDA device is available; use device 'cpu'")
    try:
        index = torch.device(device).index
    except RuntimeError:
        raise InputError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'") from None
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        have = ", ".join(f"cuda:{i}" for i in range(count))
        raise InputError(
            f"device {device!r} does not exist: this machine has {count} CUDA device{'s' if count != 1 else ''} "
            f"({have}); use one of them, or 'cuda' for the first"
        )


_INSTANCE: Restorer | None = None
_INSTANCE_LOCK = threading.Lock()


def default_device() -> str:
    """Where a request runs when no device is named: CUDA where PyTorch sees a GPU, else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def get_restorer(models_dir: str | os.PathLike[str] | None = None, device: str | None = None) -> Restorer:
    """The process-wide Restorer, made by the first call with its arguments; an argument later that differs from
    those raises ValueError (it could not apply: make a :class:`Restorer` of your own)."""
    global _INSTANCE
    with _INSTANCE_LOCK:
        if _INSTANCE is None:
            _INSTANCE = Restorer(models_dir=models_dir, device=device, serves_many_modes=True)
        made = {"models_dir": _INSTANCE.models_dir, "device": _INSTANCE._device_pref}
        asked = {"models_dir": models_dir, "device": device}
        differs = [k for k, v in asked.items() if v is not None and _same_setting(k, v) != _same_setting(k, made[k])]
        if differs:
            now = ", ".join(f"{k}={asked[k]!r}" for k in differs)
            then = ", ".join(f"{k}={made[k]!r}" for k in differs)
            raise ValueError(
                f"get_restorer({now}): the process-wide Restorer was already made with {then}, and one instance "
                "serves the whole process. Call get_restorer() without arguments to use it, or make your own "
                f"Restorer({now})."
            )
        return _INSTANCE


def _same_setting(name: str, value: Any) -> Any:
    """``value`` in a form two spellings of the same setting compare equal in (a folder: resolved)."""
    if name == "models_dir" and value is not None:
        return Path(value).expanduser().resolve()
    return value
