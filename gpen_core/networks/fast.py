"""The fast GPEN forward: the networks a :class:`~gpen_core.networks.plan.ForwardPlan` runs.

The plan (device, dtype, layout, compile) is chosen in :mod:`gpen_core.networks.plan`.
:func:`~gpen_core.networks.prepared.prepare` turns a loaded :class:`~gpen_core.networks.arch.GPEN` into a
forward function that computes the same thing faster (its layers: :mod:`gpen_core.networks.fast_layers`):

- every constant is computed once: equalised-lr scales folded into the weights, the
  ``sqrt(2)`` gain of the leaky ReLUs folded into the convolution that feeds them,
  FIR kernels flipped and expanded for a depthwise convolution, and the squared
  weight sums that demodulation needs (demodulation becomes one small mat-vec);
- activations are channels-last, which oneDNN/cuDNN convolve without a layout
  round trip (measured 1.5x for the 3x3 convs, 2.2x for the stride-2 transposed
  convs and 2.2x for the depthwise blurs on this project's CPU);
- the big elementwise steps run in place: a fresh 128×512×512 float buffer costs
  ~10x more in page faults than the leaky ReLU computed into it;
- a batch is run one face at a time (GPEN's modulated weights are per image; a
  grouped convolution over the batch gains nothing and needs a reshape copy);
- the encoder's two full-size layers and the decoder's full-size level run in horizontal
  strips of rows (:mod:`gpen_core.networks.fast_strips`): the same output, without the
  full-size features (GPEN-BFR-512 float32: the tensors alive at the peak 263 → 138 MiB);
- bfloat16 on oneDNN (AMX / AVX-512 BF16): the stride-2 transposed convs run as one
  2×2 conv computing their four output phases, the low-resolution convs modulate their
  input and keep a packed constant weight, and the noise half is one fused pass
  (:attr:`FastGPEN.REARRANGED_DTYPES`; float32 keeps the direct forms, which win there).

Numerics: the float32 plan reassociates a few products (scales folded into weights,
demodulation as a mat-vec), so it matches the plain model to ~1e-6; tests hold it to
1e-4. bfloat16 / float16 plans run the convolutions in that dtype and keep the
mapping network, the modulation and the demodulation in float32.

``torch.compile`` is optional and off by default: it fuses what eager cannot, but the
first call of every new process compiles for tens of seconds even with a warm
cache. :func:`~gpen_core.networks.prepared.warm_up` compiles in the background while calls keep using eager.
"""

from __future__ import annotations

import torch
from torch import nn

from gpen_core.networks.arch import GPEN
from gpen_core.networks.fast_layers import Blur, EncoderConv, Linear, ModConv, StyledConv, ToRGB, onednn_fusion
from gpen_core.networks.fast_strips import encoder_head, full_size_level
from gpen_core.networks.plan import ForwardPlan


