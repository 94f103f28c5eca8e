"""The fast GPEN forward: the networks a :class:`~gpen_core.networks.plan.ForwardPlan` runs.

The plan (device, dtype, layout, compile) is chosen in :mod:`gpen_core.networks.plan`.
:func:`prepare` turns a loaded :class:`~gpen_core.networks.arch.GPEN` into a forward function
that computes the same thing faster:

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
cache. :func:`warm_up` compiles in the background while calls keep using eager.
"""


from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.networks.arch import GPEN, FirImpl, upfirdn2d_native
from gpen_core.networks.fast_strips import encoder_head, full_size_level
from gpen_core.networks.plan import ForwardPlan

_SQRT2 = math.sqrt(2.0)


def _leaky_(x: torch.Tensor) -> torch.Tensor:
    # The sqrt(2) gain of FusedLeakyReLU is folded into whatever produced x.
    return F.leaky_relu_(x, 0.2)


def _onednn_fusion(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether oneDNN's fused conv ops (the ones inductor uses on CPU) can run here.

    ``mkldnn._convolution_pointwise`` computes conv + leaky ReLU in one pass, and its
    in-place ``binary`` form accumulates a second convolution into an existing output,
    which lets a layer consume GPEN's concatenated [features, noise] input without
    building the concatenation.
    """
    ops = torch.ops.mkldnn
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not (hasattr(ops, "_convolution_pointwise") and hasattr(ops, "_convolution_pointwise_")):
        return False
    if dtype == torch.bfloat16:  # the fused ops refuse bf16 where oneDNN only emulates it
        probe = getattr(ops, "_is_mkldnn_bf16_supported", None)
        return bool(probe is not None and probe())
    return dtype == torch.float32


def _modulated(base: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """base * factor; the product keeps base's (channels-last) layout, which is the one the
    convolution wants, so it copies no weight (~2% of a 512 px forward otherwise)."""
    return base * factor


def _conv_leaky(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, padding: int, groups: int = 1, stride: int = 1
) -> torch.Tensor:
    """leaky_relu(conv2d(x, w, b, stride, padding), 0.2) in one oneDNN pass."""
    p, st = [padding, padding], [stride, stride]
    return torch.ops.mkldnn._convolution_pointwise(x, w, b, p, st, [1, 1], groups, "leaky_relu", [0.2], "")


def _conv_accumulate_(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, padding: int) -> torch.Tensor:
    """out += conv2d(x, w) in place, as a oneDNN post-op (stride 1, no bias)."""
    p = [padding, padding]
    return torch.ops.mkldnn._convolution_pointwise_.binary(out, x, w, None, p, [1, 1], [1, 1], 1, "add", None, None, [], None)


def _own(t: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``t``, copied if it still shares memory with ``source`` (a checkpoint tensor, maybe mmap-backed)."""
    if t.untyped_storage().data_ptr() == source.untyped_storage().data_ptr():
        return t.clone(memory_format=torch.preserve_format)
    return t


class _Blur(nn.Module):
    """A 4×4 FIR with symmetric padding (and for ``up=2`` a 2x upsampling), per channel."""

    def __init__(self, kernel: torch.Tensor, channels: int, pad: tuple[int, int], up: int, fir: FirImpl, dt, dev) -> None:
        super().__init__()
        if up > 1 and (tuple(pad) != (2, 1) or kernel.shape[-1] != 4):
            raise ValueError(f"fast upsampling supports GPEN's 4-tap FIR with pad (2, 1), got {tuple(kernel.shape)} {pad}")
        self.fir, self.pad, self.up, self.channels = fir, tuple(pad), up, channels
        self.onednn = False  # set by FastGPEN: fuse the leaky ReLU into the blur with oneDNN
        self.memory_format = torch.channels_last  # set by FastGPEN: the layout of from_phases' buffer
        # On the plan's device like every other weight: the model's kernel stays where it was loaded
        # (the CPU), and a CPU FIR under a CUDA input fails at the first blur.
        self.register_buffer("raw", kernel.float().to(dev, copy=True), persistent=False)  # for "native"
        # Correlation with the flipped kernel == the official convolution. For up=2 the
        # transposed conv flips once more, so it takes the kernel itself.
        k = kernel if up > 1 else torch.flip(kernel, [0, 1])
        self.register_buffer("dw", k.to(dev, dt)[None, None].repeat(channels, 1, 1, 1).contiguous(), persistent=False)

    def from_phases(
        self, y: torch.Tensor, bias: torch.Tensor | None, leaky: bool, scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        """This blur (pad (1, 1)) of the 2x upsampled image whose four phases ``y`` holds.

        ``y``: N×4C×h×w, channel ``(2a + b)·C + c`` holding pixel ``(2m + a, 2n + b)`` of the
        2h×2w image whose last row and column are zero (:meth:`_ModConv.use_polyphase`).
        The phases are interleaved into a (2h+1)×(2w+1) buffer behind one zero row and column,
        the blur's padding on both sides, so the blur reads it with padding 0 and no crop.
        (h ≠ w for a strip of rows, :mod:`gpen_core.networks.fast_strips`.)
        ``scale`` (C,) multiplies channel c before the bias (folded into the kernel).
        """
        n, c4, h, w = y.shape
        c = c4 // 4
        buf = torch.empty((n, c, 2 * h + 1, 2 * w + 1), dtype=y.dtype, device=y.device, memory_format=self.memory_format)
        buf[:, :, 0].zero_()
        buf[:, :, 1:, 0].zero_()
        dst = buf[:, :, 1:, 1:].unflatten(2, (h, 2)).unflatten(4, (w, 2))  # (n, c, m, a, n, b)
        dst.copy_(y.unflatten(1, (2, 2, c)).permute(0, 3, 4, 1, 5, 2))
        del y
        dw = self.dw if scale is None else self.dw * scale.view(-1, 1, 1, 1)
        if leaky and self.onednn and self.fir == "depthwise":
            return _conv_leaky(buf, dw, bias, 0, groups=self.channels)
        out = F.conv2d(buf, dw, bias=bias, groups=self.channels)
        return _leaky_(out) if leaky else out

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None, leaky: bool = False) -> torch.Tensor:
        """FIR (+ per-channel bias) (+ leaky ReLU, fused where oneDNN can)."""
        if leaky:
            if self.onednn and self.fir == "depthwise" and self.up == 1 and self.pad[0] == self.pad[1]:
                return _conv_leaky(x, self.dw, bias, self.pad[0], groups=self.channels)
            return _leaky_(self.forward(x, bias))
        if self.fir == "native":
            out = upfirdn2d_native(x, self.raw.to(x.dtype), up=self.up, pad=self.pad)
            return out if bias is None else out + bias.view(1, -1, 1, 1)
        if self.up > 1:
            # Zero-insertion + pad (p0, p1) + FIR == transposed conv cropped by kh-1-p0 rows at
            # the start: for GPEN's 4-tap kernel and pad (2, 1) that is padding=1 on both sides.
            out = F.conv_transpose2d(x, self.dw, stride=2, padding=1, groups=self.channels)
            return out if bias is None else out + bias.view(1, -1, 1, 1)
        p0, p1 = self.pad
        if p0 != p1:
            x = F.pad(x, [p0, p1, p0, p1])
            p0 = 0
        return F.conv2d(x, self.dw, bias=bias, padding=p0, groups=self.channels)


class _EncoderConv(nn.Module):
    """``ConvLayer``: [blur] → conv (scale and sqrt(2) folded) with bias → leaky ReLU."""

    def __init__(self, layer: nn.Sequential, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        mods = list(layer)
        self.blur = None
        if len(mods) == 3:
            b = mods[0]
            self.blur = _Blur(b.kernel, mods[1].weight.shape[1], b.pad, 1, fir, dt, dev)
        conv, act = mods[-2], mods[-1]
        self.stride, self.padding = int(conv.stride), int(conv.padding)  # EqualConv2d's: square ints
        self.onednn = False  # set by FastGPEN: fuse the leaky ReLU into the conv with oneDNN
        # In the activations' layout: the convolution would otherwise copy it on every call.
        w = (conv.weight.float() * (conv.scale * _SQRT2)).to(dev, dt).contiguous(memory_format=memory_format)
        self.register_buffer("weight", w, persistent=False)
        self.register_buffer("bias", (act.bias.float() * _SQRT2).to(dev, dt), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blur is not None:
            x = self.blur(x)
        if self.onednn:
            return _conv_leaky(x, self.weight, self.bias, self.padding, stride=self.stride)
        return _leaky_(F.conv2d(x, self.weight, bias=self.bias, stride=self.stride, padding=self.padding))


class _Linear(nn.Module):
    """``EqualLinear`` in float32 with its scales (and the activation gain) folded in."""

    def __init__(self, lin: nn.Module, dev) -> None:
        super().__init__()
        gain = _SQRT2 if lin.activation else 1.0
        self.activation = lin.activation
        self.register_buffer("weight", (lin.weight.float() * (lin.scale * gain)).to(dev), persistent=False)
        self.register_buffer("bias", (lin.bias.float() * (lin.lr_mul * gain)).to(dev), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        return _leaky_(out) if self.activation else out


class _ModConv(nn.Module):
    """``ModulatedConv2d``: style → per-(out, in) factor → one weight multiply → conv.

    Demodulation ``rsqrt(sum_ikl (scale*W*s_i)^2)`` is ``rsqrt(Wsq @ s^2)`` with the
    constant ``Wsq[o, i] = sum_kl (scale*W[o, i, k, l])^2``: a mat-vec instead of three
    passes over the modulated weight.
    """

    def __init__(self, conv: nn.Module, gain: float, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.upsample, self.demodulate, self.padding = conv.upsample, conv.demodulate, conv.padding
        self.memory_format = memory_format
        self.scale, self.gain = float(conv.scale), gain
        self.modulation = _Linear(conv.modulation, dev)
        w = conv.weight[0]  # (out, in, k, k)
        # Stored once in the layout the convolution wants (conv_transpose: (in, out, k, k)),
        # so the per-image modulation is one layout-preserving multiply and the conv copies
        # nothing. Always a copy: a tensor that still aliased the model's (a float32 1×1 ToRGB
        # weight is already "channels-last") would keep a mmap-loaded checkpoint file mapped
        # whole: 270 MB resident for GPEN-BFR-512, measured, for 16 small tensors.
        base = w.permute(1, 0, 2, 3) if self.upsample else w
        self.register_buffer("weight", _own(base.to(dev, dt).contiguous(memory_format=memory_format), w), persistent=False)
        self.split_at: int | None = None
        self.polyphase = False
        self.packed = False  # use_input_modulation
        self.register_buffer("wsq", (w.float() * self.scale).pow(2).sum([2, 3]).to(dev), persistent=False)
        self.blur = None
        if self.upsample:
            self.blur = _Blur(conv.blur.kernel, w.shape[0], conv.blur.pad, 1, fir, dt, dev)

    def styles(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-input-channel modulation (in,) and per-output-channel demodulation (out,) or None.

        Both float32, for one image's latent (1, style_dim); the effective weight is
        ``W[o, i] · s[i] · d[o]``.
        """
        s = self.modulation(latent)[0]  # (in,)
        d = torch.rsqrt(self.wsq @ (s * s) + 1e-8) if self.demodulate else None  # (out,)
        return s * (self.scale * self.gain), d

    def factor(self, latent: torch.Tensor) -> torch.Tensor:
        """(out, in) float32 multiplier for the base weight, for one image's latent (1, style_dim)."""
        f, d = self.styles(latent)
        if d is not None:
            return d[:, None] * f[None, :]
        return f[None, :].expand(self.wsq.shape[0], -1)

    def forward(
        self, x: torch.Tensor, latent: torch.Tensor, bias: torch.Tensor | None = None, leaky: bool = False
    ) -> torch.Tensor:
        """conv(x) + bias, then leaky ReLU when asked (the upsampling conv fuses it into the blur)."""
        if self.packed:
            return self._forward_input_modulated(x, latent, bias, leaky)
        f = self.factor(latent).to(self.weight.dtype)
        if self.polyphase:
            w = _modulated(self.weight, f.repeat(4, 1)[:, :, None, None])
            return self.blur.from_phases(F.conv2d(x, w, padding=1), bias, leaky)
        if self.upsample:
            # The factor made contiguous in the weight's (in, out) order: a transposed view
            # broadcast over the channels-last weight takes a slow strided loop (measured 5x).
            w = _modulated(self.weight, f.t().contiguous()[:, :, None, None])
            out = F.conv_transpose2d(x, w, stride=2)
            return self.blur(out, bias, leaky=leaky)  # the next activation's bias rides on the blur conv
        w = _modulated(self.weight, f[:, :, None, None])
        out = F.conv2d(x, w, bias=bias, padding=self.padding)
        return _leaky_(out) if leaky else out

    def _forward_input_modulated(
        self, x: torch.Tensor, latent: torch.Tensor, bias: torch.Tensor | None, leaky: bool
    ) -> torch.Tensor:
        """``forward`` as ``conv(x · s, W) · d``: the input takes the modulation, the output (or,
        for the upsampling conv, the blur's kernel: it is per channel) the demodulation."""
        s, d = self.styles(latent)
        assert d is not None  # use_input_modulation checked demodulate
        d = d.to(x.dtype)
        p = [1, 1] if self.polyphase else [self.padding, self.padding]
        y = torch.ops.mkldnn._convolution_pointwise(
            x * s.to(x.dtype).view(1, -1, 1, 1), self.weight, None, p, [1, 1], [1, 1], 1, "none", [], ""
        )
        if self.polyphase:
            return self.blur.from_phases(y, bias, leaky, scale=d)
        y = y.mul_(d.view(1, -1, 1, 1)) if bias is None else torch.addcmul(bias.view(1, -1, 1, 1), y, d.view(1, -1, 1, 1))
        return _leaky_(y) if leaky else y

    def use_input_modulation(self, size: int) -> None:
        """Modulate the input (size×size) instead of the weight, and keep the weight packed.

        For the low-resolution layers, whose input is smaller than their weight: the weight
        stays constant, so it is packed once into oneDNN's blocked layout (a modulated one is
        multiplied and reordered on every call: measured ~10x the 2×2 polyphase conv's own
        time at 4×4 px in bfloat16, 3x for a 3×3 conv at 16 px). oneDNN only (CPU).
        """
        if not self.demodulate or (self.upsample and not self.polyphase):
            raise ValueError("input modulation needs a demodulated stride-1 conv (polyphase for upsampling)")
        p = 1 if self.polyphase else self.padding
        cin = self.weight.shape[1]
        packed = torch.ops.mkldnn._reorder_convolution_weight(self.weight, [p, p], [1, 1], [1, 1], 1, [1, cin, size, size])
        self.register_buffer("weight", packed, persistent=False)
        self.packed = True

    def use_polyphase(self) -> None:
        """Run the stride-2 transposed conv as one stride-1 conv that computes its four phases.

        Output pixel ``(2m + a, 2n + b)`` of ``conv_transpose2d(x, W, stride=2)`` is
        ``sum_{r,s} x[m-1+r, n-1+s] · W[a+2-2r, b+2-2s]`` (r, s ∈ {0, 1}, taps past 2 are 0):
        a 2×2 conv over x padded by 1 whose 4·out channels are the phases (h+1 of them per
        axis; the last row and column of the interleaved image are zero). oneDNN runs it
        1.5-2x faster than its bfloat16 transposed conv on AMX, but slower in float32 (16
        taps instead of 9). The weight is stored arranged (16/9 the size), so modulating it
        stays one multiply.
        """
        w = self.weight.permute(1, 0, 2, 3)  # (out, in, 3, 3): exact values, only rearranged
        o, i = w.shape[:2]
        wp = w.new_zeros(2, 2, o, i, 2, 2)
        for a in (0, 1):
            for b in (0, 1):
                for r in (0, 1):
                    for t in (0, 1):
                        kh, kw = a + 2 - 2 * r, b + 2 - 2 * t
                        if kh <= 2 and kw <= 2:
                            wp[a, b, :, :, r, t] = w[:, :, kh, kw]
        wp = wp.reshape(4 * o, i, 2, 2).contiguous(memory_format=self.memory_format)
        self.register_buffer("weight", wp, persistent=False)
        self.blur.memory_format = self.memory_format
        self.polyphase = True

    def use_split_input(self, c: int) -> None:
        """Keep the weight as its two input halves (each contiguous) for :meth:`forward_split`."""
        mf = self.memory_format
        self.register_buffer("weight_lo", self.weight[:, :c].contiguous(memory_format=mf), persistent=False)
        self.register_buffer("weight_hi", self.weight[:, c:].contiguous(memory_format=mf), persistent=False)
        del self.weight
        self.split_at = c

    def forward_split(self, y: torch.Tensor, n: torch.Tensor, latent: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``forward(cat((y, n), 1), bias)`` without building the concatenation (oneDNN only)."""
        f = self.factor(latent).to(self.weight_lo.dtype)[:, :, None, None]
        c = self.split_at
        out = F.conv2d(y, _modulated(self.weight_lo, f[:, :c]), bias=bias, padding=self.padding)
        return _conv_accumulate_(out, n, _modulated(self.weight_hi, f[:, c:]), self.padding)


class _StyledConv(nn.Module):
    """``StyledConv``: modulated conv, noise concatenation, leaky ReLU; gains and biases folded."""

    def __init__(self, sc: nn.Module, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.conv = _ModConv(sc.conv, _SQRT2, fir, dt, dev, memory_format)
        self.memory_format = memory_format
        self.cat_in_place = True  # FastGPEN turns it off for torch.compile
        c = sc.conv.out_channel
        b = sc.activate.bias.float() * _SQRT2
        self.register_buffer("bias_conv", b[:c].to(dev, dt), persistent=False)
        self.register_buffer("bias_noise", b[c:].to(dev, dt).view(1, c, 1, 1), persistent=False)
        # A Python float: a constant for the compiler, no device sync per call.
        self.noise_weight = float(sc.noise.weight.item()) * _SQRT2
        # The noise half as a depthwise 1×1 conv, for oneDNN to fuse the scale, bias and leaky
        # ReLU into one pass over a fresh buffer (measured 2.5x the add + leaky_ in bfloat16).
        self.register_buffer("noise_dw", torch.full((c, 1, 1, 1), self.noise_weight, device=dev, dtype=dt), persistent=False)
        self.fused_noise = False  # set by FastGPEN (oneDNN only)

    def noise_half(self, noise: torch.Tensor) -> torch.Tensor:
        """leaky(w*noise + b'), the activated second half of the concatenation, in a fresh tensor."""
        if self.fused_noise:
            return _conv_leaky(noise, self.noise_dw, self.bias_noise.view(-1), 0, groups=self.noise_dw.shape[0])
        return _leaky_(torch.add(self.bias_noise, noise, alpha=self.noise_weight))

    def forward(
        self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor], latent: torch.Tensor, noise: torch.Tensor,
        split: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """leaky(cat(conv(x) + b, w*noise + b')).

        ``x`` may be a (features, noise) pair standing for its concatenation (a list is emptied
        once used, so its tensors are freed before this conv allocates its noise half), and
        ``split=True`` returns such a pair (both halves activated) instead of concatenating.
        """
        if isinstance(x, (tuple, list)):
            y = self.conv.forward_split(x[0], x[1], latent, self.bias_conv)
            if isinstance(x, list):  # handed over for good: freed before the noise half is allocated
                x.clear()
            if split:  # oneDNN fuses no leaky ReLU after its accumulation: one in-place pass
                y = _leaky_(y)
        else:
            y = self.conv(x, latent, self.bias_conv, leaky=split)
        if split:
            return y, self.noise_half(noise)
        if not self.cat_in_place:  # torch.compile cannot trace out= into a slice; inductor fuses this
            return _leaky_(torch.cat((y, torch.add(self.bias_noise, noise, alpha=self.noise_weight)), 1))
        # The concatenation built in place: the noise half is computed straight into it
        # (measured ~20% cheaper than torch.cat of a separately allocated half at 512 px).
        n, c, h, w = y.shape
        out = torch.empty((n, 2 * c, h, w), dtype=y.dtype, device=y.device, memory_format=self.memory_format)
        out[:, :c].copy_(y)
        torch.add(self.bias_noise, noise, alpha=self.noise_weight, out=out[:, c:])
        return _leaky_(out)


class _ToRGB(nn.Module):
    def __init__(self, t: nn.Module, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.conv = _ModConv(t.conv, 1.0, fir, dt, dev, memory_format)
        self.register_buffer("bias", _own(t.bias.reshape(3).to(dev, dt), t.bias), persistent=False)
        self.up = None
        if hasattr(t, "upsample"):
            self.up = _Blur(t.upsample.kernel, 3, t.upsample.pad, 2, fir, dt, dev)

    def forward(
        self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor], latent: torch.Tensor, skip: torch.Tensor | None
    ) -> torch.Tensor:
        """``x`` may be a (features, noise) pair standing for its concatenation (see :class:`FastGPEN`)."""
        if isinstance(x, tuple):
            out = self.conv.forward_split(x[0], x[1], latent, self.bias)
        else:
            out = self.conv(x, latent, self.bias)
        if skip is not None:
            out = out.add_(self.up(skip))
        return out


class FastGPEN(nn.Module):
    """The same function as :class:`GPEN` (see the module docstring for what differs in how).

    Built from a loaded GPEN by :func:`prepare`; it does not modify the model. It keeps
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
        self.encoder = nn.ModuleList(_EncoderConv(getattr(model, n)[0], fir, dt, dev, self.memory_format) for n in model.names)
        self.final_linear = _Linear(model.final_linear[0], dev)
        g = model.generator
        self.style = nn.ModuleList(_Linear(m, dev) for m in list(g.style)[1:])
        self.register_buffer("const", g.input.input.to(dev, dt).contiguous(memory_format=self.memory_format), persistent=False)
        mf = self.memory_format
        self.conv1 = _StyledConv(g.conv1, fir, dt, dev, mf)
        self.to_rgb1 = _ToRGB(g.to_rgb1, fir, dt, dev, mf)
        self.convs = nn.ModuleList(_StyledConv(c, fir, dt, dev, mf) for c in g.convs)
        # Each level's first conv hands its output to the second as a (features, noise) pair
        # (saves building one concatenation per level: ~15% at 512 px on CPU).
        # oneDNN's fused ops have no fake-tensor kernels (torch.compile / export cannot trace
        # the in-place one), so a compiled plan leaves fusion to inductor.
        onednn = _onednn_fusion(dev, dt) and fir == "depthwise" and not plan.compile
        # Upsampling convs in polyphase form (where oneDNN runs bf16 natively, AMX / AVX-512
        # BF16: measured 1.5-1.9x on those convs; float32 loses 1.5x: more taps), the
        # low-resolution convs input-modulated with packed weights, the noise half fused.
        rearranged = onednn and dt in self.REARRANGED_DTYPES
        for m in self.modules():
            if isinstance(m, _ModConv) and m.upsample and rearranged:
                m.use_polyphase()
            if isinstance(m, (_Blur, _EncoderConv)):
                m.onednn = onednn
            if isinstance(m, _StyledConv):
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
        self.to_rgbs = nn.ModuleList(_ToRGB(t, fir, dt, dev, mf) for t in g.to_rgbs)
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


# ---------------------------------------------------------------------------
# prepare / compile / warm-up
# ---------------------------------------------------------------------------


class PreparedForward:
    """The callable :func:`prepare` returns: ``forward(x) -> y`` under inference mode.

    ``x``: N×3×S×S float in [-1, 1] RGB (any float dtype, any device); ``y``: float32
    N×3×S×S on ``plan.device``. A batch runs one face at a time.

    With ``plan.compile`` it holds an eager and a compiled version of the one-face
    network: calls run eagerly until :func:`warm_up` (or, when nobody warmed up, the
    first call) has compiled, so a request never waits behind a background compile.
    """

    def __init__(self, net: FastGPEN, plan: ForwardPlan) -> None:
        self.net, self.plan = net, plan
        self._compiled: Callable[[torch.Tensor], torch.Tensor] | None = _compile(net, plan) if plan.compile else None
        self._ready = False
        self._lock = threading.Lock()
        self._twin: PreparedForward | None = None

    @property
    def size(self) -> int:
        return self.net.size

    @property
    def compiled(self) -> bool:
        """True once the compiled version has run (always False without ``plan.compile``)."""
        return self._ready

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        s = self.net.size
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] != s or x.shape[3] != s:
            raise ValueError(f"expected an N×3×{s}×{s} tensor for this {s} px GPEN, got {tuple(x.shape)}")
        with torch.inference_mode():
            if x.shape[0] == 1:
                return self._one(x)
            return torch.cat([self._one(x[i : i + 1]) for i in range(x.shape[0])])

    def _one(self, x: torch.Tensor) -> torch.Tensor:
        if self._compiled is not None:
            # Always a fresh inference tensor in the plan's layout: the compiled graph is
            # guarded on such properties and would recompile for a caller's plain tensor.
            x = x.to(device=self.plan.device, dtype=self.plan.dtype_torch, copy=True).contiguous(
                memory_format=self.net.memory_format
            )
            if self._ready:
                return self._compiled(x)
            # Compile on this call unless a warm-up is compiling right now (then stay eager).
            if self._lock.acquire(blocking=False):
                try:
                    out = self._compiled(x)
                    self._ready = True
                    return out
                finally:
                    self._lock.release()
        return self.net.one(x)

    def float32_twin(self) -> "PreparedForward":
        """This network with every weight cast up to float32 (exact casts of the stored values), eager.

        For redoing a face whose half-precision output overflowed (:func:`forward_checked`).
        Built on the first overflow and kept with this forward (so at most one per resident
        generator, i.e. one per process): a photo whose faces overflow one after another
        would otherwise copy the whole generator once per face. Its size is
        :attr:`twin_bytes`; the memory budget counts it for half-precision modes on a GPU.
        """
        if self._twin is not None:
            return self._twin
        import copy
        from dataclasses import replace

        with self._lock:
            if self._twin is None:
                # Packed (oneDNN-layout) weights cannot be deep-copied: the copy gets their dense values.
                memo = {id(t): t.to_dense() for t in self.net.buffers() if t.layout == torch._mkldnn}
                net = copy.deepcopy(self.net, memo).float()
                plan = replace(self.plan, dtype="float32", compile=False)
                net.plan = plan
                self._twin = PreparedForward(net, plan)
        return self._twin

    @property
    def twin_bytes(self) -> int:
        """Bytes the float32 twin holds (parameters and buffers); 0 while none was built."""
        if self._twin is None:
            return 0
        net = self._twin.net
        return sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))

    def compile_now(self) -> float:
        """Compile (blocking) if the plan asks for it and it has not happened; seconds spent."""
        if self._compiled is None or self._ready:
            return 0.0
        with self._lock, torch.inference_mode():
            if self._ready:  # another thread finished while we waited
                return 0.0
            t = time.perf_counter()
            s = self.net.size
            x = torch.zeros(1, 3, s, s, device=self.plan.device, dtype=self.plan.dtype_torch)
            self._compiled(x.contiguous(memory_format=self.net.memory_format))
            self._ready = True
            return time.perf_counter() - t


def forward_checked(forward: PreparedForward, x: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """``forward(x)`` checked for inf/NaN: (output, None) or (output, what happened, for a note).

    float16 tops out at 65504: an activation past it turns the face into inf/NaN, which
    ``to_image`` would turn into garbage pixels. Such a face is redone in float32 (the
    same weights cast up exactly; the input cast up from the plan's dtype) and the
    second element says so. A float32 output with inf/NaN cannot be redone; it is
    returned with a sentence saying so, never silently.
    """
    y = forward(x)
    if bool(torch.isfinite(y).all()):
        return y, None
    if isinstance(forward, PreparedForward) and forward.plan.dtype != "float32":
        y = forward.float32_twin()(x.float())
        if bool(torch.isfinite(y).all()):
            return y, f"{forward.plan.dtype} overflowed on the face (inf/NaN in its output): redone in float32"
    return y, "the restored face has inf or NaN values even in float32: the checkpoint may be corrupt; re-download it"


def compile_cache_dir() -> Path:
    """Where inductor keeps compiled kernels between processes: ``<models folder>/torch_compile``."""
    from gpen_core.platform.paths import models_dir

    return models_dir() / "torch_compile"


def _use_our_compile_cache() -> Path:
    """Point inductor's on-disk caches (FX graph, AOT autograd, kernels) at our models folder.

    torch fixes ``TORCHINDUCTOR_CACHE_DIR`` to its /tmp default as soon as anything
    imports torch._dynamo (even building a model on the meta device does), but reads
    it again for every cache access, so setting it here still takes effect. A value
    the user set (anything but torch's default) wins. Process-wide, and only done
    when a plan asks for compile.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and os.path.abspath(current) != os.path.abspath(default_cache_dir()):
        return Path(current)
    target = compile_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(target)
    return target


def _compile(net: FastGPEN, plan: ForwardPlan) -> Callable[[torch.Tensor], torch.Tensor]:
    _use_our_compile_cache()
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True  # compiled kernels are reused across processes (torch's default)
    # The one-face graph: a batch loops over it, so batch sizes never recompile.
    return torch.compile(net.one, dynamic=False)


def prepare(model: GPEN, plan: ForwardPlan) -> PreparedForward:
    """The optimized forward of ``model`` under ``plan``: ``forward(x) -> y``.

    ``x``: N×3×S×S float in [-1, 1] RGB (any float dtype, any device); ``y``: float32
    N×3×S×S on ``plan.device``. ``model`` is left as it is; for a float32 plan the
    result shares its decoder weights (drop the model to free only the copies made
    for other dtypes).
    """
    if not isinstance(model, GPEN):
        raise TypeError(f"prepare() needs a gpen_core.networks.arch.GPEN, got {type(model).__name__}")
    with torch.no_grad():
        net = FastGPEN(model, plan).eval().requires_grad_(False)
    return PreparedForward(net, plan)


def warm_up(forward: Callable[[torch.Tensor], torch.Tensor], size: int | None = None) -> float:
    """Run ``forward`` once on a blank 1×3×size×size face (compiling it if its plan says so); seconds.

    Blocking. An app calls it in a thread so the first real request finds everything
    ready, e.g. ``threading.Thread(target=warm_up, args=(forward,), daemon=True).start()``;
    meanwhile a :class:`PreparedForward` keeps serving calls eagerly. ``size`` defaults
    to the prepared model's.
    """
    t = time.perf_counter()
    if isinstance(forward, PreparedForward):
        if size not in (None, forward.size):
            raise ValueError(f"this forward is for {forward.size} px faces, not {size}")
        if forward._compiled is not None:
            return forward.compile_now()
        size, device, dtype = forward.size, forward.plan.device, forward.plan.dtype_torch
    else:
        if size is None:
            raise ValueError("warm_up needs the face size for a forward that is not a PreparedForward")
        device, dtype = "cpu", torch.float32
    with torch.inference_mode():
        forward(torch.zeros(1, 3, size, size, device=device, dtype=dtype))
    return time.perf_counter() - t
