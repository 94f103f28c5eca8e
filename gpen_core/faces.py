"""The face pipeline: detect → align to GPEN's template → restore fn → paste back.

This is the only module that knows facexlib and OpenCV's BGR order. Every public
function and class takes and returns RGB uint8 H×W×3; BGR exists only on the way
into RetinaFace and ParseNet.

The paste-back follows the official yangxy/GPEN ``face_enhancement.py`` (smoothing
of small faces, ``cv2.addWeighted`` alpha blend, feathered-rectangle or parsing mask,
``flags=3`` warps, "a later face only takes pixels where its mask exceeds the
mask so far", ``img*(1-mask) + face*mask``), with one deliberate difference: the
official code warps every face and its mask into full-frame buffers; here each face
is warped into a buffer the size of its own paste box only, so memory grows with the
faces, not with the photo. Pixels outside every paste box are never written.

facexlib and torch are imported when a detector or parser is built, not at import.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import cv2
import numpy as np

from .align import align_transform, reference_points
from .errors import GPENError, InputError, WeightsError
from .masks import parsing_labels_to_mask, rectangle_mask
from .result import Face

if TYPE_CHECKING:
    import torch

Network = Literal["mobilenet0.25", "resnet50"]

# Our names → facexlib's RetinaFace(network_name=...).
_FACEXLIB_NETWORK = {"mobilenet0.25": "mobile0.25", "resnet50": "resnet50"}

# Two mobilenet0.25 RetinaFaces share facexlib's keys and shapes but not their behaviour:
# biubug6/Pytorch_Retinaface (LeakyReLU 0.1 in backbone/FPN/SSH, anchors 16..512; what
# facexlib's class implements) and biubug6/Face-Detector-1MB-with-landmark (plain ReLU
# everywhere, anchors 10..256). Running 1MB weights with facexlib's settings gives boxes
# and landmarks about twice the face's size, phantom faces on flat gray and misses large
# faces, while shapes still load strictly. The file decides which one it is (see
# _trained_with_relu); the anchors follow from the variant.
_MOBILENET_1MB_MIN_SIZES = [[10, 20], [32, 64], [128, 256]]

# Official GPEN: faces whose detection box is under 100 px get this 3×3 Gaussian
# after restoration, so a sharp 512 px face does not look pasted onto a soft photo.
_SMALL_FACE_PX = 100
_SMOOTH_KERNEL = np.array(
    [[0.0625, 0.125, 0.0625], [0.125, 0.25, 0.125], [0.0625, 0.125, 0.0625]],
    dtype=np.float32,
)

# The official warp_and_crop_face and paste-back pass ``flags=3``. That is cv2.INTER_AREA
# (INTER_CUBIC is 2), which warpAffine does not implement and runs as bilinear; we name what
# actually runs. Same pixels as flags=3, bit for bit.
_WARP_FLAGS = cv2.INTER_LINEAR


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, eq=False)
class Detection:
    """One detected face, in input-image pixels.

    ``box`` is (x0, y0, x1, y1), clipped to the image; ``landmarks`` is (5, 2)
    float32 (x, y), read-only: left eye, right eye, nose tip, left and right mouth
    corner ("left" as seen in the image).
    """

    box: tuple[float, float, float, float]
    score: float
    landmarks: np.ndarray

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass(frozen=True, eq=False)
class PhotoOutput:
    """What :func:`restore_photo` made.

    ``image``: RGB uint8 H×W×3, always a new array; equal to the input when no face
    was found or ``paste=False``. ``faces``: one :class:`gpen_core.result.Face` per
    restored face, in the order pasted. ``timings``: seconds, keys ``align_s``,
    ``restore_s``, ``paste_s``. ``notes``: plain sentences for the user.
    """

    image: np.ndarray
    faces: tuple[Face, ...]
    timings: dict[str, float]
    notes: tuple[str, ...] = ()


RestoreFn = Callable[[np.ndarray], np.ndarray]
ParsingFn = Callable[[np.ndarray], np.ndarray]
ProgressFn = Callable[[int, int], None]


# --------------------------------------------------------------------------- helpers


def import_backends() -> None:
    """Import torch and facexlib now (a one-time process cost, kept out of per-request peaks)."""
    import torch  # noqa: F401

    try:
        import facexlib.detection.retinaface  # noqa: F401
    except ImportError:  # FaceDetector reports it with the fix when a detector is built
        pass


def _check_rgb(rgb: Any, what: str = "image") -> np.ndarray:
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise InputError(
            f"{what} must be an RGB uint8 H×W×3 array, got {desc}. "
            "Convert it first (drop an alpha channel, expand grayscale to 3 channels)."
        )
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise InputError(f"{what} is empty ({rgb.shape[1]}×{rgb.shape[0]} px)")
    return np.ascontiguousarray(rgb)  # OpenCV needs positive strides (no copy when already contiguous)


def _load_state_dict(path: Path, what: str) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` on CPU, unwrap ``state_dict`` and strip ``module.``."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{what} weights not found at {path}. Download or resolve them first (gpen_core.weights).")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated file, a pickle with code, not a torch file at all
        raise WeightsError(f"cannot read {what} weights {path}: {exc}. Re-download the file.") from exc
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not obj:
        raise WeightsError(f"{path} does not hold a {what} state_dict (found {type(obj).__name__})")
    # DataParallel checkpoints prefix every key with "module." (facexlib strips it too).
    return {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in obj.items()}


def _trained_with_relu(sd: Mapping[str, Any]) -> bool:
    """True when a RetinaFace backbone was trained with plain ReLU (the 1MB variant).

    A ReLU outputs exact zeros, so a dead channel feeds the next BatchNorm a constant 0
    and that BatchNorm's running mean and variance end at ~0 (denormals). Under
    LeakyReLU(0.1) a dead channel is a constant *negative* value: variance ~0, mean not.
    """
    for key, var in sd.items():
        if not (key.startswith("body.") and key.endswith(".running_var")):
            continue
        mean = sd.get(key[: -len("running_var")] + "running_mean")
        if mean is not None and bool(((var.abs() < 1e-20) & (mean.abs() < 1e-20)).any()):
            return True
    return False


def _load_into(model: Any, sd: dict[str, Any], path: Path, what: str) -> None:
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0:3]
        raise WeightsError(
            f"{path} is not {what} weights: {' '.join(first)}. Check that the file matches the chosen network."
        ) from exc


# --------------------------------------------------------------------------- detection


class FaceDetector:
    """RetinaFace (facexlib's implementation) built from a local, verified weights file.

    Nothing is downloaded: the network is constructed directly and the given file
    is loaded with ``torch.load(weights_only=True)``. One instance may be shared;
    :meth:`detect` is serialised by a lock because facexlib keeps per-call state on
    the module.
    """

    def __init__(self, weights_path: Path | None, network: Network, device: str | torch.device = "cpu") -> None:
        """``weights_path=None`` builds a synthetic detector for the hardware check: the
        same network and compute with random weights and a zeroed class head, so it
        costs what the real one costs and reports no faces (callers pass boxes)."""
        import torch

        if network not in _FACEXLIB_NETWORK:
            raise ValueError(f"network must be one of {sorted(_FACEXLIB_NETWORK)}, got {network!r}")
        try:
            from facexlib.detection.retinaface import RetinaFace
        except ImportError as exc:
            raise GPENError(
                f"facexlib is not installed or broken ({exc}). Run `bash scripts/setup.sh`, or "
                "`pip install --no-deps facexlib==0.3.0` in this environment."
            ) from None

        self.network: Network = network
        self.device = torch.device(device)
        self.weights_path = Path(weights_path) if weights_path is not None else None
        with warnings.catch_warnings():
            # facexlib builds the resnet50 backbone with torchvision's deprecated
            # ``pretrained=False``; it downloads nothing, the warning is noise.
            warnings.simplefilter("ignore", UserWarning)
            net = RetinaFace(network_name=_FACEXLIB_NETWORK[network], half=False, phase="test", device=self.device)
        if self.weights_path is None:
            with torch.no_grad():
                for head in net.ClassHead:  # logits 0 → score 0.5, under any threshold we accept
                    for p in head.parameters():
                        p.zero_()
            sd: dict[str, Any] = {}
        else:
            sd = _load_state_dict(self.weights_path, f"RetinaFace {network}")
            _load_into(net, sd, self.weights_path, f"RetinaFace {network}")
        # "pytorch_retinaface": facexlib's settings as they are; "1mb": see _MOBILENET_1MB_MIN_SIZES.
        self.variant = "pytorch_retinaface"
        if network == "mobilenet0.25" and sd and _trained_with_relu(sd):
            self.variant = "1mb"
            for module in net.modules():
                if isinstance(module, torch.nn.LeakyReLU):
                    module.negative_slope = 0.0  # LeakyReLU(0) is ReLU
            net.cfg = {**net.cfg, "min_sizes": _MOBILENET_1MB_MIN_SIZES}  # read by PriorBox at each call
        # Channels-last weights make every convolution run NHWC (facexlib's NCHW input is
        # converted once by the first conv): 1.4-1.5x for ResNet-50 at 1000 px on the CPU.
        self._net = net.to(self.device, memory_format=torch.channels_last).eval()
        self._lock = threading.Lock()

    def detect(self, rgb: np.ndarray, *, threshold: float = 0.9, max_side: int = 1000) -> list[Detection]:
        """Faces in an RGB uint8 H×W×3 image, largest box first.

        ``threshold``: minimum RetinaFace score (GPEN's official value is 0.9).
        ``max_side``: detection runs on a copy shrunk (INTER_AREA) so its longest side
        is at most this, only if the image is larger; boxes and landmarks are mapped
        back to input pixels. Boxes are clipped to the image.
        """
        import torch

        rgb = _check_rgb(rgb)
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold}")
        if max_side < 16:
            raise ValueError(f"max_side must be at least 16 px, got {max_side}")
        h, w = rgb.shape[:2]
        small = rgb
        if max(h, w) > max_side:
            s = max_side / max(h, w)
            new_w, new_h = max(1, round(w * s)), max(1, round(h * s))
            small = cv2.resize(rgb, (new_w, new_h), interpolation=cv2.INTER_AREA)
        sh, sw = small.shape[:2]
        fx, fy = w / sw, h / sh
        # facexlib's detect_faces takes OpenCV's BGR (it subtracts BGR means 104/117/123),
        # any dtype (it casts to float32), and with use_origin_size=True does not resize.
        bgr = cv2.cvtColor(small, cv2.COLOR_RGB2BGR)
        with self._lock, torch.inference_mode():
            rows = self._net.detect_faces(bgr, conf_threshold=threshold, nms_threshold=0.4, use_origin_size=True)
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 15)  # x0 y0 x1 y1 score, then 5×(x, y)

        found: list[Detection] = []
        for row in rows:
            x0, x1 = np.clip(row[[0, 2]] * fx, 0, w)
            y0, y1 = np.clip(row[[1, 3]] * fy, 0, h)
            if x1 - x0 < 1 or y1 - y0 < 1:
                continue
            lm = row[5:15].reshape(5, 2) * (fx, fy)
            lm = lm.astype(np.float32)
            lm.setflags(write=False)
            found.append(Detection((float(x0), float(y0), float(x1), float(y1)), float(row[4]), lm))
        found.sort(key=lambda d: (d.width * d.height, d.score), reverse=True)
        return found


# --------------------------------------------------------------------------- parsing


class ParsingMasker:
    """facexlib's ParseNet (``parsing_parsenet.pth``) as a paste mask for a restored crop.

    ``masker(restored_rgb_crop)`` → float32 H×W in [0, 1] (the crop's size): face
    classes on, background/neck/cloth/hair/hat off, edges blurred (the recipe of
    facexlib's ``FaceRestoreHelper``, which GFPGAN uses). Pass it as ``parsing_fn``
    to :func:`restore_photo`.
    """

    _INPUT = 512  # ParseNet runs at 512×512

    def __init__(self, weights_path: Path, device: str | torch.device = "cpu") -> None:
        import torch
        from facexlib.parsing.parsenet import ParseNet

        self.device = torch.device(device)
        self.weights_path = Path(weights_path)
        sd = _load_state_dict(self.weights_path, "ParseNet")
        net = ParseNet(in_size=self._INPUT, out_size=self._INPUT, parsing_ch=19)
        _load_into(net, sd, self.weights_path, "ParseNet (facexlib parsing_parsenet.pth)")
        # Channels-last weights make every convolution run NHWC (facexlib's NCHW input is
        # converted once by the first conv): 1.4-1.5x for ResNet-50 at 1000 px on the CPU.
        self._net = net.to(self.device, memory_format=torch.channels_last).eval()
        self._lock = threading.Lock()

    def __call__(self, restored_rgb_crop: np.ndarray) -> np.ndarray:
        import torch

        from .tensors import to_tensor

        crop = _check_rgb(restored_rgb_crop, "restored crop")
        h, w = crop.shape[:2]
        x = crop
        if (h, w) != (self._INPUT, self._INPUT):
            x = cv2.resize(crop, (self._INPUT, self._INPUT), interpolation=cv2.INTER_LINEAR)
        # ParseNet takes RGB in [-1, 1] (facexlib: img2tensor(bgr2rgb=True), normalize 0.5/0.5),
        # which is exactly our GPEN pre-processing.
        with self._lock, torch.inference_mode():
            logits = self._net(to_tensor(x, device=self.device))[0]
            labels = logits.argmax(dim=1)[0].to("cpu", torch.int64).numpy()
        mask = parsing_labels_to_mask(labels, self._INPUT)
        if (h, w) != mask.shape:
            mask = cv2.resize(mask, (w, h))
        return np.clip(mask, 0.0, 1.0).astype(np.float32, copy=False)


# --------------------------------------------------------------------------- restoration


def _restore_crop(restore_fn: RestoreFn, crop: np.ndarray, size: int) -> np.ndarray:
    out = restore_fn(crop)
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != (size, size, 3):
        desc = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"restore_fn must return an RGB uint8 {size}×{size}×3 crop, got {desc}")
    return out


def _face_mask(restored: np.ndarray, parsing_fn: ParsingFn | None, size: int) -> np.ndarray:
    if parsing_fn is None:
        return rectangle_mask(size)
    mask = np.asarray(parsing_fn(restored), dtype=np.float32)
    if mask.ndim != 2:
        raise ValueError(f"parsing_fn must return an H×W float mask, got shape {mask.shape}")
    if mask.shape != (size, size):
        mask = cv2.resize(mask, (size, size))
    return np.clip(mask, 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class _Piece:
    """One face warped back into its own paste box of the output image."""

    x0: int
    y0: int
    x1: int
    y1: int
    mask: np.ndarray  # float32 (y1-y0, x1-x0)
    face: np.ndarray  # uint8 (y1-y0, x1-x0, 3)


def paste_box(inv: np.ndarray, crop_size: int, width: int, height: int) -> tuple[int, int, int, int] | None:
    """The output-image box (x0, y0, x1, y1; x1/y1 exclusive) a crop warped by ``inv`` can touch.

    The inverse-transformed crop corners, widened by the reach of the interpolation
    kernel (2 crop pixels, generous for bilinear, in output pixels), clipped to the
    image; None when it misses the image.
    """
    s = crop_size
    corners = np.array([[0, 0, 1], [s - 1, 0, 1], [0, s - 1, 1], [s - 1, s - 1, 1]], dtype=np.float64) @ inv.T
    scale = math.sqrt(abs(float(np.linalg.det(inv[:, :2]))))
    margin = math.ceil(2.0 * max(1.0, scale)) + 1
    x0 = max(0, math.floor(corners[:, 0].min()) - margin)
    y0 = max(0, math.floor(corners[:, 1].min()) - margin)
    x1 = min(width, math.ceil(corners[:, 0].max()) + margin + 1)
    y1 = min(height, math.ceil(corners[:, 1].max()) + margin + 1)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1, y1


def _warp_piece(face: np.ndarray, mask: np.ndarray, inv: np.ndarray, width: int, height: int) -> _Piece | None:
    box = paste_box(inv, face.shape[0], width, height)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    # The official full-frame warp, restricted to the box. warpAffine samples through the
    # inverse (output → crop) map; we invert as it does, then move that map's origin to the
    # box corner, so every box pixel reads the crop at exactly the position the full-frame
    # warp would (translating the forward matrix instead shifts OpenCV's fixed-point
    # sampling grid, which moves samples by up to 1/32 crop pixel).
    crop_from_out = cv2.invertAffineTransform(inv.astype(np.float64))
    crop_from_out[:, 2] += crop_from_out[:, :2] @ np.array([x0, y0], dtype=np.float64)
    dsize = (x1 - x0, y1 - y0)
    flags = _WARP_FLAGS | cv2.WARP_INVERSE_MAP
    wmask = cv2.warpAffine(mask, crop_from_out, dsize, flags=flags)
    wface = cv2.warpAffine(face, crop_from_out, dsize, flags=flags)
    return _Piece(x0, y0, x1, y1, wmask, wface)


def _compose(rgb: np.ndarray, pieces: list[_Piece]) -> np.ndarray:
    """``img*(1-mask) + face*mask`` inside each paste box; outside them the copy of ``rgb`` is untouched.

    ``mask``/``face`` per pixel are the official ones: faces in paste order, a later
    face takes a pixel only where its mask exceeds the mask so far. Overlapping boxes
    are resolved by replaying every overlapping piece in order inside each box.
    """
    out = rgb.copy()
    for p in pieces:
        bh, bw = p.y1 - p.y0, p.x1 - p.x0
        full_mask = np.zeros((bh, bw), np.float32)
        full_face = np.zeros((bh, bw, 3), np.uint8)
        for q in pieces:
            ix0, iy0, ix1, iy1 = max(p.x0, q.x0), max(p.y0, q.y0), min(p.x1, q.x1), min(p.y1, q.y1)
            if ix1 <= ix0 or iy1 <= iy0:
                continue
            qm = q.mask[iy0 - q.y0 : iy1 - q.y0, ix0 - q.x0 : ix1 - q.x0]
            qf = q.face[iy0 - q.y0 : iy1 - q.y0, ix0 - q.x0 : ix1 - q.x0]
            tm = full_mask[iy0 - p.y0 : iy1 - p.y0, ix0 - p.x0 : ix1 - p.x0]
            tf = full_face[iy0 - p.y0 : iy1 - p.y0, ix0 - p.x0 : ix1 - p.x0]
            take = qm > tm
            tm[take] = qm[take]
            tf[take] = qf[take]
        m = full_mask[:, :, None]
        # float32 img*(1-m) + face*m, then round+saturate (cv2.convertScaleAbs), as official;
        # written with in-place ops so only two box-sized float buffers exist at a time.
        blend = rgb[p.y0 : p.y1, p.x0 : p.x1].astype(np.float32)
        blend *= 1.0 - m
        face_part = full_face.astype(np.float32)
        face_part *= m
        blend += face_part
        out[p.y0 : p.y1, p.x0 : p.x1] = cv2.convertScaleAbs(blend)
    return out


def _restore_aligned(
    rgb: np.ndarray, restore_fn: RestoreFn, size: int, alpha: float, paste: bool, progress: ProgressFn | None
) -> PhotoOutput:
    h, w = rgb.shape[:2]
    notes: list[str] = []
    t0 = time.perf_counter()
    crop = rgb
    if (h, w) != (size, size):
        # INTER_LINEAR, as the official FaceGAN.process resizes its input.
        crop = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_LINEAR)
        notes.append(f"aligned input {w}×{h} was resized to {size}×{size} for the generator and back")
    t1 = time.perf_counter()
    restored = _restore_crop(restore_fn, crop, size)
    restored = cv2.addWeighted(restored, alpha, crop, 1.0 - alpha, 0.0)
    t2 = time.perf_counter()
    if paste:
        same = (h, w) == (size, size)
        image = restored.copy() if same else cv2.resize(restored, (w, h), interpolation=cv2.INTER_LINEAR)
    else:
        image = rgb.copy()
    t3 = time.perf_counter()
    # An aligned crop has no detection: the face is the whole image, its landmarks the template.
    lm = (reference_points(size) * (w / size, h / size)).astype(np.float32)
    face = Face(box=(0.0, 0.0, float(w), float(h)), score=1.0, landmarks=lm, crop=crop, restored=restored)
    if progress is not None:
        progress(1, 1)
    timings = {"align_s": t1 - t0, "restore_s": t2 - t1, "paste_s": t3 - t2}
    return PhotoOutput(image, (face,), timings, tuple(notes))


def restore_photo(
    rgb: np.ndarray,
    *,
    detections: list[Detection] | None,
    restore_fn: RestoreFn,
    size: int,
    alpha: float = 1.0,
    paste: bool = True,
    parsing_fn: ParsingFn | None = None,
    aligned: bool = False,
    progress: ProgressFn | None = None,
) -> PhotoOutput:
    """Restore every detected face of an RGB uint8 H×W×3 photo and paste it back.

    ``detections``: from :meth:`FaceDetector.detect` (ignored when ``aligned``; None
    is only allowed then). ``restore_fn``: aligned RGB uint8 ``size``×``size``×3 crop →
    restored crop of the same shape; must not modify its input. ``size``: the
    generator's resolution. ``alpha``: 1 = restored face, 0 = original crop
    (``cv2.addWeighted``). ``paste=False``: restore the crops only; ``image`` is a
    copy of the input. ``parsing_fn``: restored crop → float mask H×W in [0, 1] that
    replaces GPEN's feathered rectangle (see :class:`ParsingMasker`). ``aligned``: the
    input already is an aligned face: resize to ``size`` if needed, restore, return
    at the input's size. ``progress(done, total)`` is called after each face.

    No detections is not an error: the input comes back unchanged with a note.
    """
    rgb = _check_rgb(rgb)
    if size <= 0:
        raise ValueError(f"size must be the generator's positive resolution, got {size}")
    if not 0.0 <= alpha <= 1.0:
        raise InputError(f"alpha must be between 0 (original face) and 1 (restored face), got {alpha}")
    if aligned:
        return _restore_aligned(rgb, restore_fn, size, alpha, paste, progress)
    if detections is None:
        raise ValueError("detections is None: pass FaceDetector.detect(...) results, or aligned=True for a face crop")

    timings = {"align_s": 0.0, "restore_s": 0.0, "paste_s": 0.0}
    if not detections:
        note = (
            "no face found: the photo is returned unchanged. Try a lower detection threshold, "
            "or the aligned option if the image is already a face crop."
        )
        return PhotoOutput(rgb.copy(), (), timings, (note,))

    h, w = rgb.shape[:2]
    faces: list[Face] = []
    pieces: list[_Piece] = []
    total = len(detections)
    for i, det in enumerate(detections):
        t0 = time.perf_counter()
        fwd, inv = align_transform(det.landmarks, size)
        crop = cv2.warpAffine(rgb, fwd, (size, size), flags=_WARP_FLAGS)
        t1 = time.perf_counter()
        restored = _restore_crop(restore_fn, crop, size)
        raw = restored  # the parsing mask is computed on the unsmoothed face, as official
        if min(det.width, det.height) < _SMALL_FACE_PX:
            restored = cv2.filter2D(restored, -1, _SMOOTH_KERNEL)
        restored = cv2.addWeighted(restored, alpha, crop, 1.0 - alpha, 0.0)
        t2 = time.perf_counter()
        if paste:
            piece = _warp_piece(restored, _face_mask(raw, parsing_fn, size), inv, w, h)
            if piece is not None:
                pieces.append(piece)
        t3 = time.perf_counter()
        faces.append(Face(box=det.box, score=det.score, landmarks=det.landmarks, crop=crop, restored=restored))
        timings["align_s"] += t1 - t0
        timings["restore_s"] += t2 - t1
        timings["paste_s"] += t3 - t2
        if progress is not None:
            progress(i + 1, total)

    t0 = time.perf_counter()
    image = _compose(rgb, pieces) if paste else rgb.copy()
    timings["paste_s"] += time.perf_counter() - t0
    return PhotoOutput(image, tuple(faces), timings, ())
