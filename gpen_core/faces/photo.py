"""One photo: each detected face aligned → restored → pasted back (an aligned face crop restored directly).
RGB uint8 H×W×3 in and out."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.faces import tasks
from gpen_core.faces.align import align_transform, reference_points
from gpen_core.faces.identity import IdentityPolicy, face_note
from gpen_core.faces.detect import Detection
from gpen_core.rgb import check_rgb
from gpen_core.errors import InputError
from gpen_core.faces.paste import WARP_FLAGS, ParsingFn, Piece, compose, face_mask, warp_piece
from gpen_core.result import Face, IdentityCheck

# Official GPEN: a face whose box is under 100 px gets this 3×3 Gaussian once restored (not sharp on a soft photo).
_SMALL_FACE_PX = 100
_SMOOTH_KERNEL = np.array([[0.0625, 0.125, 0.0625], [0.125, 0.25, 0.125], [0.0625, 0.125, 0.0625]], np.float32)


@dataclass(frozen=True, eq=False)
class PhotoOutput:
    """What :func:`restore_photo` made."""

    image: np.ndarray  # RGB uint8 H×W×3, a new array: the input's pixels when no face was found or paste=False
    faces: tuple[Face, ...]  # one per restored face, in the order pasted
    timings: dict[str, float]  # seconds per stage: align_s, restore_s, paste_s, identity_s
    notes: tuple[str, ...] = ()  # plain sentences for the user


RestoreFn = Callable[[np.ndarray], np.ndarray]
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True, eq=False)
class FaceJob:
    """How every face of one photo is restored and pasted back; the defaults are GPEN's photo enhancement."""

    alpha: float = 1.0  # 1 = the restored face, 0 = the original crop (cv2.addWeighted)
    paste: bool = True  # False: restore the crops only, the image is a copy of the input
    # Restored crop → float mask H×W in [0, 1] replacing GPEN's feathered rectangle (ParsingMasker).
    parsing_fn: ParsingFn | None = None
    aligned: bool = False  # the input already is an aligned face crop: no detections needed
    # Paste onto this RGB uint8 image of the photo's size (GPEN's --use_sr: the upscaled photo).
    background: np.ndarray | None = None
    # An aligned result back at the input's size; False keeps it at the generator's (inpainting, seg2face).
    aligned_at_input_size: bool = True
    damage: tasks.Damage | None = None  # inpainting: only the faces it touches run, seen white
    identity: IdentityPolicy | None = None  # measure each face's identity distance and act over its limit


_STAGES = ("align_s", "restore_s", "paste_s", "identity_s")  # PhotoOutput.timings' keys, in stage order


def _restore_checked(
    restore_fn: RestoreFn, crop: np.ndarray, size: int, job: FaceJob, smooth: bool
) -> tuple[np.ndarray, IdentityCheck | None, np.ndarray | None]:
    """One aligned crop restored, smoothed (``smooth``), blended by ``job.alpha`` and checked: (the unsmoothed
    output, the identity check or None, the crop to paste or None: keep the original)."""
    raw = restore_fn(crop)
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.shape != (size, size, 3):
        desc = f"{raw.dtype} {raw.shape}" if isinstance(raw, np.ndarray) else type(raw).__name__
        raise ValueError(f"restore_fn must return an RGB uint8 {size}×{size}×3 crop, got {desc}")
    restored = cv2.filter2D(raw, -1, _SMOOTH_KERNEL) if smooth else raw
    restored = cv2.addWeighted(restored, job.alpha, crop, 1.0 - job.alpha, 0.0)
    check, chosen = job.identity.check(crop, restored) if job.identity is not None else (None, restored)
    return raw, check, chosen


def _identity_notes(faces: list[Face], identity: IdentityPolicy | None) -> list[str]:
    notes = [face_note(i, f.identity, identity.alpha) for i, f in enumerate(faces, 1) if identity and f.identity]
    return [n for n in notes if n]


def _restore_aligned(rgb: np.ndarray, restore_fn: RestoreFn, size: int, job: FaceJob, progress: ProgressFn | None) -> PhotoOutput:
    h, w = rgb.shape[:2]
    notes: list[str] = []
    t0 = time.perf_counter()
    crop = rgb
    if (h, w) != (size, size):
        # INTER_LINEAR, as the official FaceGAN.process resizes its input.
        crop = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_LINEAR)
        back = " and back" if job.aligned_at_input_size else " (the result stays at that size, as official)"
        notes.append(f"aligned input {w}×{h} was resized to {size}×{size} for the generator{back}")
    t1 = time.perf_counter()
    _, check, chosen = _restore_checked(restore_fn, crop, size, job, smooth=False)
    t2 = time.perf_counter()
    if job.paste and chosen is not None:
        same = (h, w) == (size, size) or not job.aligned_at_input_size
        image = chosen.copy() if same else cv2.resize(chosen, (w, h), interpolation=cv2.INTER_LINEAR)
    else:  # faces-only, or the original kept: the input, pixel for pixel
        image = rgb.copy()
    t3 = time.perf_counter()
    # An aligned crop has no detection: the face is the whole image, its landmarks the template.
    lm = (reference_points(size) * (w / size, h / size)).astype(np.float32)
    face = Face(box=(0.0, 0.0, float(w), float(h)), score=1.0, landmarks=lm, crop=crop,
                restored=crop if chosen is None else chosen, identity=check)
    if progress is not None:
        progress(1, 1)
    identity_s = check.seconds if check is not None else 0.0
    timings = dict(zip(_STAGES, (t1 - t0, t2 - t1 - identity_s, t3 - t2, identity_s)))
    return PhotoOutput(image, (face,), timings, tuple(notes + _identity_notes([face], job.identity)))


