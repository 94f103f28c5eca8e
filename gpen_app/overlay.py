"""Face boxes drawn on a photo, pure NumPy: kept faces solid, candidates the face check refused dashed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpen_core.images.encode import shrink_to_max_side
from gpen_core.modes import IDENTITY_THRESHOLD, IDENTITY_THRESHOLD_TEXT, MODES
from gpen_core.result import RestoreResult
from gpen_core.rgb import check_rgb

Box = Sequence[float]  # x0, y0, x1, y1 in the image's pixels
Color = tuple[int, int, int]

KEPT_COLOR: Color = (40, 220, 90)  # green: restored and pasted
REJECTED_COLOR: Color = (235, 45, 45)  # red: refused by the plausibility screen
# Kept faces coloured by their identity distance (gpen_core.faces.identity) when it was measured:
# well within dlib's threshold, close to it, over it. Magenta, not red: red dashes are the rejected boxes.
IDENTITY_COLORS: tuple[tuple[float, Color, str], ...] = (
    (0.4, KEPT_COLOR, "green: under 0.4"),
    (IDENTITY_THRESHOLD, (245, 190, 30), f"amber: 0.4 to {IDENTITY_THRESHOLD:g}"),
    (float("inf"), (220, 40, 220), f"magenta: over {IDENTITY_THRESHOLD_TEXT}"),
)


def identity_color(distance: float | None) -> Color:
    """The box colour for a face's identity distance (None: not measured, the kept green)."""
    if distance is None:
        return KEPT_COLOR
    return next(color for upto, color, _ in IDENTITY_COLORS if distance <= upto)


def line_width(shape: Sequence[int]) -> int:
    """Line width in px for an image of ``shape`` (H, W, ...): visible at any size, 2 px at least."""
    return max(2, round(max(shape[0], shape[1]) / 300))


