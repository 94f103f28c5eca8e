"""The GPEN generator as a graph OpenVINO's CPU plugin runs well (:func:`exportable`), for
:func:`gpen_core.runtimes.openvino.generator.convert`. Standard library only at module import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPEN, ModulatedConv2d

# The exported graph's revision, stored in meta.json: an IR converted by an older revision is
# converted again on load (same function, slower or hungrier graph), never reused.
GRAPH_REVISION = 3
# The full-size decoder level is exported as this many horizontal strips of rows (see
# :func:`exportable`); 1 exports it whole, as revision 2 did. Measured in docs/performance.md,
# "OpenVINO: the full-size level in strips".
FULL_SIZE_STRIPS = 4
# Rows of the half-size level a full-size strip reads beyond its own on each side: the
# upsampling conv's output row r depends on input rows ceil((r-3)/2) .. floor((r+2)/2) (3-tap
# stride-2 transposed conv, then the 4-tap blur padded (1, 1)), and the 3×3 conv after it needs
# one full-size row more on each side: rows a-1 .. b of a strip [a, b) need inputs a/2-2 .. b/2+1.
HALF_SIZE_HALO = 2
# A decoder conv modulates its input instead of its weight when 4 × its input's elements ≤ its
# weight's (the 4..32 px levels of GPEN-BFR-512), as gpen_core.networks.fast does; everywhere would cost
# one more pass over the big levels (measured: docs/performance.md, "OpenVINO: the full-size level in strips").
INPUT_MOD_RATIO = 4


def exportable(model: GPEN, *, strips: int = FULL_SIZE_STRIPS) -> GPEN:
    """Make ``model``'s forward traceable with static shapes and fast in OpenVINO, in place; returns it.

    The same function (tests: ≤ 1e-5 apart in float32), faster than the first exported graph (measured:
    docs/performance.md, "OpenVINO: the full-size level in strips"):

    - FIR kernels are built from a Python-int channel count (a traced shape would make the
      weight dynamic); the upsampling FIR is a transposed depthwise convolution.
    - Modulated convolutions of one image are plain (transposed) convolutions (batch 1 only).
    - Where the weight is big and the input small (:data:`INPUT_MOD_RATIO`), ``conv(x · s, W) · d``:
      the weight stays a constant the plugin packs once, instead of being remade every call.
    - Demodulation is the mat-vec ``rsqrt(Wsq @ s² + 1e-8)`` with the constant
      ``Wsq[o, i] = Σ_kl (scale · W[o, i, k, l])²``.
    - A styled conv hands on its (features, activated noise) halves unconcatenated: a stride-1 conv
      takes them as two summed convolutions (the plugin fuses the sum), saving the copy.
    - The full-size level runs as ``strips`` strips of rows (1: whole), each from the half-size rows it
      needs plus :data:`HALF_SIZE_HALO`; every op is translation-equivariant, so they equal the whole
      level, and only one strip's buffers live at a time (the noise is recomputed per strip, the skip
      upsampled once and sliced). Each ToRGB sum takes the upsampled skip first, so each ToRGB runs
      right after its level.
    """
    import types

    import torch

    from gpen_core.networks.arch import Fir, ModulatedConv2d, StyledConv, ToRGB
    from gpen_core.runtimes.openvino import export_patches as patches

    res = _decoder_input_sizes(model)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, ModulatedConv2d):
                _prepare_modconv(m, res.get(id(m)))
                m.forward = types.MethodType(patches.modconv_forward, m)  # type: ignore[method-assign]
            elif isinstance(m, StyledConv):
                m.forward = types.MethodType(patches.styled_forward, m)  # type: ignore[method-assign]
            elif isinstance(m, Fir):
                m._fir = types.MethodType(patches.fir, m)  # type: ignore[method-assign]
            elif isinstance(m, ToRGB):
                m.forward = types.MethodType(patches.to_rgb_forward, m)  # type: ignore[method-assign]
    if strips > 1:
        model.forward = types.MethodType(_striped_forward(strips, patches.styled_halves), model)  # type: ignore[method-assign]
    return model


def _decoder_input_sizes(model: GPEN) -> dict[int, int]:
    """``id(conv)`` → the side (px) of its input, for each decoder modulated conv of ``model``'s generator
    (found again by walking ``model.modules()``); the ToRGB convs are absent, so they keep the weight modulated."""
    g = model.generator
    res = {id(g.conv1.conv): 4}
    for i, conv in enumerate(g.convs):
        res[id(conv.conv)] = 2 ** (i // 2 + 2 + i % 2)
    return res


def _prepare_modconv(m: ModulatedConv2d, input_side: int | None) -> None:
    """Set the plain attributes :func:`export_patches.modconv_forward` reads, and drop ``m.weight``; under
    ``torch.no_grad()`` (they become constants in the trace). ``input_side``: px, None: modulate the weight."""
    w = m.weight[0].float() * m.scale  # (out, in, k, k)
    m.export_wsq = w.pow(2).sum([2, 3])  # plain attributes: constants in the trace
    m.export_weight = w.transpose(0, 1).contiguous() if m.upsample else w
    r = input_side
    # input elements · INPUT_MOD_RATIO ≤ weight elements, i.e. RATIO · in · r² ≤ out · in · k²
    small_input = r is not None and INPUT_MOD_RATIO * r * r <= w.shape[0] * w.shape[2] * w.shape[3]
    m.export_input_modulated = bool(m.demodulate and small_input)
    m.weight = None  # the export holds it scaled: not twice in memory while converting


def _strip_bounds(size: int, strips: int) -> list[int]:
    """Row boundaries of ``strips`` strips of a ``size``-row level, all even (a half-size row each side)."""
    half = size // 2
    if not 1 <= strips <= half:
        raise ValueError(f"strips must be between 1 and {half} for a {size} px level, got {strips}")
    return [2 * (k * half // strips) for k in range(strips + 1)]


def _striped_forward(strips: int, styled_halves: Callable[..., Any]) -> Callable[..., Any]:
    """GPEN's forward with the full-size decoder level computed strip by strip (see :func:`exportable`); the
    other levels as :class:`~gpen_core.networks.arch.Generator` runs them. Batch 1, Python-int slices only."""
    import torch

    def forward(self: GPEN, x: torch.Tensor) -> torch.Tensor:
        feats, h = [], x
        for name in self.names:
            h = getattr(self, name)(h)
            feats.append(h)
        style = self.final_linear(h.reshape(h.shape[0], -1))
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
            rows.append(skip[:, :, a:b] + (rgb.conv(pair, latent) + rgb.bias))  # skip first: see export_patches.to_rgb_forward
        return torch.cat(rows, 2)

    return forward
