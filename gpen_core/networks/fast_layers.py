"""The fast GPEN's layers: each of :class:`~gpen_core.networks.arch.GPEN`'s with its constants folded in,
channels-last and in place (docs/performance.md, "The fast torch forward: what it folds and why")."""

from __future__ import annotations

import itertools

import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.networks.arch import SQRT2, FirImpl, upfirdn2d_native

# (features, noise) standing for their concatenation along channels; a list is emptied by the conv that reads it.
Pair = tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor]


def _leaky_(x: torch.Tensor) -> torch.Tensor:
    # The sqrt(2) gain of FusedLeakyReLU is folded into whatever produced x.
    return F.leaky_relu_(x, 0.2)


def onednn_fusion(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether oneDNN's fused conv ops (the ones inductor uses on CPU) run here: conv + leaky ReLU in one
    pass, and an in-place form that accumulates a second conv (GPEN's [features, noise] input unconcatenated)."""
    ops = torch.ops.mkldnn
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not (hasattr(ops, "_convolution_pointwise") and hasattr(ops, "_convolution_pointwise_")):
        return False
    if dtype == torch.bfloat16:  # the fused ops refuse bf16 where oneDNN only emulates it
        probe = getattr(ops, "_is_mkldnn_bf16_supported", None)
        return bool(probe is not None and probe())
    return dtype == torch.float32


def _conv_leaky(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, padding: int, groups: int = 1,
                stride: int = 1) -> torch.Tensor:
    """leaky_relu(conv2d(x, w, b, stride, padding), 0.2) in one oneDNN pass."""
    p, st = [padding, padding], [stride, stride]
    return torch.ops.mkldnn._convolution_pointwise(x, w, b, p, st, [1, 1], groups, "leaky_relu", [0.2], "")


def _own(t: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``t``, copied if it still shares memory with ``source`` (a checkpoint tensor, maybe mmap-backed)."""
    if t.untyped_storage().data_ptr() == source.untyped_storage().data_ptr():
        return t.clone(memory_format=torch.preserve_format)
    return t


class Blur(nn.Module):
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

    def from_phases(self, y: torch.Tensor, bias: torch.Tensor | None, leaky: bool,
                    scale: torch.Tensor | None = None) -> torch.Tensor:
        """This blur (pad (1, 1)) of the 2x upsampled image whose four phases ``y`` holds: N×4C×h×w, channel
        ``(2a + b)·C + c`` holding pixel ``(2m + a, 2n + b)``, interleaved behind one zero row and column (the
        blur's padding). ``scale`` (C,) multiplies channel c before the bias."""
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
            return F.conv_transpose2d(x, self.dw, bias, stride=2, padding=1, groups=self.channels)
        p0, p1 = self.pad
        if p0 != p1:
            x = F.pad(x, [p0, p1, p0, p1])
            p0 = 0
        return F.conv2d(x, self.dw, bias=bias, padding=p0, groups=self.channels)


class EncoderConv(nn.Module):
    """``ConvLayer``: [blur] → conv (scale and sqrt(2) folded) with bias → leaky ReLU."""

    def __init__(self, layer: nn.Sequential, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        mods = list(layer)
        self.blur = None
        if len(mods) == 3:
            b = mods[0]
            self.blur = Blur(b.kernel, mods[1].weight.shape[1], b.pad, 1, fir, dt, dev)
        conv, act = mods[-2], mods[-1]
        self.stride, self.padding = int(conv.stride), int(conv.padding)  # EqualConv2d's: square ints
        self.onednn = False  # set by FastGPEN: fuse the leaky ReLU into the conv with oneDNN
        # In the activations' layout: the convolution would otherwise copy it on every call.
        w = (conv.weight.float() * (conv.scale * SQRT2)).to(dev, dt).contiguous(memory_format=memory_format)
        self.register_buffer("weight", w, persistent=False)
        self.register_buffer("bias", (act.bias.float() * SQRT2).to(dev, dt), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blur is not None:
            x = self.blur(x)
        if self.onednn:
            return _conv_leaky(x, self.weight, self.bias, self.padding, stride=self.stride)
        return _leaky_(F.conv2d(x, self.weight, bias=self.bias, stride=self.stride, padding=self.padding))


class Linear(nn.Module):
    """``EqualLinear`` in float32 with its scales (and the activation gain) folded in."""

    def __init__(self, lin: nn.Module, dev) -> None:
        super().__init__()
        gain = SQRT2 if lin.activation else 1.0
        self.activation = lin.activation
        self.register_buffer("weight", (lin.weight.float() * (lin.scale * gain)).to(dev), persistent=False)
        self.register_buffer("bias", (lin.bias.float() * (lin.lr_mul * gain)).to(dev), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        return _leaky_(out) if self.activation else out


class ModConv(nn.Module):
    """``ModulatedConv2d``: style → per-(out, in) factor → one weight multiply → conv. Demodulation
    ``rsqrt(sum_ikl (scale*W*s_i)^2)`` is ``rsqrt(Wsq @ s^2)`` with the constant ``Wsq[o, i] = sum_kl
    (scale*W[o, i, k, l])^2``: a mat-vec instead of three passes over the modulated weight."""

    def __init__(self, conv: nn.Module, gain: float, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.upsample, self.demodulate, self.padding = conv.upsample, conv.demodulate, conv.padding
        self.memory_format = memory_format
        self.scale, self.gain = float(conv.scale), gain
        self.modulation = Linear(conv.modulation, dev)
        w = conv.weight[0]  # (out, in, k, k)
        # In the layout the convolution wants (conv_transpose: (in, out, k, k)). Always a copy: one
        # aliasing the model's would keep a mmap-loaded checkpoint mapped whole.
        base = w.permute(1, 0, 2, 3) if self.upsample else w
        self.register_buffer("weight", _own(base.to(dev, dt).contiguous(memory_format=memory_format), w), persistent=False)
        self.split_at: int | None = None
        self.polyphase = False
        self.packed = False  # use_input_modulation
        self.register_buffer("wsq", (w.float() * self.scale).pow(2).sum([2, 3]).to(dev), persistent=False)
        self.blur = None
        if self.upsample:
            self.blur = Blur(conv.blur.kernel, w.shape[0], conv.blur.pad, 1, fir, dt, dev)

    def styles(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """float32 modulation (in,) and demodulation (out,) or None for one image's latent (1, style_dim):
        the effective weight is ``W[o, i] · s[i] · d[o]``."""
        s = self.modulation(latent)[0]  # (in,)
        d = torch.rsqrt(self.wsq @ (s * s) + 1e-8) if self.demodulate else None  # (out,)
        return s * (self.scale * self.gain), d

    def factor(self, latent: torch.Tensor) -> torch.Tensor:
        """(out, in) float32 multiplier for the base weight, for one image's latent (1, style_dim)."""
        f, d = self.styles(latent)
        return f[None, :].expand(self.wsq.shape[0], -1) if d is None else d[:, None] * f[None, :]

    def forward(self, x: Pair | torch.Tensor, latent: torch.Tensor, bias: torch.Tensor | None = None,
                leaky: bool = False) -> torch.Tensor:
        """conv(x) + bias, then leaky ReLU when asked (the upsampling conv fuses it into the blur). ``x`` may
        be a :data:`Pair` (after :meth:`use_split_input`): a list is emptied, its tensors freed, once read."""
        if isinstance(x, (tuple, list)):
            y = self.forward_split(x[0], x[1], latent, bias)
            if isinstance(x, list):
                x.clear()
            return _leaky_(y) if leaky else y  # oneDNN fuses no leaky ReLU after its accumulation
        if self.packed:
            return self._forward_input_modulated(x, latent, bias, leaky)
        # weight * factor, weight first: the product keeps the weight's layout, the one the conv wants.
        f = self.factor(latent).to(self.weight.dtype)
        if self.polyphase:
            w = self.weight * f.repeat(4, 1)[:, :, None, None]
            return self.blur.from_phases(F.conv2d(x, w, padding=1), bias, leaky)
        if self.upsample:
            # The factor contiguous in the weight's (in, out) order: a transposed view takes a slow strided loop.
            w = self.weight * f.t().contiguous()[:, :, None, None]
            out = F.conv_transpose2d(x, w, stride=2)
            return self.blur(out, bias, leaky=leaky)  # the next activation's bias rides on the blur conv
        w = self.weight * f[:, :, None, None]
        out = F.conv2d(x, w, bias=bias, padding=self.padding)
        return _leaky_(out) if leaky else out

    def _forward_input_modulated(self, x: torch.Tensor, latent: torch.Tensor, bias: torch.Tensor | None,
                                 leaky: bool) -> torch.Tensor:
        """``forward`` as ``conv(x · s, W) · d``: the input takes the modulation, the output (or the per-channel
        blur's kernel) the demodulation."""
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
        """Modulate the input (size×size) instead of the weight, packed once into oneDNN's layout (low levels)."""
        if not self.demodulate or (self.upsample and not self.polyphase):
            raise ValueError("input modulation needs a demodulated stride-1 conv (polyphase for upsampling)")
        p = 1 if self.polyphase else self.padding
        cin = self.weight.shape[1]
        packed = torch.ops.mkldnn._reorder_convolution_weight(self.weight, [p, p], [1, 1], [1, 1], 1, [1, cin, size, size])
        self.register_buffer("weight", packed, persistent=False)
        self.packed = True

    def use_polyphase(self) -> None:
        """Run the stride-2 transposed conv as one stride-1 conv that computes its four phases: output pixel
        ``(2m + a, 2n + b)`` of ``conv_transpose2d(x, W, stride=2)`` is
        ``sum_{r,s} x[m-1+r, n-1+s] · W[a+2-2r, b+2-2s]`` (r, s ∈ {0, 1}, taps past 2 are 0), a 2×2 conv over x
        padded by 1 with the phases as its 4·out channels. The weight is stored arranged (16/9 the size), so
        modulating it stays one multiply."""
        w = self.weight.permute(1, 0, 2, 3)  # (out, in, 3, 3): exact values, only rearranged
        o, i = w.shape[:2]
        wp = w.new_zeros(2, 2, o, i, 2, 2)
        for a, b, r, t in itertools.product((0, 1), repeat=4):
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
        p = [self.padding, self.padding]
        out = F.conv2d(y, self.weight_lo * f[:, :c], bias=bias, padding=self.padding)
        # out += conv2d(n, weight_hi · f) in place, as a oneDNN post-op (stride 1, no bias).
        return torch.ops.mkldnn._convolution_pointwise_.binary(
            out, n, self.weight_hi * f[:, c:], None, p, [1, 1], [1, 1], 1, "add", None, None, [], None)


class StyledConv(nn.Module):
    """``StyledConv``: modulated conv, noise concatenation, leaky ReLU; gains and biases folded."""

    def __init__(self, sc: nn.Module, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.conv = ModConv(sc.conv, SQRT2, fir, dt, dev, memory_format)
        self.memory_format = memory_format
        self.cat_in_place = True  # FastGPEN turns it off for torch.compile
        c = sc.conv.out_channel
        b = sc.activate.bias.float() * SQRT2
        self.register_buffer("bias_conv", b[:c].to(dev, dt), persistent=False)
        self.register_buffer("bias_noise", b[c:].to(dev, dt).view(1, c, 1, 1), persistent=False)
        # A Python float: a constant for the compiler, no device sync per call.
        self.noise_weight = float(sc.noise.weight.item()) * SQRT2
        # The noise half as a depthwise 1×1 conv: oneDNN fuses scale, bias and leaky ReLU in one pass.
        self.register_buffer("noise_dw", torch.full((c, 1, 1, 1), self.noise_weight, device=dev, dtype=dt), persistent=False)
        self.fused_noise = False  # set by FastGPEN (oneDNN only)

    def noise_half(self, noise: torch.Tensor) -> torch.Tensor:
        """leaky(w*noise + b'), the activated second half of the concatenation, in a fresh tensor."""
        if self.fused_noise:
            return _conv_leaky(noise, self.noise_dw, self.bias_noise.view(-1), 0, groups=self.noise_dw.shape[0])
        return _leaky_(torch.add(self.bias_noise, noise, alpha=self.noise_weight))

    def forward(self, x: Pair | torch.Tensor, latent: torch.Tensor, noise: torch.Tensor,
                split: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """leaky(cat(conv(x) + b, w*noise + b')); ``x`` as :meth:`ModConv.forward` takes it (a list is freed
        before the noise half is allocated). ``split=True`` returns a (features, noise) pair, both halves
        activated, instead of concatenating."""
        y = self.conv(x, latent, self.bias_conv, leaky=split)
        if split:
            return y, self.noise_half(noise)
        if not self.cat_in_place:  # torch.compile cannot trace out= into a slice; inductor fuses this
            return _leaky_(torch.cat((y, torch.add(self.bias_noise, noise, alpha=self.noise_weight)), 1))
        # The concatenation built in place: the noise half is computed straight into it.
        n, c, h, w = y.shape
        out = torch.empty((n, 2 * c, h, w), dtype=y.dtype, device=y.device, memory_format=self.memory_format)
        out[:, :c].copy_(y)
        torch.add(self.bias_noise, noise, alpha=self.noise_weight, out=out[:, c:])
        return _leaky_(out)


class ToRGB(nn.Module):
    def __init__(self, t: nn.Module, fir: FirImpl, dt, dev, memory_format: torch.memory_format) -> None:
        super().__init__()
        self.conv = ModConv(t.conv, 1.0, fir, dt, dev, memory_format)
        self.register_buffer("bias", _own(t.bias.reshape(3).to(dev, dt), t.bias), persistent=False)
        self.up = None
        if hasattr(t, "upsample"):
            self.up = Blur(t.upsample.kernel, 3, t.upsample.pad, 2, fir, dt, dev)

    def forward(self, x: Pair | torch.Tensor, latent: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        """``x`` as :meth:`ModConv.forward` takes it."""
        out = self.conv(x, latent, self.bias)
        if skip is not None:
            out = out.add_(self.up(skip))
        return out
