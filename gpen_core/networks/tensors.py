"""Pre/post-processing exactly as the official ``face_gan.py``, at our RGB boundary (no BGR flip).

Official: ``img/255``, ``(x - 0.5) / 0.5``, HWC→NCHW; back: ``x*0.5 + 0.5``, clip to [0, 1], ``*255`` and
``astype(uint8)`` (truncation). ``norm=False`` is the official ``is_norm=False`` (Segmentation2Face): the
network takes [0, 1] and its output is clipped from [0, 1].
"""

from __future__ import annotations

import numpy as np
import torch

from gpen_core.rgb import check_rgb


def to_tensor(
    rgb: np.ndarray, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *, norm: bool = True
) -> torch.Tensor:
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
