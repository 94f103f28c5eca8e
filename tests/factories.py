"""Test data made on the fly: GPEN checkpoints with random weights of any released shape."""

from __future__ import annotations

from pathlib import Path

import torch

from gpen_core.arch import GPEN, GPENConfig

RELEASED = {
    "GPEN-BFR-256": GPENConfig(256, channel_multiplier=1, narrow=0.5),
    "GPEN-BFR-512": GPENConfig(512),
    "GPEN-BFR-1024": GPENConfig(1024),
    "GPEN-BFR-2048": GPENConfig(2048),
}
TINY = GPENConfig(64, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)


def random_state_dict(cfg: GPENConfig, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Every parameter random (biases and noise weights too), blur buffers as the architecture defines them."""
    torch.manual_seed(seed)
    model = GPEN(cfg)
    sd = {}
    for k, v in model.state_dict().items():
        if k.endswith(".kernel"):
            sd[k] = v.clone()
        else:
            sd[k] = (torch.randn_like(v) * (0.1 if v.ndim <= 1 else 1.0)).to(dtype)
    return sd


def write_checkpoint(path: Path, cfg: GPENConfig, seed: int = 0, wrap: str | None = None) -> Path:
    sd = random_state_dict(cfg, seed)
    torch.save({wrap: sd} if wrap else sd, path)
    return path
