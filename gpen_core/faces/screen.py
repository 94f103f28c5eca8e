"""Is a detection a face? Checks on RetinaFace's box and 5 landmarks, before restoring.

RetinaFace (mobilenet0.25 above all) sometimes scores a dress, a cat, gravel or the moon
above GPEN's 0.9 threshold. GPEN then "restores" it: a hallucinated face pasted onto the
photo. Two tests, both measured on real photos with the real detector
(docs/detection.md):

1. **Geometry** (:func:`check`, free): the least-squares similarity (rotation, uniform
   scale, shift: what the alignment uses) from the 5 landmarks to GPEN's template must
   fit (RMS residual / template eye distance), every landmark must lie inside the box
   (with a margin), the box must have a face's aspect and the eye distance a sane share
   of its width, both in the face's own frame (a face on its side has a wide box). The
   fitted rotation never rejects: a face at any angle whose landmarks fit is aligned
   upright by the same similarity. Real faces, profile ones included, pass; this catches
   landmark sets that are not a face at all.
2. **A second look** (:func:`second_looks`, one detector forward for all candidates):
   each box's neighbourhood is cut out and scaled so the box is :data:`LOOK_BOX_PX` px
   (the crops go into one mosaic), and the detector must find the face there again, at
   the same threshold. Texture
   (gravel, coins, cells, the moon) and animal faces that fool the detector at one scale
   do not survive a second scale; measured: every real face ≥ 0.993, every false
   detection ≤ 0.46 (of those scoring ≥ 0.9 the first time).

Pure NumPy and OpenCV; the detector comes in as a function. Points are (x, y) in image pixels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.faces.align import align_transform, reference_points, umeyama
from gpen_core.faces.turns import CV2_TURN, unturn

# The second look: the candidate's box is scaled to this many pixels (its neighbourhood,
# LOOK_CONTEXT box sizes wide, around it). Measured: real faces 0.993-1.000 at 64 px,
# false detections 0-0.46; at 160 px false ones reach 0.95 (moon, cells).
LOOK_BOX_PX = 64
LOOK_CONTEXT = 3.0
# A detection found in the second look matches the candidate when their boxes overlap this much.
LOOK_MIN_IOU = 0.4

_NOT_FOUND_AGAIN = "it was not found again at a standard face size"
_PLURAL = {
    "its landmarks do not form a face": "their landmarks do not form a face",
    "its landmarks lie outside its box": "their landmarks lie outside their boxes",
    "its box has no face's shape": "their boxes have no face's shape",
    "its eyes do not fit its box": "their eyes do not fit their boxes",
    "its landmarks are not 5 finite points": "their landmarks are not 5 finite points",
    _NOT_FOUND_AGAIN: "they were not found again at a standard face size",
}


@dataclass(frozen=True)
class Limits:
    """Where a detection stops being a face. Each field: the limit, and why it sits there."""

    # RMS landmark residual / template eye distance. Measured on real faces: 0.03-0.12 frontal
    # (Solvay 0.03-0.09, FFHQ, astronaut), 0.31 for the cameraman's profile; 5 scattered
    # points ~0.6, 5 collinear ones 0.42. The moon's false face reached 0.31 too: the
    # second look, not the geometry, rejects it.
    max_fit: float = 0.35
    # Landmarks may sit this far outside the box, as a fraction of the box size.
    box_margin: float = 0.10
    # Box height / width. Real faces measured: 1.07-1.68.
    min_aspect: float = 0.8
    max_aspect: float = 2.2
    # Eye distance / box width. Real faces measured: 0.23 (profile)-0.51.
    min_eye_ratio: float = 0.15
    max_eye_ratio: float = 0.75


LIMITS = Limits()

_TEMPLATE = reference_points(512)
_TEMPLATE_EYE_DIST = float(np.linalg.norm(_TEMPLATE[1] - _TEMPLATE[0]))


@dataclass(frozen=True)
class Plausibility:
    """The measured geometry of one detection and the verdict.

    ``fit``: RMS residual / eye distance (template units). ``tilt_deg``: fitted rotation.
    ``aspect``: box h/w. ``eye_ratio``: eye distance / box width. ``outside``: the largest
    distance of a landmark outside the box, as a fraction of the box size (0 when all
    inside). ``reasons``: why it is not a face (empty when it is).
    """

    fit: float
    tilt_deg: float
    aspect: float
    eye_ratio: float
    outside: float
    reasons: tuple[str, ...]

    @property
    def is_face(self) -> bool:
        return not self.reasons


def _fit(landmarks: np.ndarray) -> tuple[float, float]:
    """(RMS residual / template eye distance, rotation in degrees) of landmarks → template.

    The alignment's own least-squares similarity (:func:`gpen_core.faces.align.umeyama`), so
    "fits" means "the alignment will put these points where the generator expects them"."""
    src = landmarks.astype(np.float64)
    if src.var(axis=0).sum() <= 1e-12:
        return float("inf"), 0.0
    t, scale = umeyama(src, _TEMPLATE)
    if not (np.isfinite(t).all() and np.isfinite(scale) and scale > 0):
        return float("inf"), 0.0
    mapped = src @ t[:2, :2].T + t[:2, 2]
    rms = float(np.sqrt(((mapped - _TEMPLATE) ** 2).sum(axis=1).mean()))
    rot = t[:2, :2] / scale
    # rot maps image → template; the face's own tilt in the image is the inverse rotation.
    tilt = float(np.degrees(np.arctan2(rot[0, 1], rot[0, 0])))
    return rms / _TEMPLATE_EYE_DIST, tilt


def check(box: Sequence[float], landmarks: np.ndarray, limits: Limits = LIMITS) -> Plausibility:
    """Test one detection: ``box`` (x0, y0, x1, y1), ``landmarks`` (5, 2) (x, y): eyes, nose, mouth corners."""
    lm = np.asarray(landmarks, dtype=np.float64)
    if lm.shape != (5, 2) or not np.isfinite(lm).all():
        return Plausibility(float("inf"), 0.0, 0.0, 0.0, 0.0, ("its landmarks are not 5 finite points",))
    x0, y0, x1, y1 = (float(v) for v in box)
    bw, bh = max(x1 - x0, 1e-6), max(y1 - y0, 1e-6)
    fit, tilt = _fit(lm)
    if 45.0 < abs(tilt) < 135.0:
        # A face lying on its side: its height runs along the image's x axis. Measured in the
        # face's own frame, so rotation alone never rejects a face whose landmarks fit.
        bw, bh = bh, bw
    aspect = bh / bw
    eye_ratio = float(np.linalg.norm(lm[1] - lm[0])) / bw
    ox = np.maximum(x0 - lm[:, 0], lm[:, 0] - x1).clip(min=0) / bw
    oy = np.maximum(y0 - lm[:, 1], lm[:, 1] - y1).clip(min=0) / bh
    outside = float(max(ox.max(), oy.max()))

    reasons: list[str] = []
    if not fit <= limits.max_fit:
        reasons.append("its landmarks do not form a face")
    if outside > limits.box_margin:
        reasons.append("its landmarks lie outside its box")
    if not limits.min_aspect <= aspect <= limits.max_aspect:
        reasons.append("its box has no face's shape")
    if not limits.min_eye_ratio <= eye_ratio <= limits.max_eye_ratio:
        reasons.append("its eyes do not fit its box")
    return Plausibility(fit, tilt, aspect, eye_ratio, outside, tuple(reasons))


@dataclass(frozen=True)
class Filtered:
    """Detections split into kept faces and rejected candidates (each with its verdict), order kept."""

    kept: tuple
    rejected: tuple  # tuple[(detection, Plausibility), ...]

    def note(self) -> str | None:
        """One sentence for the result's notes, or None when nothing was rejected.

        E.g. "1 detection rejected: its landmarks do not form a face".
        """
        if not self.rejected:
            return None
        n = len(self.rejected)
        reasons: list[str] = []
        for _, verdict in self.rejected:
            if verdict.reasons and verdict.reasons[0] not in reasons:
                reasons.append(verdict.reasons[0])
        if n > 1:
            reasons = [_PLURAL.get(r, r) for r in reasons]
        return f"{n} detection{'s' if n > 1 else ''} rejected: {'; '.join(reasons)}"


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


DetectFn = Callable[[np.ndarray], Iterable]


def _look_crop(rgb: np.ndarray, box: Sequence[float]) -> tuple[np.ndarray, float, float, int, int] | None:
    """The box's neighbourhood scaled so the box is LOOK_BOX_PX: (crop, fx, fy, X0, Y0) or None."""
    h, w = rgb.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    side = max(x1 - x0, y1 - y0, 1.0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    half = LOOK_CONTEXT * side / 2
    X0, Y0 = int(max(0, cx - half)), int(max(0, cy - half))
    X1, Y1 = int(min(w, cx + half)), int(min(h, cy + half))
    if X1 - X0 < 2 or Y1 - Y0 < 2:
        return None
    f = LOOK_BOX_PX / side
    cw, ch = max(8, round((X1 - X0) * f)), max(8, round((Y1 - Y0) * f))
    interp = cv2.INTER_AREA if f < 1 else cv2.INTER_LINEAR
    crop = cv2.resize(np.ascontiguousarray(rgb[Y0:Y1, X0:X1]), (cw, ch), interpolation=interp)
    return crop, (X1 - X0) / cw, (Y1 - Y0) / ch, X0, Y0


_TILE_GAP = 32  # black pixels between second-look crops in one mosaic


def second_looks(
    rgb: np.ndarray, boxes: Sequence[Sequence[float]], detect: DetectFn, threshold: float, turns: Sequence[int] | None = None
) -> list[float]:
    """For each box, the best score ``detect`` gives the same face with the box scaled to :data:`LOOK_BOX_PX`.

    ``rgb``: the image the boxes are in (H×W×3 uint8; the colour order is the detector's).
    All neighbourhoods go into one mosaic (tiles apart by a black gap) and ``detect``
    runs once. ``detect(image)`` returns objects with ``.box`` and ``.score`` in that
    image's pixels and must not shrink it. 0.0 where nothing overlapping the box is
    found at ``threshold`` or above. ``turns``: per box, the quarter turns (counter-clockwise) its
    face was found on; its crop is turned the same way, so the face is looked at upright.
    """
    turns = list(turns) if turns is not None else [0] * len(boxes)
    looks: list[tuple | None] = []
    for b, t in zip(boxes, turns):
        look = _look_crop(rgb, b)
        if look is not None:  # + the unturned crop's (width, height), to map found boxes back
            crop = look[0]
            look = (cv2.rotate(crop, CV2_TURN[t]) if t else crop, *look[1:], crop.shape[1], crop.shape[0])
        looks.append(look)
    best = [0.0] * len(looks)
    placed = [(i, look) for i, look in enumerate(looks) if look is not None]
    if not placed:
        return best
    tile = round(LOOK_CONTEXT * LOOK_BOX_PX) + 2 + _TILE_GAP
    cols = math.ceil(math.sqrt(len(placed)))
    rows = math.ceil(len(placed) / cols)
    mosaic = np.zeros((rows * tile, cols * tile, rgb.shape[2]), rgb.dtype)
    for k, (_, (crop, *_rest)) in enumerate(placed):
        r, c = divmod(k, cols)
        ch, cw = crop.shape[:2]
        mosaic[r * tile : r * tile + ch, c * tile : c * tile + cw] = crop
    for found in detect(mosaic):
        if found.score < threshold:
            continue
        bx0, by0, bx1, by1 = found.box
        c, r = int((bx0 + bx1) / 2 // tile), int((by0 + by1) / 2 // tile)
        k = r * cols + c
        if not (0 <= c < cols and k < len(placed)):
            continue
        i, (_crop, fx, fy, X0, Y0, cw, ch) = placed[k]
        ox, oy = c * tile, r * tile
        corners = unturn(np.array([[bx0 - ox, by0 - oy], [bx1 - ox, by1 - oy]], dtype=np.float64), turns[i], cw, ch)
        (mx0, my0), (mx1, my1) = corners.min(axis=0), corners.max(axis=0)
        mapped = (mx0 * fx + X0, my0 * fy + Y0, mx1 * fx + X0, my1 * fy + Y0)
        if _iou(mapped, boxes[i]) >= LOOK_MIN_IOU:
            best[i] = max(best[i], float(found.score))
    return best


def second_look(rgb: np.ndarray, box: Sequence[float], detect: DetectFn, threshold: float) -> float:
    """:func:`second_looks` for one box."""
    return second_looks(rgb, [box], detect, threshold)[0]


def filter_detections(
    detections: Iterable,
    *,
    rgb: np.ndarray | None = None,
    detect: DetectFn | None = None,
    threshold: float = 0.9,
    limits: Limits = LIMITS,
    turns: Sequence[int] | None = None,
) -> Filtered:
    """Split objects with ``.box``, ``.score`` and ``.landmarks`` (e.g. :class:`gpen_core.faces.detect.Detection`).

    Geometry always; the second look too when ``rgb`` (the image the boxes are in) and
    ``detect`` are given, at ``threshold`` (the detection threshold used).
    """
    detections = list(detections)
    verdicts = [check(det.box, det.landmarks, limits) for det in detections]
    if rgb is not None and detect is not None:
        todo = [i for i, v in enumerate(verdicts) if v.is_face]
        turn_of = list(turns) if turns is not None else [0] * len(detections)
        scores = second_looks(rgb, [detections[i].box for i in todo], detect, threshold, [turn_of[i] for i in todo])
        for i, score in zip(todo, scores):
            if score < threshold:
                v = verdicts[i]
                verdicts[i] = Plausibility(v.fit, v.tilt_deg, v.aspect, v.eye_ratio, v.outside, (_NOT_FOUND_AGAIN,))
    kept, rejected = [], []
    for det, verdict in zip(detections, verdicts):
        if verdict.is_face:
            kept.append(det)
        else:
            rejected.append((det, verdict))
    return Filtered(tuple(kept), tuple(rejected))


# The upright look: is the face the right way up for its landmarks? Each candidate's
# aligned crop (the alignment's own similarity, template at UPRIGHT_LOOK_PX with as much
# context again around it) and the same crop turned 180° go into one mosaic; one detector
# forward scores both. The 5-point template is nearly symmetric top to bottom, so landmarks
# read "upright" off an upside-down face fit as well as true ones: only the pixels tell.
# Measured (mobilenet0.25): on 33 upright faces (Solvay, FFHQ, astronaut, Grace Hopper,
# LFW) the upright crop scored 0.44-0.999 and above the turned one every time; on 7
# upside-down faces read as upright the turned crop scored higher every time.
UPRIGHT_LOOK_PX = 96
# Scores down to this count in the comparison (it compares, it does not accept faces).
UPRIGHT_LOOK_THRESHOLD = 0.3


def _aligned_look(rgb: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    s = UPRIGHT_LOOK_PX
    fwd, _ = align_transform(landmarks, s)
    m = fwd.copy()
    m *= 0.5  # the template at half the tile, centred: context all around
    m[:, 2] += s * 0.5
    return cv2.warpAffine(rgb, m, (2 * s, 2 * s), flags=cv2.INTER_LINEAR)


def upright_looks(rgb: np.ndarray, landmarks: Sequence[np.ndarray], detect: DetectFn) -> list[tuple[float, float]]:
    """For each landmark set (5, 2) in ``rgb``: (score of its aligned crop, score of that crop turned 180°).

    ``detect(image)`` must not shrink the image and should accept scores down to
    :data:`UPRIGHT_LOOK_THRESHOLD`; 0.0 where no face is found near the tile's centre.
    ``upright < turned`` means the landmarks put the face upside down.
    """
    n = len(landmarks)
    scores = [[0.0, 0.0] for _ in range(n)]
    if n == 0:
        return []
    tile = 2 * UPRIGHT_LOOK_PX + _TILE_GAP
    cols = 2 * math.ceil(math.sqrt(n))  # pairs side by side: upright, turned
    rows = math.ceil(2 * n / cols)
    mosaic = np.zeros((rows * tile, cols * tile, rgb.shape[2]), rgb.dtype)
    for i, lm in enumerate(landmarks):
        crop = _aligned_look(rgb, np.asarray(lm, dtype=np.float64))
        for k, view in enumerate((crop, cv2.rotate(crop, cv2.ROTATE_180))):
            r, c = divmod(2 * i + k, cols)
            mosaic[r * tile : r * tile + view.shape[0], c * tile : c * tile + view.shape[1]] = view
    centre, near = UPRIGHT_LOOK_PX, 0.35 * UPRIGHT_LOOK_PX
    for found in detect(mosaic):
        bx0, by0, bx1, by1 = found.box
        cx, cy = (bx0 + bx1) / 2, (by0 + by1) / 2
        c, r = int(cx // tile), int(cy // tile)
        j = r * cols + c
        if not (0 <= c < cols and j < 2 * n):
            continue
        if max(abs(cx - c * tile - centre), abs(cy - r * tile - centre)) > near:
            continue
        i, k = divmod(j, 2)
        scores[i][k] = max(scores[i][k], float(found.score))
    return [(a, b) for a, b in scores]
