"""Paste-back masks for an aligned face crop, float32 H×W in [0, 1], the official recipes on a 512×512 canvas:
:func:`parsing_labels_to_mask` and :func:`rectangle_mask` (official but commented out; ours without a parser)."""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

_OFFICIAL_SIZE = 512  # both recipes are defined on a 512×512 canvas
_BORDER = 26  # official mask_postprocess(thres=26) and the rectangle's inset
_BLUR_KSIZE = (101, 101)
_BLUR_SIGMA = 4

# GPEN's ParseNet classes (CelebAMask-HQ order), from the official face_parse/face_parsing.py.
CLASS_NAMES: tuple[str, ...] = (
    "background", "skin", "nose", "eye_g", "l_eye", "r_eye", "l_brow", "r_brow", "l_ear",
    "r_ear", "mouth", "u_lip", "l_lip", "hair", "hat", "ear_r", "neck_l", "neck", "cloth",
)  # fmt: skip

# GPEN's MASK_COLORMAP: class → 0 or 255. Off: background (0), hat (14), cloth (18).
MASK_COLORMAP = np.array(
    [0, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 0, 255, 255, 255, 0], dtype=np.uint8
)
MASK_COLORMAP.setflags(write=False)
OFF_CLASSES: tuple[str, ...] = tuple(n for n, v in zip(CLASS_NAMES, MASK_COLORMAP) if v == 0)


def mask_postprocess(mask: np.ndarray) -> np.ndarray:
    """The official ``FaceEnhancement.mask_postprocess``, H×W in [0, 1] → a new float32 H×W: a 26 px border
    zeroed (else the blur drags the face into the crop's edge), then blurred twice."""
    out = np.zeros(mask.shape, np.float32)
    out[_BORDER:-_BORDER, _BORDER:-_BORDER] = mask[_BORDER:-_BORDER, _BORDER:-_BORDER]
    return _blur_twice(out)


def _blur_twice(mask: np.ndarray) -> np.ndarray:  # both recipes' feather
    for _ in range(2):
        mask = cv2.GaussianBlur(mask, _BLUR_KSIZE, _BLUR_SIGMA)
    return mask.astype(np.float32, copy=False)


def labels_to_mask_uint8(labels: np.ndarray) -> np.ndarray:
    """ParseNet class indices (H×W ints, 0..18) → GPEN's 0/255 uint8 mask (``FaceParse.tenor2mask``)."""
    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels must be a 2-D array of class indices, got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= len(MASK_COLORMAP)):
        raise ValueError(f"labels must be ParseNet class indices in [0, {len(MASK_COLORMAP) - 1}]")
    return MASK_COLORMAP[labels]


def parsing_labels_to_mask(labels: np.ndarray, size: int) -> np.ndarray:
    """512×512 ParseNet labels → GPEN's paste mask, float32 (size, size) in [0, 1], in the official order: colour
    map, /255, :func:`mask_postprocess`, ``cv2.resize``. Other label sizes go to 512×512 first (nearest), so the
    border and the blur keep their official meaning."""
    mask = labels_to_mask_uint8(labels)
    if mask.shape != (_OFFICIAL_SIZE, _OFFICIAL_SIZE):
        mask = cv2.resize(mask, (_OFFICIAL_SIZE, _OFFICIAL_SIZE), interpolation=cv2.INTER_NEAREST)
    out = mask_postprocess(mask.astype(np.float32) / np.float32(255.0))
    if size != _OFFICIAL_SIZE:
        out = cv2.resize(out, (size, size))
    return np.clip(out, 0.0, 1.0)


@lru_cache(maxsize=8)
def rectangle_mask(size: int) -> np.ndarray:
    """GPEN's feathered rectangle for a ``size``×``size`` crop: float32 (size, size) in [0, 1], read-only."""
    mask = np.zeros((_OFFICIAL_SIZE, _OFFICIAL_SIZE), np.float32)
    cv2.rectangle(mask, (_BORDER, _BORDER), (_OFFICIAL_SIZE - _BORDER, _OFFICIAL_SIZE - _BORDER), (1, 1, 1), -1, cv2.LINE_AA)
    mask = _blur_twice(mask)
    if size != _OFFICIAL_SIZE:
        mask = cv2.resize(mask, (size, size))  # INTER_LINEAR, as the official resize to in_size
    mask.setflags(write=False)  # shared by every face of that size
    return mask
