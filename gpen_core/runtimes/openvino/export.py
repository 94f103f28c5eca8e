"""The GPEN generator as a graph OpenVINO's CPU plugin runs well (:func:`exportable`): forwards bound onto GPEN's
modules, each the same function as the module's own. Imports torch: import it only to convert."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from gpen_core.networks.arch import GPEN, Fir, ModulatedConv2d, StyledConv, ToRGB, fused_leaky_relu
from gpen_core.networks.fast import HALO, FastGPEN

# Horizontal strips of the full-size decoder level (1: whole, as revision 2), the half-size rows a strip reads
# beyond its own, and when a decoder conv modulates its input instead of its weight (the fast torch forward's):
# measured in docs/performance.md, "OpenVINO: the full-size level in strips".
FULL_SIZE_STRIPS = 4
HALF_SIZE_HALO = HALO
INPUT_MOD_RATIO = FastGPEN.INPUT_MOD_RATIO


def exportable(model: GPEN, *, strips: int = FULL_SIZE_STRIPS) -> GPEN:
    """Make ``model``'s forward traceable with static shapes (batch 1) and fast in OpenVINO, in place; returns it.
    The same function (tests: ≤ 1e-5 apart in float32); its forms and their gains: docs/performance.md, "OpenVINO:
    the full-size level in strips"."""
    g = model.generator
    # Each decoder modulated conv's input side, as FastGPEN's; the ToRGB convs are absent: they modulate the weight.
    res = {id(g.conv1.conv): 4, **{id(c.conv): 2 ** (i // 2 + 2 + i % 2) for i, c in enumerate(g.convs)}}
    forwards = {ModulatedConv2d: modconv_forward, StyledConv: styled_forward, Fir: fir_forward, ToRGB: to_rgb_forward}
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, ModulatedConv2d):
                _prepare_modconv(m, res.get(id(m)))
            if type(m) in forwards:
                m.forward = types.MethodType(forwards[type(m)], m)  # type: ignore[method-assign]
    if strips > 1:
        model.forward = types.MethodType(_striped_forward(strips), model)  # type: ignore[method-assign]
    return model


def _prepare_modconv(m: ModulatedConv2d, input_side: int | None) -> None:
    """Set the constants :func:`modconv_forward` reads, and drop ``m.weight``. ``input_side``: px (None: modulate
    the weight)."""
    w = m.weight[0].float() * m.scale  # (out, in, k, k)
    m.export_wsq = w.pow(2).sum([2, 3])  # plain attributes: constants in the trace
    m.export_weight = w.transpose(0, 1).contiguous() if m.upsample else w
    # input elements · INPUT_MOD_RATIO ≤ weight elements, i.e. RATIO · in · r² ≤ out · in · k²
    r = input_side
    small_input = r is not None and INPUT_MOD_RATIO * r * r <= w.shape[0] * w.shape[2] * w.shape[3]
    m.export_input_modulated = bool(m.demodulate and small_input)
    m.weight = None  # the export holds it scaled: not twice in memory while converting


def _strip_bounds(size: int, strips: int) -> list[int]:
    """Row boundaries of ``strips`` strips of a ``size``-row level, all even (a half-size row each side)."""
    half = size // 2
    if not 1 <= strips <= half:
        raise ValueError(f"strips must be between 1 and {half} for a {size} px level, got {strips}")
    return [2 * (k * half // strips) for k in range(strips + 1)]


def _striped_forward(strips: int) -> Callable[..., Any]:
    """GPEN's forward with the full-size decoder level computed strip by strip; batch 1, Python-int slices only."""
    def forward(self: GPEN, x: torch.Tensor) -> torch.Tensor:
        feats, style = self.encode(x)
        g = self.generator
        latent = g.style(style)
        out = g.conv1(g.input(latent.shape[0]), latent, feats[-1])
        skip = g.to_rgb1(out, latent)
        levels = list(zip(g.convs[::2], g.convs[1::2], g.to_rgbs))
        # feats[i] is the encoder feature at size / 2**i; every decoder level but the last takes its own
        for (c1, c2, rgb), noise in zip(levels[:-1], feats[-2:0:-1]):
            out = c2(c1(out, latent, noise), latent, noise)
            skip = rgb(out, latent, skip)
        c1, c2, rgb = levels[-1]
        size, half = int(x.shape[2]), int(out[0].shape[2])
        skip = rgb.upsample(skip)  # 3 channels at full size: once, sliced per strip
        rows = []
        bounds = _strip_bounds(size, strips)
        for a, b in zip(bounds[:-1], bounds[1:]):
            i0, i1 = max(a // 2 - HALF_SIZE_HALO, 0), min(b // 2 + HALF_SIZE_HALO, half)
            lo, hi = max(a - 1, 0), min(b + 1, size)  # the rows the 3×3 conv reads for [a, b)
            y = c1.conv(tuple(p[:, :, i0:i1] for p in out), latent)[:, :, lo - 2 * i0 : hi - 2 * i0]
            pair = styled_halves(c1, y, self.ecd0(x[:, :, lo:hi]))
            y = c2.conv(pair, latent)[:, :, a - lo : b - lo]
            pair = styled_halves(c2, y, self.ecd0(x[:, :, a:b]))
            rows.append(skip[:, :, a:b] + (rgb.conv(pair, latent) + rgb.bias))  # skip first: see to_rgb_forward
        return torch.cat(rows, 2)

    return forward


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
    c, b = int(y.shape[1]), self.activate.bias
    return fused_leaky_relu(y, b[:c]), fused_leaky_relu(self.noise.weight * noise, b[c:])


def styled_forward(self: StyledConv, x: torch.Tensor | tuple[torch.Tensor, ...], style: torch.Tensor,
                   noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A styled conv handing on its (features, activated noise) halves (see :func:`styled_halves`)."""
    return styled_halves(self, self.conv(x, style), noise)


def to_rgb_forward(self: ToRGB, x: torch.Tensor | tuple[torch.Tensor, ...], style: torch.Tensor,
                   skip: torch.Tensor | None = None) -> torch.Tensor:
    """ToRGB with the upsampled skip as the sum's first operand (the same sum): the CPU plugin runs a node's inputs
    in order, and with the conv first every ToRGB ran only after the whole decoder above it, each level's pair kept
    alive until then (docs/performance.md, "OpenVINO: the full-size level in strips")."""
    out = self.conv(x, style) + self.bias
    return out if skip is None else self.upsample(skip) + out


def fir_forward(self: Fir, x: torch.Tensor) -> torch.Tensor:
    """The FIR with its depthwise kernel built from a Python-int channel count; upsampling as a transposed conv
    (ValueError for one other than GPEN's 4-tap one with pad (2, 1))."""
    c = int(x.shape[1])  # a constant in the trace
    k = torch.flip(self.kernel, [0, 1])[None, None].repeat(c, 1, 1, 1)
    p0, p1 = self.pad
    if self.up > 1:
        if tuple(self.pad) != (2, 1) or self.kernel.shape[-1] != 4:
            raise ValueError(f"export supports GPEN's 4-tap upsampling FIR with pad (2, 1), got {tuple(self.pad)}")
        # zero insertion + pad (2, 1) + FIR == transposed conv with the kernel, padding 1
        return F.conv_transpose2d(x, torch.flip(k, [2, 3]), stride=2, padding=1, groups=c)
    if p0 or p1:
        x = F.pad(x, [p0, p1, p0, p1])
    return F.conv2d(x, k, groups=c)