def draw_box(rgb: np.ndarray, box: Box, color: Color, *, width: int, dash: int = 0) -> None:
    """Draw one rectangle into ``rgb`` (RGB uint8 H×W×3, in place), ``width`` px inside the box, clipped; ``dash`` >
    0: dashes and gaps of about ``dash`` px, each edge starting and ending with a dash."""
    h, w = rgb.shape[:2]
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    x0, x1 = max(0, min(x0, x1)), min(w, max(x0, x1))
    y0, y1 = max(0, min(y0, y1)), min(h, max(y0, y1))
    if x1 <= x0 or y1 <= y0:
        return
    t = max(1, min(width, (x1 - x0 + 1) // 2, (y1 - y0 + 1) // 2))
    c = np.asarray(color, dtype=np.uint8)
    run = _pattern(x1 - x0, dash)  # top and bottom edges
    rgb[y0 : y0 + t, x0:x1][:, run] = c
    rgb[y1 - t : y1, x0:x1][:, run] = c
    run = _pattern(y1 - y0, dash)  # left and right edges
    rgb[y0:y1, x0 : x0 + t][run] = c
    rgb[y0:y1, x1 - t : x1][run] = c


def _pattern(n: int, dash: int) -> np.ndarray:
    """Which of ``n`` px along an edge are drawn: all (dash 0), or an odd number of near-equal dashes and gaps."""
    if dash <= 0:
        return np.ones(n, dtype=bool)
    k = max(1, round(n / dash))
    k += 1 - k % 2  # odd: dash, gap, …, dash
    return (np.arange(n) * k // n) % 2 == 0


def draw_detections(rgb: np.ndarray, kept: Sequence[Box], rejected: Sequence[Box] = (), *,
                    scale: tuple[float, float] = (1.0, 1.0), width: int | None = None,
                    kept_colors: Sequence[Color] | None = None) -> np.ndarray:
    """A copy of ``rgb`` (RGB uint8 H×W×3) with kept boxes solid (green, or ``kept_colors``) over the rejected ones
    dashed red; ``scale``: (sx, sy) from the boxes' pixels to ``rgb``'s; ``width``: default :func:`line_width`."""
    out = check_rgb(rgb, "the photo to draw on").copy()
    t = width if width is not None else line_width(rgb.shape)
    factor = (*scale, *scale)  # x0, y0, x1, y1
    for b in rejected:
        draw_box(out, np.multiply(b, factor), REJECTED_COLOR, width=t, dash=3 * t)
    for b, color in zip(kept, kept_colors if kept_colors is not None else [KEPT_COLOR] * len(kept), strict=True):
        draw_box(out, np.multiply(b, factor), color, width=t)
    return out


def boxes_record(result: RestoreResult) -> dict[str, object]:
    """The boxes the app draws, as JSON: ``image_size`` [w, h] of the photo they are in (processed, upscaled when
    the background was), ``kept`` and ``rejected`` (with score and reason)."""
    if result.before is not None:
        size = [int(result.before.shape[1]), int(result.before.shape[0])]
    else:
        factor = result.upscale.factor if result.upscale is not None else 1
        size = [int(result.processed_size[0]) * factor, int(result.processed_size[1]) * factor]
    return {
        "image_size": size,
        "kept": [[round(float(v), 2) for v in f.box] for f in result.faces],
        "rejected": [
            {"box": [round(float(v), 2) for v in r.box], "score": round(float(r.score), 4), "reason": r.reason}
            for r in result.rejected
        ],
    }


# A torn or scratched face can fail the face check (its landmarks stop forming a face): the way on.
DAMAGED_HINT = ("A damaged face among them? Choose the Task \"Repair damaged faces\" and paint the damage, "
                "or turn off \"Check detections\" (Advanced) to restore it as it is")


def faces_overlay(before: np.ndarray | None, record: dict | None, max_side: int = 1024,
                  photo: np.ndarray | None = None) -> tuple[np.ndarray | None, str]:
    """(the slider's "before", shrunk to ``max_side``, with ``record``'s boxes drawn; a caption), or (None, why not);
    ``photo``: drawn on instead for a mode that returns face crops."""
    record = record or {}
    boxes = record.get("boxes")
    if before is None or not boxes:
        return None, "Detected faces: restore a photo to see them."
    if record.get("detector", "none") == "none":
        return None, "Detected faces: none drawn (an aligned face crop: no detection ran)."
    mode = MODES.get(str(record.get("mode")))
    crops = mode is not None and not mode.paste
    if crops and photo is not None:
        before = photo
    w, h = boxes["image_size"]
    bh, bw = before.shape[:2]
    if (crops and photo is None) or w <= 0 or h <= 0 or abs(bw / bh - w / h) > 0.02 * (w / h):
        return None, f"Detected faces: not drawn ({record.get('mode')} shows face crops, not the photo)."
    rgb = shrink_to_max_side(np.ascontiguousarray(before[..., :3]), max_side)[0]
    kept = boxes["kept"]
    rejected = [r["box"] for r in boxes["rejected"]]
    distances = [f["distance"] if f else None for f in ((record.get("identity") or {}).get("faces") or [])]
    measured = len(distances) == len(kept) and any(d is not None for d in distances)
    colors = [identity_color(d) for d in distances] if measured else None
    drawn = draw_detections(rgb, kept, rejected, scale=(rgb.shape[1] / w, rgb.shape[0] / h), kept_colors=colors)
    caption = f"Detected faces: {len(kept)} kept (solid green)"
    if measured:
        caption = (f"Detected faces: {len(kept)} kept, solid, coloured by identity distance "
                   f"({'; '.join(label for _, _, label in IDENTITY_COLORS)})")
    if rejected:
        reasons = sorted({r["reason"] for r in boxes["rejected"]})
        caption += f", {len(rejected)} rejected (dashed red: {'; '.join(reasons)}). {DAMAGED_HINT}"
    else:
        caption += ", none rejected"
    return drawn, caption
