"""Paste-back as official, except that each face and its mask are warped into a buffer of its own paste box, so
memory grows with the faces, not the photo. Also :func:`face_sheet`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.faces.masks import rectangle_mask
from gpen_core.faces.screen import mosaic
from gpen_core.result import Face


# The official code passes flags=3: cv2.INTER_AREA (not INTER_CUBIC, 2), which warpAffine runs as bilinear. We
# name what runs: the same pixels, bit for bit.
WARP_FLAGS = cv2.INTER_LINEAR

ParsingFn = Callable[[np.ndarray], np.ndarray]


def face_mask(restored: np.ndarray, parsing_fn: ParsingFn | None, size: int) -> np.ndarray:
    if parsing_fn is None:
        return rectangle_mask(size)
    mask = np.asarray(parsing_fn(restored), dtype=np.float32)
    if mask.ndim != 2:
        raise ValueError(f"parsing_fn must return an H×W float mask, got shape {mask.shape}")
    if mask.shape != (size, size):
        mask = cv2.resize(mask, (size, size))
    return np.clip(mask, 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class Piece:
    """One face warped back into its own paste box of the output image."""

    x0: int
    y0: int
    x1: int
    y1: int
    mask: np.ndarray  # float32 (y1-y0, x1-x0)
    face: np.ndarray  # uint8 (y1-y0, x1-x0, 3)


def paste_box(inv: np.ndarray, crop_size: int, width: int, height: int) -> tuple[int, int, int, int] | None:
    """The output-image box (x0, y0, x1, y1; x1/y1 exclusive) a crop warped by ``inv`` can touch: its corners
    widened by the interpolation's reach (2 crop pixels, generous for bilinear), clipped; None off the image."""
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


def warp_piece(face: np.ndarray, mask: np.ndarray, inv: np.ndarray, width: int, height: int) -> Piece | None:
    box = paste_box(inv, face.shape[0], width, height)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    # The official full-frame warp, restricted to the box: invert as warpAffine does, then move that map's origin
    # to the box corner, so every pixel reads the crop where the full-frame warp would (translating the forward
    # matrix instead shifts OpenCV's fixed-point sampling grid by up to 1/32 crop pixel).
    crop_from_out = cv2.invertAffineTransform(inv.astype(np.float64))
    crop_from_out[:, 2] += crop_from_out[:, :2] @ np.array([x0, y0], dtype=np.float64)
    dsize = (x1 - x0, y1 - y0)
    flags = WARP_FLAGS | cv2.WARP_INVERSE_MAP
    wmask = cv2.warpAffine(mask, crop_from_out, dsize, flags=flags)
    wface = cv2.warpAffine(face, crop_from_out, dsize, flags=flags)
    return Piece(x0, y0, x1, y1, wmask, wface)


def compose(rgb: np.ndarray, pieces: list[Piece]) -> np.ndarray:
    """``img*(1-mask) + face*mask`` inside each paste box, the rest a copy of ``rgb``. As official, a later face
    takes a pixel only where its mask exceeds the mask so far: each box replays every piece overlapping it."""
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
        # float32 img*(1-m) + face*m, rounded and saturated, as official; in place: two box-sized float buffers.
        blend = rgb[p.y0 : p.y1, p.x0 : p.x1].astype(np.float32)
        blend *= 1.0 - m
        face_part = full_face.astype(np.float32)
        face_part *= m
        blend += face_part
        out[p.y0 : p.y1, p.x0 : p.x1] = cv2.convertScaleAbs(blend)
    return out


def face_sheet(faces: tuple[Face, ...] | list[Face], cols: int = 4) -> np.ndarray:
    """Restored crops side by side (RGB uint8) on white, the downloadable of faces-only mode."""
    size = max(f.restored.shape[0] for f in faces)
    return mosaic([f.restored for f in faces], size, min(cols, len(faces)), fill=255)
