"""The facade: ``Restorer.__call__(image, options) -> RestoreResult``.

One process-wide instance (:func:`get_restorer`) holds at most one generator, one
detector and one parsing model, and runs one call at a time under its lock, so
the peak meter around each call measures that call alone. Nothing loads at import.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GPENError, InputError, ResourceError, WeightsError
from .meter import PeakMeter
from .modes import AUTO, MODES, Detector, MemoryMode, get_mode, lighter_than
from .result import Face, RestoreResult, Timings

Progress = Callable[[float, str], None]
ImageSource = np.ndarray | bytes | str | os.PathLike[str]

DETECTOR_WEIGHTS: dict[str, str] = {
    "mobilenet0.25": "retinaface-mobilenet0.25",
    "resnet50": "retinaface-resnet50",
}


@dataclass(frozen=True)
class RestoreOptions:
    """What one request asks for; every field has a sensible default."""

    # Memory mode name, or "auto" to pick the best mode that fits the memory free now.
    mode: str = AUTO
    # Generator override: a registry name (GPEN-BFR-1024) or a path to any GPEN checkpoint.
    model: str | None = None
    # Detector override; None uses the mode's.
    detector: Detector | None = None
    # GPEN's blend: 1.0 = restored face only, 0.0 = original crop.
    alpha: float = 1.0
    # RetinaFace confidence threshold (official GPEN default 0.9).
    threshold: float = 0.9
    # At most this many faces, largest first; the result says when it bites.
    max_faces: int = 50
    # The input is already an aligned face crop: restore it directly, no detection.
    aligned: bool = False
    # Output format override ("png" / "jpeg"); None uses the mode's.
    output_format: str | None = None

    def validated(self) -> "RestoreOptions":
        if self.mode != AUTO:
            get_mode(self.mode)
        if not 0.0 <= self.alpha <= 1.0:
            raise InputError(f"blend strength (alpha) must be between 0 and 1, got {self.alpha}")
        if not 0.0 < self.threshold < 1.0:
            raise InputError(f"detection threshold must be between 0 and 1 (exclusive), got {self.threshold}")
        if self.max_faces < 1:
            raise InputError(f"max faces must be at least 1, got {self.max_faces}")
        if self.detector is not None and self.detector not in DETECTOR_WEIGHTS:
            raise InputError(f"unknown detector {self.detector!r}; choose {' or '.join(DETECTOR_WEIGHTS)}")
        if self.output_format is not None and self.output_format not in ("png", "jpeg"):
            raise InputError(f"output format must be png or jpeg, got {self.output_format!r}")
        return self


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    import torch

    # torch reports CPU allocation failures as RuntimeError("... can't allocate memory ...").
    msg = str(exc).lower()
    return isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)
    )


class _Loaded:
    """One resident model plus the key it was loaded for."""

    def __init__(self, key: tuple[Any, ...], obj: Any, name: str) -> None:
        self.key, self.obj, self.name = key, obj, name


class Restorer:
    """Restores every face in a photo and reports what it cost.

    ``models_dir``: where weights are looked up (default ``$GPEN_HOME`` or
    ``~/.cache/gpen``). ``device``: "cpu", "cuda" or None (CUDA when available).
    ``allow_download``: fetch missing weights on demand (default: never during a
    request; use ``python -m gpen_core download`` or the app's Download button).
    ``synthetic_weights``: registry generators are built with random weights of
    their exact architecture instead of loaded (the hardware check: same memory
    and time, no restoration); explicit checkpoint paths still load.
    """

    def __init__(
        self,
        models_dir: str | os.PathLike[str] | None = None,
        device: str | None = None,
        *,
        allow_download: bool = False,
        synthetic_weights: bool = False,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self._device_pref = device
        self.allow_download = allow_download
        self.synthetic_weights = synthetic_weights
        self._lock = threading.Lock()
        self._generator: _Loaded | None = None
        self._detector: _Loaded | None = None
        self._parser: _Loaded | None = None

    # ------------------------------------------------------------------ public

    @property
    def device(self) -> str:
        import torch

        if self._device_pref:
            if self._device_pref.startswith("cuda") and not torch.cuda.is_available():
                raise InputError("CUDA was requested but no CUDA device is available; use device 'cpu'")
            return self._device_pref
        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def loaded(self) -> dict[str, str | None]:
        """Names of the resident models (for the UI and tests)."""
        return {
            "generator": self._generator.name if self._generator else None,
            "detector": self._detector.name if self._detector else None,
            "parser": self._parser.name if self._parser else None,
        }

    def unload(self) -> None:
        with self._lock:
            self._free_all()

    def __call__(
        self,
        image: ImageSource,
        options: RestoreOptions | None = None,
        progress: Progress | None = None,
        *,
        detections: "list[Any] | None" = None,
    ) -> RestoreResult:
        """Restore ``image`` (RGB uint8 H×W×3 array, encoded bytes, or a file path).

        ``detections`` (``faces.Detection`` list, input-image pixels) replaces the
        detector: for callers with their own boxes and for the hardware check.

        Raises InputError (bad image or option), WeightsError (missing/corrupt
        weights, with the fix), ResourceError (out of memory even in the lightest mode).
        """
        opts = (options or RestoreOptions()).validated()
        report = progress or (lambda f, d: None)
        with self._lock:
            _import_engine()  # one-time import cost is the process's, not this request's
            # Hand back what earlier calls freed but the allocator kept: the baseline is then
            # the process as it really stands, and this call's peak counts its whole working
            # set, not only what did not fit in leftovers (which made the same request read
            # 1-100 MB apart). It also keeps an idle server small.
            _malloc_trim()
            with PeakMeter() as meter:
                t0 = time.perf_counter()
                out = self._run_with_fallback(image, opts, report, t0, detections)
            assert meter.peaks is not None
            return replace(out, peaks=meter.peaks)

    # ----------------------------------------------------------------- private

    def _run_with_fallback(self, image: ImageSource, opts: RestoreOptions, report: Progress, t0: float, given: list[Any] | None) -> RestoreResult:
        from . import auto

        # An explicit mode that pre-shrinks lets big JPEGs decode at reduced size (never below its max side).
        reduce_to = None if (opts.mode == AUTO or opts.aligned) else get_mode(opts.mode).max_side
        decoded = self._decode(image, reduce_to)
        rgb = decoded.rgb
        notes = list(decoded.notes)
        decode_s = time.perf_counter() - t0
        if opts.mode == AUTO:
            choice = auto.choose(
                device=self.device,
                image_size=(rgb.shape[1], rgb.shape[0]),
                models_dir=self.models_dir,
                available=lambda m: self._weights_present(m, opts, given is not None),
            )
            mode, reason = choice.mode, choice.reason
        else:
            mode, reason = get_mode(opts.mode), ""
            step = auto.check_fits(mode, device=self.device, image_size=(rgb.shape[1], rgb.shape[0]), models_dir=self.models_dir)
            if step is not None:
                mode, reason = step.mode, step.reason
                notes.append(reason)
        tried: list[str] = []
        while True:
            try:
                return self._run(decoded, mode, opts, reason, notes, report, t0, decode_s, given)
            except GPENError:
                raise
            except Exception as exc:
                if not _is_oom(exc):
                    raise
                del exc  # drop the traceback's frames: they hold the big tensors
            # Out of memory: free everything this call allocated, then step down one mode at a time.
            self._free_all()
            tried.append(mode.name)
            lighter = lighter_than(mode)
            if lighter is None:
                raise ResourceError(
                    f"out of memory in {' and then '.join(tried)} mode, and there is no lighter mode. Close other "
                    "programs, use a smaller photo, or use the faces-only mode; the server is still running."
                )
            reason = f"ran out of memory in {mode.name}; freed it and retried in {lighter.name}"
            notes.append(reason)
            mode = lighter

    def _decode(self, image: ImageSource, reduce_to: int | None = None):
        from .imageio import DecodedImage, decode_image

        if isinstance(image, np.ndarray):
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
                raise InputError(f"expected an RGB uint8 H×W×3 array, got {image.dtype} with shape {image.shape}")
            h, w = image.shape[:2]
            return DecodedImage(rgb=np.ascontiguousarray(image), alpha=None, format="array", original_size=(w, h), notes=())
        return decode_image(image, reduce_to=reduce_to)

    def _run(
        self,
        decoded: Any,
        mode: MemoryMode,
        opts: RestoreOptions,
        reason: str,
        notes: list[str],
        report: Progress,
        t0: float,
        decode_s: float,
        given: list[Any] | None,
    ) -> RestoreResult:
        import torch

        rgb, alpha, original_size = decoded.rgb, decoded.alpha, decoded.upright_size
        from . import faces as facelib
        from .imageio import encode_image, shrink_to_max_side
        from .tensors import to_image, to_tensor

        notes = list(notes)
        device = self.device
        in_h, in_w = rgb.shape[:2]
        if mode.max_side and not opts.aligned and max(in_h, in_w) > mode.max_side:
            rgb, _ = shrink_to_max_side(rgb, mode.max_side)
            if alpha is not None:
                alpha, _ = shrink_to_max_side(alpha[..., None].repeat(3, 2), mode.max_side)
                alpha = alpha[..., 0]
            notes.append(f"{mode.name} mode shrank the photo from {in_w}×{in_h} to {rgb.shape[1]}×{rgb.shape[0]} before restoring")

        old_threads = torch.get_num_threads()
        if mode.threads and device == "cpu" and old_threads > mode.threads:
            torch.set_num_threads(mode.threads)
        try:
            t = time.perf_counter()
            report(0.02, "loading model")
            forward, size, dtype, ckpt_name, dtype_note = self._ensure_generator(mode, opts, device)
            if dtype_note:
                notes.append(dtype_note)
            parsing_fn = self._ensure_parser(mode, device, notes) if mode.paste and not opts.aligned else None
            detector_name = "none"
            detections = None
            load_s = time.perf_counter() - t
            detect_s = 0.0
            if given is not None and not opts.aligned:
                detector_name = "given boxes"
                if self.synthetic_weights:
                    # The hardware check: run the mode's detector network for its true cost,
                    # then use the given boxes (a synthetic detector finds no faces).
                    net = opts.detector or mode.detector
                    t = time.perf_counter()
                    detector = self._ensure_detector(net, device)
                    load_s += time.perf_counter() - t
                    t = time.perf_counter()
                    detector.detect(rgb, threshold=opts.threshold, max_side=mode.detect_side)
                    detect_s = time.perf_counter() - t
                    detector_name = f"{net} ({'synthetic weights, ' if detector.weights_path is None else ''}boxes given)"
                detections = sorted(given, key=lambda d: -(d.box[2] - d.box[0]) * (d.box[3] - d.box[1]))
                if rgb.shape[:2] != (in_h, in_w):  # boxes are in input pixels; follow the pre-shrink
                    detections = [_scale_detection(d, rgb.shape[1] / in_w) for d in detections]
                if len(detections) > opts.max_faces:
                    notes.append(f"{len(detections)} boxes given; restored the {opts.max_faces} largest (max faces = {opts.max_faces})")
                    detections = detections[: opts.max_faces]
            elif not opts.aligned:
                detector_name = opts.detector or mode.detector
                t = time.perf_counter()
                detector = self._ensure_detector(detector_name, device)
                load_s += time.perf_counter() - t
                report(0.1, "detecting faces")
                t = time.perf_counter()
                detections = detector.detect(rgb, threshold=opts.threshold, max_side=mode.detect_side)
                detect_s = time.perf_counter() - t
                if len(detections) > opts.max_faces:
                    notes.append(
                        f"found {len(detections)} faces; restored the {opts.max_faces} largest (max faces = {opts.max_faces})"
                    )
                    detections = detections[: opts.max_faces]

            def restore_fn(crop: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return to_image(forward(to_tensor(crop, device=device, dtype=dtype)))

            def face_progress(k: int, n: int) -> None:
                report(0.15 + 0.75 * (k / max(n, 1)), f"restoring face {min(k + 1, n)} of {n}")

            photo = facelib.restore_photo(
                rgb,
                detections=detections,
                restore_fn=restore_fn,
                size=size,
                alpha=opts.alpha,
                paste=mode.paste,
                parsing_fn=parsing_fn,
                aligned=opts.aligned,
                progress=face_progress,
            )
            notes.extend(photo.notes)
        finally:
            if torch.get_num_threads() != old_threads:
                torch.set_num_threads(old_threads)

        report(0.92, "encoding result")
        icc = getattr(decoded, "icc_profile", None)
        t = time.perf_counter()
        fmt = opts.output_format or mode.output_format
        if mode.paste or opts.aligned:
            out_alpha = alpha if (alpha is not None and photo.image.shape[:2] == alpha.shape) else None
            if out_alpha is not None and fmt == "jpeg":
                notes.append("JPEG has no transparency: the alpha channel is not in the downloadable result")
                out_alpha = None
            encoded = encode_image(photo.image, fmt, alpha=out_alpha, icc_profile=icc)
        else:
            encoded = encode_image(face_sheet(photo.faces) if photo.faces else photo.image, fmt)
        encode_s = time.perf_counter() - t
        t_ = photo.timings
        timings = Timings(
            total_s=time.perf_counter() - t0,
            decode_s=decode_s,
            detect_s=detect_s,
            align_s=t_.get("align_s", 0.0),
            restore_s=t_.get("restore_s", 0.0),
            paste_s=t_.get("paste_s", 0.0),
            encode_s=encode_s,
            load_s=load_s,
        )
        report(1.0, "done")
        from .result import Peaks

        return RestoreResult(
            image=photo.image,
            faces=tuple(photo.faces),
            timings=timings,
            peaks=Peaks(0, 0, "vmhwm"),  # replaced by the meter's figures in __call__
            mode=mode,
            requested_mode=opts.mode,
            mode_reason=reason,
            checkpoint=ckpt_name,
            detector=detector_name,
            device=device,
            dtype=str(dtype).replace("torch.", ""),
            output_format=fmt,
            encoded=encoded,
            notes=tuple(dict.fromkeys(notes)),
            input_size=original_size,
            processed_size=(rgb.shape[1], rgb.shape[0]),
        )

    # ------------------------------------------------------------ model cache

    def _weights_present(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> bool:
        """Whether ``mode`` can run without a download (for ``auto``)."""
        from . import weights

        if self.synthetic_weights:
            return True
        if opts.model is None and weights.locate(mode.model, models_dir=self.models_dir) is None:
            return False
        if opts.aligned or boxes_given:
            return True
        detector = DETECTOR_WEIGHTS[opts.detector or mode.detector]
        return weights.locate(detector, models_dir=self.models_dir) is not None

    def _resolve(self, name: str) -> Path:
        from . import weights

        return weights.resolve(name, models_dir=self.models_dir, allow_download=self.allow_download)

    def _ensure_generator(self, mode: MemoryMode, opts: RestoreOptions, device: str):
        """The cached generator for this request; switching frees the old one first and rolls back on failure."""
        import torch

        from .fast import choose_plan, prepare

        name = opts.model or mode.model
        synthetic = self.synthetic_weights and opts.model is None
        path = Path(f"synthetic:{name}") if synthetic else self._resolve(name)
        plan, note = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)
        key = (str(path), plan)
        if self._generator is None or self._generator.key != key:
            previous = self._generator
            prev_path = Path(previous.key[0]) if previous else None
            prev_plan = previous.key[1] if previous else None
            self._generator = None
            del previous
            _release(device)
            try:
                self._generator = _Loaded(key, _load_forward(path, plan), name)
            except Exception:
                self._generator = None
                _release(device)
                if prev_path is not None:  # roll back to the model that worked
                    try:
                        self._generator = _Loaded((str(prev_path), prev_plan), _load_forward(prev_path, prev_plan), prev_path.stem)
                    except Exception:
                        self._generator = None
                raise
        forward, size = self._generator.obj
        return forward, size, plan.dtype_torch, name, note

    def _ensure_detector(self, network: str, device: str):
        from .faces import FaceDetector

        key = (network, device)
        if self._detector is None or self._detector.key != key:
            path: Path | None
            if self.synthetic_weights:
                from . import weights

                path = weights.locate(DETECTOR_WEIGHTS[network], models_dir=self.models_dir)
                path = self._resolve(DETECTOR_WEIGHTS[network]) if path is not None else None
            else:
                path = self._resolve(DETECTOR_WEIGHTS[network])
            self._detector = None
            _release(device)
            self._detector = _Loaded(key, FaceDetector(path, network, device=device), network)  # type: ignore[arg-type]
        return self._detector.obj

    def _ensure_parser(self, mode: MemoryMode, device: str, notes: list[str]):
        """ParseNet mask when the mode asks for it and the file is present; else the rectangle mask (said)."""
        from . import weights

        if not mode.parsing:
            if self._parser is not None:
                self._parser = None
                _release(device)
            return None
        path = weights.locate("parsenet", models_dir=self.models_dir)
        if path is None:
            notes.append("parsing_parsenet.pth is not in the models folder: used GPEN's feathered rectangle mask instead")
            return None
        from .faces import ParsingMasker

        key = (str(path), device)
        if self._parser is None or self._parser.key != key:
            self._parser = _Loaded(key, ParsingMasker(path, device=device), "parsenet")
        return self._parser.obj

    def _free_all(self) -> None:
        device = self.device
        self._generator = self._detector = self._parser = None
        _release(device)


def _load_forward(path: Path, plan):
    from .checkpoint import load_generator
    from .fast import prepare

    if str(path).startswith("synthetic:"):
        from .synthetic import random_generator
        from .weights import REGISTRY

        model = random_generator(REGISTRY[str(path).split(":", 1)[1]].arch)
    else:
        model = load_generator(path)
    return prepare(model, plan), model.config.size


def _import_engine() -> None:
    """Import the heavy modules (torch, OpenCV, facexlib) so the meter's baseline includes them."""
    from . import fast, faces, imageio  # noqa: F401

    faces.import_backends()


def _scale_detection(d: Any, s: float) -> Any:
    return replace(d, box=tuple(v * s for v in d.box), landmarks=(d.landmarks * s).astype(d.landmarks.dtype))


def _release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    _malloc_trim()


def _malloc_trim() -> None:
    """Give freed heap pages back to the OS (glibc), so RSS falls after a model switch."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def face_sheet(faces: tuple[Face, ...] | list[Face], cols: int = 4) -> np.ndarray:
    """Restored crops side by side (RGB uint8), the downloadable of faces-only mode."""
    size = max(f.restored.shape[0] for f in faces)
    rows = (len(faces) + cols - 1) // cols
    c = min(cols, len(faces))
    sheet = np.full((rows * size, c * size, 3), 255, np.uint8)
    for i, f in enumerate(faces):
        r, k = divmod(i, cols)
        crop = f.restored
        sheet[r * size : r * size + crop.shape[0], k * size : k * size + crop.shape[1]] = crop
    return sheet


_INSTANCE: Restorer | None = None
_INSTANCE_LOCK = threading.Lock()


def get_restorer(models_dir: str | os.PathLike[str] | None = None, device: str | None = None) -> Restorer:
    """The process-wide Restorer (created on first use; arguments only apply then)."""
    global _INSTANCE
    with _INSTANCE_LOCK:
        if _INSTANCE is None:
            _INSTANCE = Restorer(models_dir=models_dir, device=device)
        return _INSTANCE
