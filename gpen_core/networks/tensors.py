"""Pre/post-processing exactly as the official ``face_gan.py``, at our RGB boundary.

Official: ``img/255``, ``(x - 0.5) / 0.5``, HWC→NCHW (with a BGR→RGB flip that our RGB
boundary makes unnecessary); back: ``x*0.5 + 0.5``, clip to [0, 1], ``*255`` and
``astype(uint8)`` (truncation, as the official code does).
"""

from __future__ import annotations

import numpy as np
import torch


def to_tensor(rgb: np.ndarray, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """RGB uint8 H×W×3 → 1×3×H×W in [-1, 1]."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected RGB uint8 H×W×3, got {rgb.dtype} {rgb.shape}")
    t = torch.from_numpy(np.ascontiguousarray(rgb)).to(device=device, dtype=torch.float32) / 255.0
    t = (t - 0.5) / 0.5
    return t.permute(2, 0, 1).unsqueeze(0).to(dtype)


def to_image(t: torch.Tensor) -> np.ndarray:
    """1×3×H×W in [-1, 1] → RGB uint8 H×W×3 (clipped, truncated like the official code)."""
    t = t.detach()[0].float() * 0.5 + 0.5
    arr = t.permute(1, 2, 0).cpu().numpy()
    return (np.clip(arr, 0, 1) * 255.0).astype(np.uint8)