def restore_photo(rgb: np.ndarray, *, detections: list[Detection] | None, restore_fn: RestoreFn, size: int,
                  job: FaceJob = FaceJob(), progress: ProgressFn | None = None) -> PhotoOutput:
    """Every detected face of an RGB uint8 H×W×3 photo restored and pasted back (none: the photo and a note).
    ``detections``: None only with ``job.aligned``. ``restore_fn``: an aligned RGB uint8 ``size``×``size``×3 crop →
    its restoration, same shape, input unmodified. ``progress(done, total)`` after each face."""
    rgb = check_rgb(rgb)
    alpha, paste, background, damage = job.alpha, job.paste, job.background, job.damage
    if not 0.0 <= alpha <= 1.0:
        raise InputError(f"alpha must be between 0 (original face) and 1 (restored face), got {alpha}")
    if job.aligned:
        return _restore_aligned(rgb, restore_fn, size, job, progress)
    if background is not None and (background.shape != rgb.shape or background.dtype != np.uint8):
        raise ValueError(f"background must be RGB uint8 of the photo's shape {rgb.shape}, got {background.dtype} {background.shape}")
    base = rgb if background is None else background
    if detections is None:
        raise ValueError("detections is None: pass FaceDetector.detect(...) results, or aligned=True for a face crop")

    timings = dict.fromkeys(_STAGES, 0.0)
    if not detections:
        note = ("no face found: the photo is returned unchanged. Try a lower detection threshold, "
                "or the aligned option if the image is already a face crop.")
        return PhotoOutput(base.copy(), (), timings, (note,))

    faces: list[Face] = []
    pieces: list[Piece] = []
    for i, det in enumerate(detections):
        done = _restore_face(rgb, det, restore_fn, size, job)
        if done is not None:  # None: the damage does not touch this face
            face, piece, spent = done
            faces.append(face)
            pieces += [piece] if piece is not None else []
            for key, seconds in zip(_STAGES, spent):
                timings[key] += seconds
        if progress is not None:
            progress(i + 1, len(detections))
    t0 = time.perf_counter()
    image = compose(base, pieces) if paste else base.copy()
    timings["paste_s"] += time.perf_counter() - t0
    notes = [] if damage is None else _damage_notes(damage, detections, len(faces), len(detections) - len(faces))
    return PhotoOutput(image, tuple(faces), timings, tuple(notes + _identity_notes(faces, job.identity)))


def _restore_face(
    rgb: np.ndarray, det: Detection, restore_fn: RestoreFn, size: int, job: FaceJob,
) -> tuple[Face, Piece | None, tuple[float, float, float, float]] | None:
    """Align, restore, check and (``job.paste``) warp back one face: (the face, its piece or None, seconds per
    stage), or None when ``job.damage`` does not touch this face (nothing runs for it)."""
    h, w = rgb.shape[:2]
    t0 = time.perf_counter()
    fwd, inv = align_transform(det.landmarks, size)
    crop = cv2.warpAffine(rgb, fwd, (size, size), flags=WARP_FLAGS)
    hurt = None
    if job.damage is not None:
        hurt = cv2.warpAffine(job.damage.mask.astype(np.float32), fwd, (size, size), flags=cv2.INTER_LINEAR)
        if not tasks.touches(hurt, job.damage.from_photo):
            return None
        crop[hurt > 0.5] = 255  # the strokes white, as the network was trained to see them
    t1 = time.perf_counter()
    # The detector's box, not the clipped one, as official: a big face cut by the photo's edge is not small.
    x0, y0, x1, y1 = getattr(det, "full_box", det.box)
    small = min(x1 - x0, y1 - y0) < _SMALL_FACE_PX
    raw, check, chosen = _restore_checked(restore_fn, crop, size, job, smooth=small)
    identity_s = check.seconds if check is not None else 0.0
    t2 = time.perf_counter()
    piece = None
    if job.paste and chosen is not None:  # None: the original face kept, its pixels untouched
        mask = face_mask(raw, job.parsing_fn, size)  # on the unsmoothed face, as official
        if hurt is not None:
            mask = mask * tasks.damage_paste_mask(hurt)
        piece = warp_piece(chosen, mask, inv, w, h)
    t3 = time.perf_counter()
    face = Face(box=det.box, score=det.score, landmarks=det.landmarks, crop=crop,
                restored=crop if chosen is None else chosen, identity=check)
    return face, piece, (t1 - t0, t2 - t1 - identity_s, t3 - t2, identity_s)


def _damage_notes(damage: tasks.Damage, detections: list[Detection], inpainted: int, skipped: int) -> list[str]:
    total = len(detections)
    notes = [f"inpainted {inpainted} of {total} face{'s' if total > 1 else ''}: the ones the damage touches"
             + (f"; {skipped} left as they were" if skipped else "")]
    if tasks.outside_faces(damage.mask, [d.box for d in detections]):
        notes.append("damage outside the faces is left as it is: GPEN's inpainting network fills faces only")
    return notes
