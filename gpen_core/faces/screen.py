"""Is a detection a face (RetinaFace scores a dress or the moon above 0.9 at times)? :func:`check` (geometry),
:func:`second_looks` (found again at LOOK_BOX_PX), :func:`upright_looks` (the right way up); docs/face-check.md.
The detector comes in as a function; points are (x, y) image pixels."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np

from gpen_core.faces.align import align_transform, reference_points, umeyama

# The second look: the box scaled to this many pixels, in a neighbourhood LOOK_CONTEXT boxes wide (measured:
# docs/detection.md; at 160 px false faces reach 0.95); a find matches the box from LOOK_MIN_IOU.
LOOK_BOX_PX = 64
LOOK_CONTEXT = 3.0
LOOK_MIN_IOU = 0.4

_NOT_FOUND_AGAIN = "it was not found again at a standard face size"

# np.rot90(img, k) (counter-clockwise) as OpenCV's faster rotate: the detector's turned copies and the second look.
CV2_TURN = {1: cv2.ROTATE_90_COUNTERCLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_CLOCKWISE}


def unturn(pts: np.ndarray, turn: int, w: int, h: int) -> np.ndarray:
    """(N, 2) (x, y) points on a ``w``×``h`` image turned ``turn`` quarter turns counter-clockwise → on the image;
    continuous coordinates (a pixel centre at +0.5), so pixel centres map exactly."""
    x, y = pts[:, 0], pts[:, 1]
    if turn == 1:
        return np.stack([w - y, x], axis=1)
    if turn == 2:
        return np.stack([w - x, h - y], axis=1)
    if turn == 3:
        return np.stack([y, h - x], axis=1)
    return np.asarray(pts, dtype=np.float64)


@dataclass(frozen=True)
class Limits:
    """Where a detection stops being a face (set from: docs/face-check.md, "Where the limits sit")."""

    max_fit: float = 0.35  # RMS landmark residual / template eye distance
    box_margin: float = 0.10  # how far landmarks may sit outside the box, as a fraction of its size
    min_aspect: float = 0.8  # box height / width
    max_aspect: float = 2.2
    min_eye_ratio: float = 0.15  # eye distance / box width
    max_eye_ratio: float = 0.75


LIMITS = Limits()

_TEMPLATE = reference_points(512)
_TEMPLATE_EYE_DIST = float(np.linalg.norm(_TEMPLATE[1] - _TEMPLATE[0]))


@dataclass(frozen=True)
class Plausibility:
    """The verdict on one detection: ``fit`` (RMS residual / eye distance, template units), ``tilt_deg``
    (the fitted rotation) and ``reasons`` it is not a face (empty when it is)."""

    fit: float
    tilt_deg: float
    reasons: tuple[str, ...]

    @property
    def is_face(self) -> bool:
        return not self.reasons


def _fit(landmarks: np.ndarray) -> tuple[float, float]:
    """(RMS residual / template eye distance, rotation in degrees) of landmarks → template by the alignment's fit."""
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


def check(box: Sequence[float], landmarks: np.ndarray) -> Plausibility:
    """Test one detection: ``box`` (x0, y0, x1, y1), ``landmarks`` (5, 2) (x, y): eyes, nose, mouth corners."""
    lm = np.asarray(landmarks, dtype=np.float64)
    if lm.shape != (5, 2) or not np.isfinite(lm).all():
        return Plausibility(float("inf"), 0.0, ("its landmarks are not 5 finite points",))
    x0, y0, x1, y1 = (float(v) for v in box)
    bw, bh = max(x1 - x0, 1e-6), max(y1 - y0, 1e-6)
    fit, tilt = _fit(lm)
    if 45.0 < abs(tilt) < 135.0:
        # A face on its side: measured in its own frame, rotation alone never rejects a face.
        bw, bh = bh, bw
    aspect = bh / bw
    eye_ratio = float(np.linalg.norm(lm[1] - lm[0])) / bw
    ox = np.maximum(x0 - lm[:, 0], lm[:, 0] - x1).clip(min=0) / bw
    oy = np.maximum(y0 - lm[:, 1], lm[:, 1] - y1).clip(min=0) / bh
    outside = float(max(ox.max(), oy.max()))

    reasons: list[str] = []
    if not fit <= LIMITS.max_fit:
        reasons.append("its landmarks do not form a face")
    if outside > LIMITS.box_margin:
        reasons.append("its landmarks lie outside its box")
    if not LIMITS.min_aspect <= aspect <= LIMITS.max_aspect:
        reasons.append("its box has no face's shape")
    if not LIMITS.min_eye_ratio <= eye_ratio <= LIMITS.max_eye_ratio:
        reasons.append("its eyes do not fit its box")
    return Plausibility(fit, tilt, tuple(reasons))


