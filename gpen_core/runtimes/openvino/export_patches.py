"""The forwards :func:`gpen_core.runtimes.openvino.export.exportable` binds onto GPEN's modules: each the
same function as the module's own, as a graph OpenVINO's CPU plugin runs well, reading the attributes
``exportable`` sets. Imported only by ``exportable``, so torch is imported here at the top.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

if TYPE_CHECKING:
    from gpen_core.networks.arch import Fir, ModulatedConv2d, StyledConv, ToRGB

SQRT2 = math.sqrt(2.0)


def conv_parts(parts: tuple[torch.Tensor, ...], w: torch.Tensor, padding: int) -> torch.Tensor:
    """``conv(cat(parts), w)`` as one conv per part, summed (``w``'s input channels split alike)."""
    out, at = None, 0
    for p in parts:
        c = int(p.shape[1])
        y = F.conv2d(p, w[:, at : at + c], padding=padding)
        out, at = (y if out is None else out + y), at + c
    return out


def modconv_forward(self: ModulatedConv2d, x: torch.Tensor | tuple[torch.Tensor, ...], style: torch.Tensor) -> torch.Tensor:
    """A modulated conv of one image as a plain (transposed) conv; ``x`` may be a styled conv's halves."""
    parts = x if isinstance(x, tuple) else (x,)
    if self.upsample and len(parts) > 1:
        parts = (torch.cat(parts, 1),)
    s = self.modulation(style)[0]  # (in,)
    d = torch.rsqrt(self.export_wsq @ (s * s) + 1e-8) if self.demodulate else None  # (out,)
    w = self.export_weight  # scale folded in; (in, out, k, k) for the transposed conv
    if self.export_input_modulated:
        sizes = [int(p.shape[1]) for p in parts]
        xs = tuple(p * si.view(1, -1, 1, 1) for p, si in zip(parts, torch.split(s, sizes)))
        if self.upsample:
            y = self.blur(F.conv_transpose2d(xs[0], w, stride=2))  # the blur is per channel: d commutes
        else:
            y = conv_parts(xs, w, self.padding)
        return y * d.view(1, -1, 1, 1)
    f = s.view(1, -1) if d is None else d.view(-1, 1) * s.view(1, -1)  # (out, in)
    if self.upsample:
        return self.blur(F.conv_transpose2d(parts[0], w * f.t()[:, :, None, None], stride=2))
    return conv_parts(parts, w * f[:, :, None, None], self.padding)


def styled_halves(self: StyledConv, y: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``FusedLeakyReLU(cat(y, w · noise))`` as its two halves (features, activated noise), unconcatenated."""
    c, b = int(y.shape[1]), self.activate.bias.view(1, -1, 1, 1)
    feats = F.leaky_relu(y + b[:, :c], 0.2) * SQRT2
    return feats, F.leaky_relu(self.noise.weight * noise + b[:, c:], 0.2) * SQRT2


def styled_forward(
    self: StyledConv, x: torch.Tensor | tuple[torch.Tensor, ...], style: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A styled conv handing on its (features, activated noise) halves (see :func:`styled_halves`)."""
    return styled_halves(self, self.conv(x, style), noise)


def to_rgb_forward(self: ToRGB, x: torch.Tensor | tuple[torch.Tensor, ...], style: torch.Tensor,
                   skip: torch.Tensor | None = None) -> torch.Tensor:
    """ToRGB with the upsampled skip as the sum's first operand (the same sum: float addition commutes)."""
    # The CPU plugin orders its nodes depth first from the output, a node's inputs in order; with the
    # level's conv first, every ToRGB ran only after the whole decoder above it, and each
    # level's (features, noise) pair stayed live until then: ~50 MiB of the 512 px float32 peak.
    out = self.conv(x, style) + self.bias
    return out if skip is None else self.upsample(skip) + out


def fir(self: Fir, x: torch.Tensor, up: int = 1, down: int = 1, pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """The FIR with its depthwise kernel built from a Python-int channel count; upsampling as a transposed conv.

    Raises ValueError for an upsampling FIR other than GPEN's 4-tap one with pad (2, 1).
    """
    c = int(x.shape[1])  # a constant in the trace
    k = torch.flip(self.kernel, [0, 1])[None, None].repeat(c, 1, 1, 1)
    p0, p1 = pad
    if up > 1:
        if tuple(pad) != (2, 1) or self.kernel.shape[-1] != 4:
            raise ValueError(f"export supports GPEN's 4-tap upsampling FIR with pad (2, 1), got {tuple(pad)}")
        # zero insertion + pad (2, 1) + FIR == transposed conv with the kernel, padding 1
        return F.conv_transpose2d(x, torch.flip(k, [2, 3]), stride=2, padding=1, groups=c)
    if p0 or p1:
        x = F.pad(x, [p0, p1, p0, p1])
    return F.conv2d(x, k, stride=down, groups=c)
