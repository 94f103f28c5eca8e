"""GPEN's own 5-point alignment (the official ``align_faces.py``): looser than facexlib's FFHQ template, and the
generators were trained on it. Points are (x, y) pixels: left eye, right eye, nose, left and right mouth corner."""

from __future__ import annotations

import numpy as np

# The 96×112 template of the official code, (x, y).
_BASE_POINTS = np.array([[30.29459953, 51.69630051], [65.53179932, 51.50139999], [48.02519989, 71.73660278],
                         [33.54930115, 92.3655014], [62.72990036, 92.20410156]], dtype=np.float64)
_BASE_SIZE = np.array([96, 112], dtype=np.int64)  # (w, h)
_INNER_PADDING = 0.25  # what GPEN's face_enhancement.py uses


def reference_points(crop_size: int) -> np.ndarray:
    """GPEN's 5-point template for a ``crop_size`` px aligned crop, (5, 2) float64 (x, y): the official
    ``get_reference_facial_points(default_square=True, inner_padding_factor=0.25)`` scaled to ``crop_size``."""
    if crop_size <= 0:
        raise ValueError(f"crop_size must be a positive number of pixels, got {crop_size}")
    pts = _BASE_POINTS.copy()
    size = _BASE_SIZE.copy()
    # 0) make the inner region square, centring the points horizontally
    diff = size.max() - size
    pts += diff / 2
    size += diff
    # 1) pad the inner region by inner_padding on each side
    pad = size * _INNER_PADDING * 2
    pts += pad / 2
    size += np.round(pad).astype(np.int64)
    # 2) scale the padded square to the output size
    return pts * (float(crop_size) / float(size[0]))


def umeyama(src: np.ndarray, dst: np.ndarray, scale: float | None = None) -> tuple[np.ndarray, float]:
    """(3×3 homogeneous matrix, scale) of the least-squares similarity ``dst ≈ s·R·src + t`` (Umeyama 1991), R a
    proper rotation, for (N, 2) float64 points; ``scale``: a fixed ``s``, None estimates it. All NaN if degenerate."""
    num, dim = src.shape
    src_mean = src.mean(axis=0)
    dst_mean = dst.mean(axis=0)
    src_demean = src - src_mean
    dst_demean = dst - dst_mean

    a = dst_demean.T @ src_demean / num
    d = np.ones((dim,), dtype=np.float64)
    if np.linalg.det(a) < 0:
        d[dim - 1] = -1  # a reflection fits better; force a proper rotation instead

    t = np.eye(dim + 1, dtype=np.float64)
    u, s, v = np.linalg.svd(a)
    rank = np.linalg.matrix_rank(a)
    if rank == 0:
        return np.full_like(t, np.nan), float("nan")
    if rank == dim - 1:
        if np.linalg.det(u) * np.linalg.det(v) > 0:
            t[:dim, :dim] = u @ v
        else:
            d_flip = d.copy()
            d_flip[dim - 1] = -1
            t[:dim, :dim] = u @ np.diag(d_flip) @ v
    else:
        t[:dim, :dim] = u @ np.diag(d) @ v

    if scale is None:
        scale = float(1.0 / src_demean.var(axis=0).sum() * (s @ d))
    t[:dim, dim] = dst_mean - scale * (t[:dim, :dim] @ src_mean.T)
    t[:dim, :dim] *= scale
    return t, scale


def align_transform(landmarks_xy: np.ndarray, crop_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(fwd, inv)``, 2×3 float64, for ``landmarks_xy`` (5, 2) in source pixels: ``cv2.warpAffine(src, fwd, (S, S))``
    makes the aligned crop; ``inv`` is the official ``tfm_inv`` (at the reciprocal of the forward scale)."""
    src = np.asarray(landmarks_xy)
    if src.shape != (5, 2):
        raise ValueError(f"landmarks_xy must be a (5, 2) array of (x, y) points, got shape {src.shape}")
    # The official code rounds the points to float32 before fitting; so do we, to match its transforms.
    src = src.astype(np.float32).astype(np.float64)
    ref = reference_points(crop_size).astype(np.float32).astype(np.float64)
    fwd, scale = umeyama(src, ref, None)
    inv, _ = umeyama(ref, src, 1.0 / scale)
    return fwd[:2, :], inv[:2, :]