@dataclass(frozen=True)
class Filtered:
    """Detections split into kept faces and rejected candidates (each with its verdict), order kept."""

    kept: tuple
    rejected: tuple  # tuple[(detection, Plausibility), ...]


def overlap(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(IoU, intersection over the smaller box) of two (x0, y0, x1, y1) boxes."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    sa, sb = max(0.0, (a[2] - a[0]) * (a[3] - a[1])), max(0.0, (b[2] - b[0]) * (b[3] - b[1]))
    union = sa + sb - inter
    small = min(sa, sb)
    return (inter / union if union > 0 else 0.0), (inter / small if small > 0 else 0.0)


DetectFn = Callable[[np.ndarray], Iterable]
_Look = tuple[np.ndarray, float, float, int, int, int, int]


def _look_crop(rgb: np.ndarray, box: Sequence[float], turn: int) -> _Look | None:
    """The box's neighbourhood scaled so the box is LOOK_BOX_PX, then turned ``turn`` quarter turns: (crop, fx, fy,
    X0, Y0, the unturned crop's width and height) or None."""
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
    return cv2.rotate(crop, CV2_TURN[turn]) if turn else crop, (X1 - X0) / cw, (Y1 - Y0) / ch, X0, Y0, cw, ch


_TILE_GAP = 32  # black pixels between the crops of one mosaic


def mosaic(crops: Sequence[np.ndarray], tile: int, cols: int, fill: int = 0) -> np.ndarray:
    """``crops`` each at the top left of its ``tile`` px cell, ``cols`` cells a row; ``fill`` elsewhere."""
    out = np.full((math.ceil(len(crops) / cols) * tile, cols * tile, *crops[0].shape[2:]), fill, crops[0].dtype)
    for k, crop in enumerate(crops):
        r, c = divmod(k, cols)
        out[r * tile : r * tile + crop.shape[0], c * tile : c * tile + crop.shape[1]] = crop
    return out


def _cell(box: Sequence[float], tile: int, cols: int, count: int) -> tuple[int, float, float] | None:
    """(the mosaic cell holding ``box``'s centre, that centre within the cell), or None outside ``count`` cells."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    c, r = int(cx // tile), int(cy // tile)
    k = r * cols + c
    if not (0 <= c < cols and 0 <= k < count):  # a centre above the mosaic (r < 0) is outside it too
        return None
    return k, cx - c * tile, cy - r * tile


def second_looks(rgb: np.ndarray, boxes: Sequence[Sequence[float]], detect: DetectFn, threshold: float,
                 turns: Sequence[int] | None = None) -> list[float]:
    """Per box of ``rgb`` (RGB uint8), the best score ``detect`` gives the same face with the box at LOOK_BOX_PX, 0.0
    under ``threshold``: one mosaic, one ``detect`` (must not shrink it; finds have ``.box``, ``.score``). ``turns``:
    per box, the quarter turns its face was found on, so each crop is looked at upright."""
    turns = list(turns) if turns is not None else [0] * len(boxes)
    looks = [_look_crop(rgb, b, t) for b, t in zip(boxes, turns)]
    best = [0.0] * len(looks)
    placed = [(i, look) for i, look in enumerate(looks) if look is not None]
    if not placed:
        return best
    tile = round(LOOK_CONTEXT * LOOK_BOX_PX) + 2 + _TILE_GAP
    cols = math.ceil(math.sqrt(len(placed)))
    for found in detect(mosaic([look[0] for _, look in placed], tile, cols)):
        cell = _cell(found.box, tile, cols, len(placed)) if found.score >= threshold else None
        if cell is None:
            continue
        k = cell[0]
        i, (_crop, fx, fy, X0, Y0, cw, ch) = placed[k]
        r, c = divmod(k, cols)
        ox, oy = c * tile, r * tile
        bx0, by0, bx1, by1 = found.box
        corners = unturn(np.array([[bx0 - ox, by0 - oy], [bx1 - ox, by1 - oy]], dtype=np.float64), turns[i], cw, ch)
        (mx0, my0), (mx1, my1) = corners.min(axis=0), corners.max(axis=0)
        mapped = (mx0 * fx + X0, my0 * fy + Y0, mx1 * fx + X0, my1 * fy + Y0)
        if overlap(mapped, boxes[i])[0] >= LOOK_MIN_IOU:
            best[i] = max(best[i], float(found.score))
    return best


def filter_detections(detections: Iterable, *, rgb: np.ndarray | None = None, detect: DetectFn | None = None,
                      threshold: float = 0.9) -> Filtered:
    """Split objects with ``.box``, ``.score`` and ``.landmarks`` (:class:`gpen_core.faces.detect.Detection`): the
    geometry always, the second look (:func:`second_looks`, each crop upright by its ``.turn``) too when ``rgb``
    and ``detect`` are given."""
    detections = list(detections)
    verdicts = [check(det.box, det.landmarks) for det in detections]
    if rgb is not None and detect is not None:
        todo = [i for i, v in enumerate(verdicts) if v.is_face]
        looked = [detections[i] for i in todo]
        scores = second_looks(rgb, [d.box for d in looked], detect, threshold, [d.turn for d in looked])
        for i, score in zip(todo, scores):
            if score < threshold:
                verdicts[i] = replace(verdicts[i], reasons=(_NOT_FOUND_AGAIN,))
    kept = tuple(det for det, verdict in zip(detections, verdicts) if verdict.is_face)
    return Filtered(kept, tuple((det, verdict) for det, verdict in zip(detections, verdicts) if not verdict.is_face))


# The upright look: the 5-point template is nearly symmetric top to bottom, so only the pixels tell an upside-down
# face: each aligned crop (template at UPRIGHT_LOOK_PX) and it turned 180° in one mosaic (docs/face-check.md).
# Scores from UPRIGHT_LOOK_THRESHOLD count: it compares two scores, it accepts no face.
UPRIGHT_LOOK_PX = 96
UPRIGHT_LOOK_THRESHOLD = 0.3


def _aligned_look(rgb: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    s = UPRIGHT_LOOK_PX
    m = align_transform(landmarks, s)[0] * 0.5  # the template at half the tile, centred: context all around
    m[:, 2] += s * 0.5
    return cv2.warpAffine(rgb, m, (2 * s, 2 * s), flags=cv2.INTER_LINEAR)


def upright_looks(rgb: np.ndarray, landmarks: Sequence[np.ndarray], detect: DetectFn) -> list[tuple[float, float]]:
    """For each landmark set (5, 2) in ``rgb``: (score of its aligned crop, of it turned 180°), 0.0 where no face
    is near the tile's centre; ``upright < turned``: upside down. ``detect`` must not shrink the image and
    should accept scores down to :data:`UPRIGHT_LOOK_THRESHOLD`."""
    n = len(landmarks)
    if n == 0:
        return []
    scores = [[0.0, 0.0] for _ in range(n)]
    tile = 2 * UPRIGHT_LOOK_PX + _TILE_GAP
    cols = 2 * math.ceil(math.sqrt(n))  # pairs side by side: upright, turned
    views = []
    for lm in landmarks:
        crop = _aligned_look(rgb, np.asarray(lm, dtype=np.float64))
        views += [crop, cv2.rotate(crop, cv2.ROTATE_180)]
    centre, near = UPRIGHT_LOOK_PX, 0.35 * UPRIGHT_LOOK_PX
    for found in detect(mosaic(views, tile, cols)):
        cell = _cell(found.box, tile, cols, 2 * n)
        if cell is None or max(abs(cell[1] - centre), abs(cell[2] - centre)) > near:
            continue
        i, k = divmod(cell[0], 2)
        scores[i][k] = max(scores[i][k], float(found.score))
    return [(up, turned) for up, turned in scores]
