"""Test data made on the fly: GPEN checkpoints with random weights of any released shape."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpen_core.networks.arch import GPENConfig
from gpen_core.networks.synthetic import random_state_dict

RELEASED = {
    "GPEN-BFR-256": GPENConfig(256, channel_multiplier=1, narrow=0.5),
    "GPEN-BFR-512": GPENConfig(512),
    "GPEN-BFR-1024": GPENConfig(1024),
    "GPEN-BFR-2048": GPENConfig(2048),
    # GPEN's other tasks: the same FullGenerator (official misc/predict.py and demo.py build them with
    # channel_multiplier 2, narrow 1; no key table of them in ../shared).
    "GPEN-Colorization-1024": GPENConfig(1024),
    "GPEN-Inpainting-1024": GPENConfig(1024),
    "GPEN-Seg2face-512": GPENConfig(512),
}
TINY = GPENConfig(64, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
# A ParseNet of the released layout (512 px in and out, the same down and up steps) an eighth as wide with
# 2 residual blocks, not 10: 0.19 M parameters, its 512 px float32 forward ~0.3 s of CPU against the
# released one's ~6 s. For tests of the flow around synthetic parsing (the hardware check with TINY
# generators), patched over ``gpen_core.networks.parsenet.RELEASED_CONFIG``.
TINY_PARSENET = {"in_size": 512, "out_size": 512, "min_feat_size": 32, "base_ch": 8, "parsing_ch": 19,
                 "norm_type": "bn", "relu_type": "LeakyReLU", "ch_range": (8, 32), "res_depth": 2}

__all__ = ["RELEASED", "TINY", "TINY_PARSENET", "random_state_dict", "write_checkpoint"]


def write_checkpoint(path: Path, cfg: GPENConfig, seed: int = 0, wrap: str | None = None) -> Path:
    sd = random_state_dict(cfg, seed)
    torch.save({wrap: sd} if wrap else sd, path)
    return path


def low_on_openvino():
    """The ``low`` mode with OpenVINO allowed under ``auto``: the cheapest generator (GPEN-BFR-256)
    to exercise the OpenVINO paths with (``low`` itself keeps to torch under auto:
    :attr:`gpen_core.modes.MemoryMode.auto_openvino`)."""
    from dataclasses import replace

    from gpen_core.modes import MODES

    return replace(MODES["low"], auto_openvino=True)


class FullSizeOutputs(TorchDispatchMode):
    """Records every op output that spans all ``size`` rows of an image with more than ``channels`` channels:
    the full-size feature maps a forward in strips must never build."""

    def __init__(self, size: int, channels: int) -> None:
        super().__init__()
        self.size, self.channels, self.seen = size, channels, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.ndim == 4 and t.shape[2] == self.size and t.shape[1] > self.channels:
                self.seen.append((str(func), tuple(t.shape)))
        return out
