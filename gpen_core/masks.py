"""Paste-back masks for an aligned face crop: single-channel float32 in [0, 1], crop-sized.

Two recipes:

* :func:`rectangle_mask` — GPEN's feathered rectangle (official ``face_enhancement.py``):
  a 512×512 rectangle of ones from (26, 26) to (486, 486), Gaussian-blurred twice
  (101×101, σ 4), resized to the crop.
* :func:`parsing_labels_to_mask` — facexlib/GFPGAN's ParseNet recipe: face classes on,
  background/neck/cloth/hair/hat off, blurred twice (101×101, σ 11), a 10 px border
  cleared, resized to the crop.

Masks carry no colour, so nothing here knows RGB from BGR.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

_OFFICIAL_SIZE = 512  # both recipes are defined on a 512×512 canvas

# facexlib's ParseNet classes (CelebAMask-HQ order of parsing_parsenet.pth): 0 background,
# 14 neck, 16 cloth, 17 hair, 18 hat are off; skin, brows, eyes, glasses, ears, earrings,
# nose, mouth and lips are on. Same table as FaceRestoreHelper.paste_faces_to_input_image.
PARSENET_FACE_CLASSES = np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0], dtype=np.float32)


@lru_cache(maxsize=8)
def _rectangle_mask_cached(size: int) -> np.ndarray:
    mask = np.zeros((_OFFICIAL_SIZE, _OFFICIAL_SIZE), np.float32)
    cv2.rectangle(mask, (26, 26), (486, 486), (1, 1, 1), -1, cv2.LINE_AA)
    mask = cv2.GaussianBlur(mask, (101, 101), 4)
    mask = cv2.GaussianBlur(mask, (101, 101), 4)
    if size != _OFFICIAL_SIZE:
        mask = cv2.resize(mask, (size, size))  # INTER_LINEAR, as the official resize to in_size
    mask.setflags(write=False)  # shared by every face of that size
    return mask


def rectangle_mask(size: int) -> np.ndarray:
    """GPEN's feathered rectangle for a ``size``×``size`` crop: float32 (size, size) in [0, 1], read-only."""
    if size <= 0:
        raise ValueError(f"mask size must be positive, got {size}")
    return _rectangle_mask_cached(int(size))


def parsing_labels_to_mask(labels: np.ndarray, size: int) -> np.ndarray:
    """Per-pixel ParseNet class indices (H×W ints, 0..18) → soft face mask float32 (size, size) in [0, 1].

    Follows facexlib's ``FaceRestoreHelper``: class table → 0/255, GaussianBlur(101, σ 11)
    twice, clear a 10 px border (the blur drags the face into the crop's black border),
    scale to [0, 1], resize to the crop.
    """
    if labels.ndim != 2:
        raise ValueError(f"labels must be a 2-D array of class indices, got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= len(PARSENET_FACE_CLASSES)):
        raise ValueError(f"labels must be ParseNet class indices in [0, {len(PARSENET_FACE_CLASSES) - 1}]")
    mask = PARSENET_FACE_CLASSES[labels] * np.float32(255.0)
    mask = cv2.GaussianBlur(mask, (101, 101), 11)
    mask = cv2.GaussianBlur(mask, (101, 101), 11)
    thres = 10
    mask[:thres, :] = 0
    mask[-thres:, :] = 0
    mask[:, :thres] = 0
    mask[:, -thres:] = 0
    mask = mask / np.float32(255.0)
    if mask.shape != (size, size):
        mask = cv2.resize(mask, (size, size))
    return np.clip(mask, 0.0, 1.0).astype(np.float32, copy=False)