class FastGPEN(nn.Module):
    """The same function as :class:`GPEN` (see the module docstring for what differs in how).

    Built from a loaded GPEN by :func:`~gpen_core.networks.prepared.prepare`; it does not modify the model. It keeps
    its own copy of the weights, laid out for its convolutions: drop the model after
    preparing to hold them once.
    ``forward(x)``: x is N×3×S×S float in [-1, 1] (any dtype/device); returns float32
    N×3×S×S on the plan's device.
    """

    # A level's first conv hands (features, noise) to the second unconcatenated when one half
    # is at least this big (measured: 1.18x at 512 px / 64 channels, 1.09x at 256 px / 128
    # channels, neutral to 0.95x for the smaller levels, single-thread CPU time).
    SPLIT_MIN_BYTES = 16 << 20
    # A conv modulates its input instead of its weight when input elements × this ≤ weight
    # elements (the 4..32 px levels of GPEN-BFR-512; measured break-even near 1/1).
    INPUT_MOD_RATIO = 4
    # Where oneDNN fuses, these dtypes take the polyphase upsampling convs, input modulation
    # with packed weights and the fused noise half: measured 1.1-1.4x end to end in bfloat16
    # on AMX; float32 loses (polyphase) or is neutral. Tests force float32 in to check the math.
    REARRANGED_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16,)
    # The encoder's full-size layers and the decoder's full-size level run in strips of this
    # many full-size rows (:mod:`fast_strips`): the same output without any full-size feature
    # (docs/performance.md, "The generator's full-size level in strips": 64 measured lowest
    # in memory and fastest, 5-10 % faster than untiled). 0: untiled. Even (stride 2).
    STRIP_ROWS = 64

    def __init__(self, model: GPEN, plan: ForwardPlan) -> None:
        super().__init__()
        dt, dev, fir = plan.dtype_torch, torch.device(plan.device), plan.fir
        self.plan = plan
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
        # Each level's first conv hands its output to the second as a (features, noise) pair
        # (saves building one concatenation per level: ~15% at 512 px on CPU).
        # oneDNN's fused ops have no fake-tensor kernels (torch.compile / export cannot trace
        # the in-place one), so a compiled plan leaves fusion to inductor.
        onednn = onednn_fusion(dev, dt) and fir == "depthwise" and not plan.compile
        # Upsampling convs in polyphase form (where oneDNN runs bf16 natively, AMX / AVX-512
        # BF16: measured 1.5-1.9x on those convs; float32 loses 1.5x: more taps), the
        # low-resolution convs input-modulated with packed weights, the noise half fused.
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
            sized = [(self.conv1.conv, 4)]  # (conv, its input's size)
            for i in range(len(self.convs) // 2):
                sized += [(self.convs[2 * i].conv, 2 ** (i + 2)), (self.convs[2 * i + 1].conv, 2 ** (i + 3))]
            for conv, res in sized:
                if self.INPUT_MOD_RATIO * conv.wsq.shape[1] * res * res <= conv.weight.numel():
                    conv.use_input_modulation(res)
        # Per level: split only where the concatenation would be big (a fresh buffer that size
        # costs its page faults; below that oneDNN's two half-width convs are no faster) and
        # the second conv's weight is not packed (the small levels).
        self.split_levels = []
        for i, sc in enumerate(self.convs[1::2]):
            res, c = 2 ** (i + 3), sc.conv.wsq.shape[1] // 2
            # With the noise half fused (rearranged dtypes) splitting pays from a quarter of that
            # (measured 1.02-1.05x at 4 MB in bfloat16; float32 at 4 MB: within noise).
            min_bytes = self.SPLIT_MIN_BYTES // 4 if rearranged else self.SPLIT_MIN_BYTES
            big = c * res * res * torch.empty((), dtype=dt).element_size() >= min_bytes
            self.split_levels.append(onednn and big and not sc.conv.packed)
            if self.split_levels[-1]:
                sc.conv.use_split_input(c)
        self.to_rgbs = nn.ModuleList(ToRGB(t, fir, dt, dev, mf) for t in g.to_rgbs)
        # The last level's output only feeds its ToRGB: hand it over as (features, noise) too
        # and let the 1×1 conv accumulate the two halves (saves the biggest concatenation).
        self.split_last = onednn
        if self.split_last:
            last = self.to_rgbs[-1].conv
            last.use_split_input(last.wsq.shape[1] // 2)
        # Strips recompute the noise from the input rows, which needs encoder[0] to be a
        # 1×1 conv (GPEN's ecd0), and run the last level on other shapes than its packed
        # weights were reordered for. A compiled plan stays untiled: the unrolled strip loop
        # would multiply the graph inductor compiles, and inductor plans its own buffers.
        # CPU only: the strip height's cost was measured there; on a GPU the extra kernel
        # launches are unmeasured (the output would be the same).
        e0, e1 = self.encoder[0], self.encoder[1]
        strippable = e0.blur is None and e0.weight.shape[-2:] == (1, 1) and e0.stride == 1 and e0.padding == 0
        strippable = strippable and not any(c.conv.packed for c in self.convs[-2:])
        # The encoder's head in strips needs GPEN's downsampling ConvLayer (fast_strips.HEAD_HALO).
        strippable = strippable and e1.blur is not None and e1.blur.pad == (2, 2) and e1.blur.up == 1
        strippable = strippable and e1.weight.shape[-2:] == (3, 3) and e1.stride == 2 and e1.padding == 0
        self.strip_rows = self.STRIP_ROWS if strippable and not plan.compile and dev.type == "cpu" else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] != self.size or x.shape[3] != self.size:
            raise ValueError(f"expected N×3×{self.size}×{self.size} input, got {tuple(x.shape)}")
        if x.shape[0] == 1:
            return self.one(x)
        return torch.cat([self.one(x[i : i + 1]) for i in range(x.shape[0])])

    def one(self, x: torch.Tensor) -> torch.Tensor:
        """One image: 1×3×S×S → float32 1×3×S×S."""
        x = x.to(device=self.const.device, dtype=self.const.dtype).contiguous(memory_format=self.memory_format)
        strips = 0 < self.strip_rows < self.size
        inp = x
        feats: list[torch.Tensor | None] = []
        layers = list(self.encoder)
        if strips:
            # The full-size feature is only the last level's noise, which each strip recomputes
            # from its input rows (a 1×1 conv): it is never built whole (GPEN-BFR-512 float32:
            # 64 MiB, and as much again for its blurred copy in encoder[1]).
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
        # Each encoder feature is the noise input of one decoder level only: popped as it is used,
        # the lower levels' features are freed before the full-size level, where the peak is
        # (GPEN-BFR-512: 58 MiB of its 122 MiB of features).
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
