"""The generator's pre/post-processing exactly as the official ``face_gan.py``, on RGB (no BGR flip); ``norm=False``
is the official ``is_norm=False`` (Segmentation2Face): [0, 1] in and out."""

from __future__ import annotations

import numpy as np
import torch

from gpen_core.rgb import check_rgb


def to_tensor(rgb: np.ndarray, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *,
              norm: bool = True) -> torch.Tensor:
    """RGB uint8 H×W×3 → 1×3×H×W in [-1, 1] (``norm=False``: in [0, 1])."""
    rgb = check_rgb(rgb, "the face")
    t = torch.from_numpy(rgb).to(device=device, dtype=torch.float32) / 255.0
    if norm:
        t = (t - 0.5) / 0.5
    return t.permute(2, 0, 1).unsqueeze(0).to(dtype)


def to_image(t: torch.Tensor, *, norm: bool = True) -> np.ndarray:
    """1×3×H×W in [-1, 1] (``norm=False``: [0, 1]) → RGB uint8 H×W×3 (clipped, truncated like the official code)."""
    t = t.detach()[0].float()
    if norm:
        t = t * 0.5 + 0.5
    arr = t.permute(1, 2, 0).cpu().numpy()
    return (np.clip(arr, 0, 1) * 255.0).astype(np.uint8)
