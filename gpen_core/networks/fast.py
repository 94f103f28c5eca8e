"""The fast GPEN forward: :class:`FastGPEN`, the function of :class:`~gpen_core.networks.arch.GPEN`, one face at a
time, the full-size layers in strips of rows. Each choice and its gain: docs/performance.md, "The fast torch forward:
what it folds and why" and "The generator's full-size level in strips". float32 matches the plain model to ~1e-6;
other dtypes run the convolutions in that dtype, the mapping network and (de)modulation in float32.
"""

from __future__ import annotations

import torch
from torch import nn

from gpen_core.networks.arch import GPEN
from gpen_core.networks.fast_layers import Blur, EncoderConv, Linear, ModConv, StyledConv, ToRGB, onednn_fusion
from gpen_core.networks.plan import ForwardPlan


class FastGPEN(nn.Module):
    """:class:`GPEN` with its own copy of the weights laid out for its convolutions (drop the model after preparing
    to hold them once). The thresholds below are measured: docs/performance.md, "The fast torch forward"."""

    # A level's first conv hands (features, noise) to the second unconcatenated when one half is this big.
    SPLIT_MIN_BYTES = 16 << 20
    # A conv modulates its input instead of its weight when input elements × this ≤ weight elements.
    INPUT_MOD_RATIO = 4
    # Where oneDNN fuses, these dtypes take the polyphase upsampling convs, input modulation with packed
    # weights and the fused noise half (float32 loses or is neutral). Tests force float32 in to check the math.
    REARRANGED_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16,)
    # Full-size rows per strip (:func:`full_size_level`; 64 measured lowest in memory and fastest). 0: untiled. Even.
    STRIP_ROWS = 64

    def __init__(self, model: GPEN, plan: ForwardPlan) -> None:
        super().__init__()
        dt, dev, fir = plan.dtype_torch, torch.device(plan.device), plan.fir
        self.size = model.config.size
        self.memory_format = torch.channels_last if plan.channels_last else torch.contiguous_format
        self.encoder = nn.ModuleList(EncoderConv(getattr(model, n)[0], fir, dt, dev, self.memory_format) for n in model.names)
        self.final_linear = Linear(model.final_linear[0], dev)
        g = model.generator
        self.style = nn.ModuleList(Linear(m, dev) for m in list(g.style)[1:])
        self.register_buffer("const", g.input.input.to(dev, dt).contiguous(memory_format=self.memory_format), persistent=False)
        mf = self.memory_format
        self.conv1 = StyledConv(g.conv1, fir, dt, dev, mf)
        self.to_rgb1 = ToRGB(g.to_rgb1, fir, dt, dev, mf)
        self.convs = nn.ModuleList(StyledConv(c, fir, dt, dev, mf) for c in g.convs)
        # oneDNN's fused ops have no fake-tensor kernels (torch.compile / export cannot trace
        # the in-place one), so a compiled plan leaves fusion to inductor.
        onednn = onednn_fusion(dev, dt) and fir == "depthwise" and not plan.compile
        rearranged = onednn and dt in self.REARRANGED_DTYPES
        for m in self.modules():
            if isinstance(m, ModConv) and m.upsample and rearranged:
                m.use_polyphase()
            if isinstance(m, (Blur, EncoderConv)):
                m.onednn = onednn
            if isinstance(m, StyledConv):
                m.fused_noise = rearranged
                m.cat_in_place = not plan.compile
        if rearranged:
            # (conv, its input's side): level i's upsampling conv takes 2**(i+2) px, its second conv 2**(i+3)
            sized = [(self.conv1.conv, 4)] + [(c.conv, 2 ** (i // 2 + 2 + i % 2)) for i, c in enumerate(self.convs)]
            for conv, res in sized:
                if self.INPUT_MOD_RATIO * conv.wsq.shape[1] * res * res <= conv.weight.numel():
                    conv.use_input_modulation(res)
        # Per level: split only where the concatenation would be big (a fresh buffer that size
        # costs its page faults; below that oneDNN's two half-width convs are no faster) and
        # the second conv's weight is not packed (the small levels).
        # With the noise half fused (rearranged dtypes) splitting pays from a quarter of that.
        min_bytes = self.SPLIT_MIN_BYTES // 4 if rearranged else self.SPLIT_MIN_BYTES
        self.split_levels = []
        for i, sc in enumerate(self.convs[1::2]):
            res, c = 2 ** (i + 3), sc.conv.wsq.shape[1] // 2
            self.split_levels.append(onednn and c * res * res * dt.itemsize >= min_bytes and not sc.conv.packed)
            if self.split_levels[-1]:
                sc.conv.use_split_input(c)
        self.to_rgbs = nn.ModuleList(ToRGB(t, fir, dt, dev, mf) for t in g.to_rgbs)
        # The last level's output only feeds its ToRGB: hand it over as (features, noise) too
        # and let the 1×1 conv accumulate the two halves (saves the biggest concatenation).
        self.split_last = onednn
        if self.split_last:
            last = self.to_rgbs[-1].conv
            last.use_split_input(last.wsq.shape[1] // 2)
        # Strips recompute the noise from the input rows (GPEN's ecd0 is a 1×1 conv, its ecd1 the blur and
        # 3×3 stride-2 conv the halos assume) and run the last level on other shapes than packed
        # weights were reordered for. A compiled plan stays untiled (inductor would compile the unrolled
        # loop); a GPU too (its cost there is unmeasured).
        strippable = not any(c.conv.packed for c in self.convs[-2:]) and not plan.compile and dev.type == "cpu"
        self.strip_rows = self.STRIP_ROWS if strippable else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One image: 1×3×S×S float in [-1, 1] (any dtype/device) → float32 1×3×S×S on the plan's device."""
        x = x.to(device=self.const.device, dtype=self.const.dtype).contiguous(memory_format=self.memory_format)
        strips = 0 < self.strip_rows < self.size
        if strips and self.strip_rows % 2:
            raise ValueError(f"strip height must be a positive even number of rows, got {self.strip_rows}")
        inp = x
        feats: list[torch.Tensor | None] = []
        layers = list(self.encoder)
        if strips:
            # The full-size feature is only the last level's noise, which each strip recomputes.
            x = encoder_head(self, inp, self.strip_rows)
            feats, layers = [None, x], layers[2:]
        for layer in layers:
            x = layer(x)
            feats.append(x)
        # The official code flattens NCHW; keep that order whatever the layout.
        style = self.final_linear(x.float().contiguous().reshape(1, -1))
        latent = style * torch.rsqrt(torch.mean(style * style, dim=1, keepdim=True) + 1e-8)
        for lin in self.style:
            latent = lin(latent)
        # Each encoder feature is one decoder level's noise: popped as used, so the lower levels'
        # are freed before the full-size level, where the peak is.
        out = self.conv1(self.const, latent, feats.pop())
        skip = self.to_rgb1(out, latent, None)
        for i, to_rgb in enumerate(self.to_rgbs):
            last = i == len(self.to_rgbs) - 1
            noise = feats.pop()
            if last and strips:
                return full_size_level(self, out, latent, inp, skip, self.strip_rows)
            out = self.convs[2 * i](out, latent, noise, split=self.split_levels[i])
            if isinstance(out, tuple):  # a list the conv empties: the pair is freed inside it, not after it
                out = list(out)
            out = self.convs[2 * i + 1](out, latent, noise, split=last and self.split_last)
            skip = to_rgb(out, latent, skip)
        return skip.float().contiguous()


# The full-size layers in strips: every op is translation-equivariant along the rows (the upsampling one with
# stride 2), so a strip computed from the rows it depends on, then cropped, equals those rows of the whole
# computation; the image's own top and bottom get no halo (their zero padding is the whole one's).
# Half-size input rows a decoder strip reads beyond its own, each side: the upsampling conv (transposed 3×3,
# stride 2, then the 4-tap blur padded 1) makes output row q read input rows m with q-3 ≤ 2m ≤ q+2, and the 3×3
# conv reads upsampled rows r0-1 .. r1 for [r0, r1): input rows r0/2-2 .. r1/2+1 for even r0, r1.
HALO = 2
# Full-size rows an encoder-head strip reads beyond its own, each side (even: stride 2): encoder[1] is the
# 4-tap blur padded 2, then a 3×3 stride-2 conv, so its output row j reads full-size rows 2j-2 .. 2j+3.
HEAD_HALO = 2


def encoder_head(net: FastGPEN, inp: torch.Tensor, rows: int) -> torch.Tensor:
    """``encoder[1](encoder[0](inp))`` computed ``rows`` (even) full-size rows at a time: ``inp`` the network's
    1×3×S×S input, the half-size feature out, both in the network's layout."""
    e0, e1 = net.encoder[0], net.encoder[1]
    size = inp.shape[2]
    half = size // 2
    out = torch.empty((1, e1.weight.shape[0], half, half), dtype=inp.dtype, device=inp.device,
                      memory_format=net.memory_format)
    for j0 in range(0, half, rows // 2):
        j1 = min(half, j0 + rows // 2)
        a, b = max(0, 2 * j0 - HEAD_HALO), min(size, 2 * j1 + HEAD_HALO)
        y = e1(e0(inp[:, :, a:b]))  # half-size rows [a/2, b/2)
        out[:, :, j0:j1].copy_(y[:, :, j0 - a // 2 : j1 - a // 2])
        del y
    return out


def input_rows(r0: int, r1: int, half: int) -> tuple[int, int]:
    """The half-size input rows ``[m0, m1)`` that full-size output rows ``[r0, r1)`` need (even r0, r1)."""
    return max(0, r0 // 2 - HALO), min(half, r1 // 2 + HALO)


def full_size_level(net: FastGPEN, out: torch.Tensor, latent: torch.Tensor, inp: torch.Tensor, skip: torch.Tensor,
                    rows: int) -> torch.Tensor:
    """The last decoder level and its ToRGB, ``rows`` (even) full-size rows at a time: float32 1×3×S×S. ``out``: the
    previous level's output (1×C×S/2×S/2); ``inp``: the network's input (its rows give the noise)."""
    i = len(net.to_rgbs) - 1
    up_conv, conv, to_rgb = net.convs[2 * i], net.convs[2 * i + 1], net.to_rgbs[i]
    noise_of = net.encoder[0]
    half = out.shape[2]
    size = 2 * half
    up_skip = to_rgb.up(skip)
    del skip
    # float32 and NCHW-contiguous, as the untiled forward returns it.
    result = torch.empty((1, 3, size, up_skip.shape[3]), dtype=torch.float32, device=up_skip.device)
    for r0 in range(0, size, rows):
        r1 = min(size, r0 + rows)
        m0, m1 = input_rows(r0, r1, half)
        noise = noise_of(inp[:, :, 2 * m0 : 2 * m1])
        y = up_conv(out[:, :, m0:m1], latent, noise, split=net.split_levels[i])  # full-size rows [2·m0, 2·m1)
        # The rows the 3×3 conv reads, counted from the strip's first row.
        a, b = max(0, r0 - 1) - 2 * m0, min(size, r1 + 1) - 2 * m0
        # A list the conv empties: the pair is freed before it allocates its own noise half.
        y = [t[:, :, a:b] for t in y] if isinstance(y, tuple) else y[:, :, a:b]
        y = conv(y, latent, noise[:, :, a:b], split=net.split_last)
        del noise
        rgb = to_rgb(y, latent, None)
        del y
        top = r0 - max(0, r0 - 1)  # the conv's output starts one row above r0 except at the image's top
        # The same sum and cast as the untiled ToRGB's ``out.add_(up(skip))`` then ``.float()``.
        result[:, :, r0:r1].copy_(rgb[:, :, top : top + r1 - r0].add_(up_skip[:, :, r0:r1]))
        del rgb
    return result
