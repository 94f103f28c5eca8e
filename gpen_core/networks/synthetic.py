"""Synthetic weights: the exact architectures with random values, costing the real one's memory and time (they do
not depend on the values); for the hardware check before any download, benchmarks and tests."""

from __future__ import annotations

import torch

from gpen_core.networks.arch import GPEN, GPENConfig, make_kernel


def random_state_dict(cfg: GPENConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every parameter random (biases and noise weights too); blur buffers as the architecture defines them."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = GPEN(cfg).state_dict()
    base = make_kernel([1, 3, 3, 1])
    sd: dict[str, torch.Tensor] = {}
    for k, v in shapes.items():
        if k.endswith(".kernel"):
            # Decoder blurs follow a 2x upsampling and carry its factor**2 = 4 gain; encoder blurs do not.
            sd[k] = base * 4 if k.startswith("generator.") else base.clone()
        else:
            scale = 0.1 if v.ndim <= 1 else 1.0
            sd[k] = torch.randn(v.shape, generator=gen) * scale
    return sd


def random_generator(cfg: GPENConfig, seed: int = 0) -> GPEN:
    """A ready (eval, no-grad) GPEN with random weights of architecture ``cfg``."""
    from gpen_core.networks.checkpoint import build_from_state_dict

    return build_from_state_dict(random_state_dict(cfg, seed))
