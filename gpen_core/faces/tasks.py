"""Image-side steps of colorization (grey in, the input's luminance kept) and inpainting (only the faces the damage
touches, pasted through it). RGB uint8 H×W×3 in and out; masks bool or float32 H×W. docs/tasks.md."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.errors import InputError

# A white brush stroke: every channel at least this (official strokes are 255; JPEG moves them a few levels).
WHITE_LEVEL = 250
# A mask given must mark this fraction of a face's aligned crop: stray pixels do not run a 1024 px network.
TOUCH_FRACTION = 0.001
# White found in the photo itself also includes collars, white hair and bright backgrounds: it counts
# only in the inner face (eyes to chin of the aligned crop), from 1 % of it (measured: docs/tasks.md).
INNER_BOX = (0.25, 0.30, 0.75, 0.80)  # x0, y0, x1, y1 as fractions of the aligned crop
INNER_FRACTION = 0.01


@dataclass(frozen=True, eq=False)
class Damage:
    """Where a photo is damaged (bool H×W) and whether it was read off white pixels in the photo."""

    mask: np.ndarray
    from_photo: bool


def to_grey(rgb: np.ndarray) -> tuple[np.ndarray, bool]:
    """(the photo as grey RGB uint8, whether it had colour), as the official predictor reads it
    (``IMREAD_GRAYSCALE`` then ``GRAY2BGR``): the network was trained on grey faces, so a tinted scan goes grey."""
    if np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 1], rgb[..., 2]):
        return rgb.copy(), False
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    return cv2.cvtColor(grey, cv2.COLOR_GRAY2RGB), True


def keep_luminance(grey: np.ndarray, coloured: np.ndarray) -> np.ndarray:
    """The official ``FaceColorization.post_process``: ``coloured`` at ``grey``'s size (INTER_LINEAR), Y from
    ``grey`` and U, V (OpenCV's YUV, as official) from ``coloured``. RGB uint8 in and out."""
    h, w = grey.shape[:2]
    if coloured.shape[:2] != (h, w):
        coloured = cv2.resize(coloured, (w, h))
    out = cv2.cvtColor(coloured, cv2.COLOR_RGB2YUV)
    out[:, :, 0] = cv2.cvtColor(grey, cv2.COLOR_RGB2YUV)[:, :, 0]
    return cv2.cvtColor(out, cv2.COLOR_YUV2RGB)


def damage_mask(rgb: np.ndarray, mask: np.ndarray | None) -> tuple[Damage, str]:
    """(where the photo is damaged, where that came from, for the result's notes). ``mask``: the user's (RGB or grey
    uint8 of the photo's size; white = damaged, any channel over 127), or None: the white brush strokes already in
    the photo (all channels at least :data:`WHITE_LEVEL`)."""
    h, w = rgb.shape[:2]
    if mask is None:
        return Damage(rgb.min(axis=2) >= WHITE_LEVEL, True), f"white strokes in the photo (pixels at least {WHITE_LEVEL} in every channel)"
    m = np.asarray(mask)
    if m.shape[:2] != (h, w):
        raise InputError(f"the damage mask is {m.shape[1]}×{m.shape[0]} but the photo is {w}×{h}: draw or save the "
                         "mask at the photo's size")
    if m.ndim == 3:
        m = m.max(axis=2)
    return Damage(m > 127, False), "the mask given (white = damaged)"


def paint_damage(rgb: np.ndarray, damage: np.ndarray) -> np.ndarray:
    """The photo with its damaged pixels white, as the inpainting network was trained to see strokes."""
    out = rgb.copy()
    out[damage] = 255
    return out


def touches(crop_mask: np.ndarray, from_photo: bool) -> bool:
    """Whether the damage in a face's crop is enough to inpaint that face (:data:`TOUCH_FRACTION`;
    white found in the photo: :data:`INNER_FRACTION` of :data:`INNER_BOX`)."""
    hit = crop_mask > 0.5
    if not from_photo:
        return float(hit.mean()) >= TOUCH_FRACTION
    s = hit.shape[0]
    x0, y0, x1, y1 = (int(f * s) for f in INNER_BOX)
    return float(hit[y0:y1, x0:x1].mean()) >= INNER_FRACTION


def damage_paste_mask(crop_mask: np.ndarray) -> np.ndarray:
    """Where an inpainted face is pasted: the damage grown by size/64 px and feathered as much, float32 in [0, 1];
    outside it the photo keeps its own pixels (the face's identity)."""
    r = max(1, crop_mask.shape[0] // 64)
    k = 2 * r + 1
    grown = cv2.dilate((crop_mask > 0.5).astype(np.float32), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
    return np.clip(cv2.GaussianBlur(grown, (k, k), r / 2) * 1.5, 0.0, 1.0)


def outside_faces(damage: np.ndarray, boxes: list[tuple[float, float, float, float]]) -> bool:
    """Whether any damage lies outside every face box (GPEN fills faces only; the result says so)."""
    rest = damage.copy()
    h, w = rest.shape
    for x0, y0, x1, y1 in boxes:
        rest[max(0, int(y0)) : min(h, int(np.ceil(y1))), max(0, int(x0)) : min(w, int(np.ceil(x1)))] = False
    return bool(rest.any())
