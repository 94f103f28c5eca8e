"""ParseNet's building blocks, the official layers under their official key names (shared by
:mod:`gpen_core.networks.parsenet` and :mod:`gpen_core.networks.parsenet_strips`; imports torch)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

NormType = Literal["bn", "none"]
ReluType = Literal["LeakyReLU", "none"]  # the official ReluLayer's two kinds ParseNet uses


class Norm(nn.Module):
    """Official ``NormLayer`` for the two norms ParseNet uses (keys ``norm.norm.*``)."""

    def __init__(self, channels: int, norm_type: NormType) -> None:
        super().__init__()
        self.norm: nn.Module = nn.BatchNorm2d(channels, affine=True) if norm_type == "bn" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class ConvLayer(nn.Module):
    """Official ``ConvLayer``: [nearest ×2] → reflection pad → conv (stride 2 for 'down') → norm → act.

    With batch norm the convolution has no bias, as official.
    """

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel_size: int = 3,
        scale: str = "none",
        norm_type: NormType = "none",
        relu_type: ReluType = "none",
    ) -> None:
        super().__init__()
        self.up = scale == "up"
        self.reflection_pad = nn.ReflectionPad2d(int(math.ceil((kernel_size - 1.0) / 2)))
        stride = 2 if scale == "down" else 1
        self.conv2d = nn.Conv2d(c_in, c_out, kernel_size, stride, bias=norm_type != "bn")
        if relu_type not in ("LeakyReLU", "none"):
            raise ValueError(f"relu_type must be LeakyReLU or none, got {relu_type!r}")
        # Neither holds weights: the official ReluLayer's keys are the same without its wrapper.
        self.relu: nn.Module = nn.LeakyReLU(0.2, inplace=True) if relu_type == "LeakyReLU" else nn.Identity()
        self.norm = Norm(c_out, norm_type)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.up:
            # No name for the upsampled input: it is freed once padded, before the conv allocates its output.
            return self.relu(self.norm(self.conv2d(self.reflection_pad(F.interpolate(x, scale_factor=2, mode="nearest")))))
        return self.relu(self.norm(self.conv2d(self.reflection_pad(x))))


class ResidualBlock(nn.Module):
    """Official ``ResidualBlock``: shortcut (identity, or a plain conv when shape changes) + conv1 → conv2."""

    _SCALES = {"down": ("none", "down"), "up": ("up", "none"), "none": ("none", "none")}

    def __init__(self, c_in: int, c_out: int, relu_type: ReluType, norm_type: NormType, scale: str = "none") -> None:
        super().__init__()
        self.shortcut_func: nn.Module = (
            nn.Identity() if scale == "none" and c_in == c_out else ConvLayer(c_in, c_out, 3, scale)
        )
        s1, s2 = self._SCALES[scale]
        self.conv1 = ConvLayer(c_in, c_out, 3, s1, norm_type=norm_type, relu_type=relu_type)
        self.conv2 = ConvLayer(c_out, c_out, 3, s2, norm_type=norm_type, relu_type="none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The branch first, the shortcut added in place: no shortcut held through the branch's temporaries
        # and no third tensor for the sum (docs/performance.md: 452 → 388 MiB per 512 px face). Same values
        # as official (shortcut + branch): float addition is commutative.
        out = self.conv2(self.conv1(x))
        return out.add_(self.shortcut_func(x))
