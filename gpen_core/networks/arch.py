"""The GPEN generator (Yang et al., CVPR 2021) in plain PyTorch, state-dict compatible with the official
``FullGenerator`` checkpoints; N×3×S×S float in [-1, 1] RGB in and out. The official CUDA ops are ordinary ops
here; the FIR runs ``"depthwise"`` (one grouped conv, several times cheaper on CPU) or ``"native"`` (the official
generic fallback): :func:`set_fir_impl`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

FirImpl = Literal["depthwise", "native"]
SQRT2 = math.sqrt(2.0)  # the gain of every fused leaky ReLU


@dataclass(frozen=True)
class GPENConfig:
    """Architecture of one GPEN generator; inferred from a checkpoint, never asked for."""

    size: int  # face crop side in pixels (256 … 2048); the network's input and output size
    style_dim: int = 512  # width of the mapping network and of the latent code
    n_mlp: int = 8  # number of EqualLinear layers in the mapping network
    channel_multiplier: int = 2  # widens the 64 px and finer layers (1 for GPEN-BFR-256)
    narrow: float = 1.0  # scales every layer's width (0.5 for GPEN-BFR-256)

    def channels(self) -> dict[int, int]:
        """Feature width per resolution, exactly as the official code computes it."""
        cm = self.channel_multiplier
        widths = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256 * cm, 128: 128 * cm, 256: 64 * cm, 512: 32 * cm,
                  1024: 16 * cm, 2048: 8 * cm}
        return {res: int(w * self.narrow) for res, w in widths.items()}

    @property
    def log_size(self) -> int:
        return int(math.log2(self.size))


def make_kernel(k: list[int]) -> torch.Tensor:
    # Always on the CPU: on meta the product below runs torch's Python reference ops, which import torch._dynamo.
    t = torch.tensor(k, dtype=torch.float32, device="cpu")
    if t.ndim == 1:
        t = t[None, :] * t[:, None]
    return t / t.sum()


def _randn(*shape: int, div: float = 1.0) -> torch.Tensor:
    """``torch.randn(*shape) / div`` (the official init), or an empty meta tensor under ``torch.device("meta")``:
    a random op on meta runs torch's Python reference ops, which import sympy (34 MiB) for nothing."""
    t = torch.empty(*shape)
    if t.is_meta:
        return t
    t.normal_()
    return t.div_(div) if div != 1.0 else t


def upfirdn2d_native(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
                     pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """The official generic CPU implementation (reference; slow and memory-hungry), its x and y pads equal."""
    p0, p1 = pad
    _, channel, in_h, in_w = x.shape
    kernel_h, kernel_w = kernel.shape
    # Every channel as its own image, zeros inserted after each sample, padded (negative pads crop).
    out = x.reshape(-1, in_h, 1, in_w, 1, 1)
    out = F.pad(out, [0, 0, 0, up - 1, 0, 0, 0, up - 1])
    out = out.view(-1, in_h * up, in_w * up, 1)
    out = F.pad(out, [0, 0, max(p0, 0), max(p1, 0), max(p0, 0), max(p1, 0)])
    out = out[:, max(-p0, 0) : out.shape[1] - max(-p1, 0), max(-p0, 0) : out.shape[2] - max(-p1, 0), :]
    out = out.permute(0, 3, 1, 2)
    out = out.reshape([-1, 1, in_h * up + p0 + p1, in_w * up + p0 + p1])
    w = torch.flip(kernel, [0, 1]).view(1, 1, kernel_h, kernel_w)
    out = F.conv2d(out, w)
    out = out.reshape(-1, 1, in_h * up + p0 + p1 - kernel_h + 1, in_w * up + p0 + p1 - kernel_w + 1)
    out = out.permute(0, 2, 3, 1)
    out = out[:, ::down, ::down, :]
    out_h = (in_h * up + p0 + p1 - kernel_h) // down + 1
    out_w = (in_w * up + p0 + p1 - kernel_w) // down + 1
    return out.reshape(-1, channel, out_h, out_w)


def upfirdn2d_depthwise(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
                        pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Same filter as :func:`upfirdn2d_native` as one transposed / strided depthwise convolution."""
    n, c, h, w = x.shape
    k = torch.flip(kernel, [0, 1]).to(x.dtype)[None, None].expand(c, 1, *kernel.shape)
    p0, p1 = pad
    if up > 1:
        # Zero-insertion then correlation == transposed conv with the flipped kernel; its (h-1)*up + kh rows
        # are cropped (or padded) to the native layout's pad0 + h*up + pad1 - kh + 1.
        out = F.conv_transpose2d(x, torch.flip(k, [2, 3]), stride=up, groups=c)
        start, length = kernel.shape[0] - 1 - p0, h * up + p0 + p1 - kernel.shape[0] + 1
        # Negative pads crop: rows [start, start + length), zeros where that runs past the output.
        out = F.pad(out, [-start, start + length - out.shape[3]] * 2)
        return out[:, :, ::down, ::down]
    if p0 or p1:
        x = F.pad(x, [p0, p1, p0, p1])
    return F.conv2d(x, k, stride=down, groups=c)


_FIR = {"depthwise": upfirdn2d_depthwise, "native": upfirdn2d_native}


class Fir(nn.Module):
    """A 4×4 FIR kernel buffer (stored in the checkpoints) applied after ``up``× zero-insertion with ``pad``;
    ``gain`` multiplies the kernel (factor² after an upsampling, as official)."""

    impl: FirImpl = "depthwise"

    def __init__(self, kernel: list[int], pad: tuple[int, int], up: int = 1, gain: int = 1) -> None:
        super().__init__()
        self.register_buffer("kernel", make_kernel(kernel) * gain)
        self.pad, self.up = pad, up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FIR[self.impl](x, self.kernel, up=self.up, pad=self.pad)


def set_fir_impl(model: nn.Module, impl: FirImpl) -> None:
    """Switch every FIR filter of ``model`` to ``impl`` (see the module docstring)."""
    if impl not in _FIR:
        raise ValueError(f"unknown FIR implementation {impl!r}; expected one of {sorted(_FIR)}")
    for m in model.modules():
        if isinstance(m, Fir):
            m.impl = impl


class PixelNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-8)


def fused_leaky_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return F.leaky_relu(x + bias.view(shape), 0.2) * SQRT2


class FusedLeakyReLU(nn.Module):
    def __init__(self, channel: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channel))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_leaky_relu(x, self.bias)


class EqualConv2d(nn.Module):
    """Without bias: GPEN's ConvLayer adds its own in the activation."""

    def __init__(self, in_ch: int, out_ch: int, k: int, stride: int = 1, padding: int = 0) -> None:
        super().__init__()
        self.weight = nn.Parameter(_randn(out_ch, in_ch, k, k))
        self.scale = 1 / math.sqrt(in_ch * k**2)
        self.stride, self.padding = stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight * self.scale, stride=self.stride, padding=self.padding)


class EqualLinear(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, bias_init: float = 0, lr_mul: float = 1,
                 activation: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(_randn(out_dim, in_dim, div=lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation:
            return fused_leaky_relu(F.linear(x, self.weight * self.scale), self.bias * self.lr_mul)
        return F.linear(x, self.weight * self.scale, bias=self.bias * self.lr_mul)


class ModulatedConv2d(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, k: int, style_dim: int, demodulate: bool = True,
                 upsample: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.out_channel, self.upsample = k, out_ch, upsample
        if upsample:
            p = (4 - 2) - (k - 1)  # the official pad for its 4-tap blur after a 2x upsampling
            self.blur = Fir([1, 3, 3, 1], pad=((p + 1) // 2 + 1, p // 2 + 1), gain=4)
        self.scale = 1 / math.sqrt(in_ch * k**2)
        self.padding = k // 2
        self.weight = nn.Parameter(_randn(1, out_ch, in_ch, k, k))
        self.modulation = EqualLinear(style_dim, in_ch, bias_init=1)
        self.demodulate = demodulate

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        batch, in_ch, h, w = x.shape
        k = self.kernel_size
        style = self.modulation(style).view(batch, 1, in_ch, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)
        if self.upsample:
            weight = weight.transpose(1, 2).reshape(batch * in_ch, self.out_channel, k, k)
            out = F.conv_transpose2d(x.reshape(1, batch * in_ch, h, w), weight, padding=0, stride=2, groups=batch)
            out = out.view(batch, self.out_channel, out.shape[-2], out.shape[-1])
            return self.blur(out)
        weight = weight.view(batch * self.out_channel, in_ch, k, k)
        out = F.conv2d(x.reshape(1, batch * in_ch, h, w), weight, padding=self.padding, groups=batch)
        return out.view(batch, self.out_channel, out.shape[-2], out.shape[-1])


class NoiseInjection(nn.Module):
    """GPEN concatenates the (encoder-provided) noise instead of adding it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, image: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.cat((image, self.weight * noise), dim=1)


class ConstantInput(nn.Module):
    def __init__(self, channel: int, size: int = 4) -> None:
        super().__init__()
        self.input = nn.Parameter(_randn(1, channel, size, size))

    def forward(self, batch: int) -> torch.Tensor:
        return self.input.repeat(batch, 1, 1, 1)


class StyledConv(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, k: int, style_dim: int, upsample: bool = False) -> None:
        super().__init__()
        self.conv = ModulatedConv2d(in_ch, out_ch, k, style_dim, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_ch * 2)

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.activate(self.noise(self.conv(x, style), noise))


class ToRGB(nn.Module):
    def __init__(self, in_ch: int, style_dim: int, upsample: bool = True) -> None:
        super().__init__()
        if upsample:
            self.upsample = Fir([1, 3, 3, 1], pad=(2, 1), up=2, gain=4)  # the official Upsample's pad for 2x
        self.conv = ModulatedConv2d(in_ch, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + self.upsample(skip)
        return out


class ConvLayer(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, k: int, downsample: bool = False) -> None:
        layers: list[nn.Module] = []
        if downsample:
            p = (4 - 2) + (k - 1)
            layers.append(Fir([1, 3, 3, 1], pad=((p + 1) // 2, p // 2)))
            stride, padding = 2, 0
        else:
            stride, padding = 1, k // 2
        layers.append(EqualConv2d(in_ch, out_ch, k, padding=padding, stride=stride))
        layers.append(FusedLeakyReLU(out_ch))
        super().__init__(*layers)


class Generator(nn.Module):
    """The StyleGAN2-style decoder; its noise inputs are GPEN's encoder features."""

    def __init__(self, cfg: GPENConfig, lr_mlp: float = 0.01) -> None:
        super().__init__()
        ch = cfg.channels()
        self.style = nn.Sequential(
            PixelNorm(),
            *[EqualLinear(cfg.style_dim, cfg.style_dim, lr_mul=lr_mlp, activation=True) for _ in range(cfg.n_mlp)],
        )
        self.input = ConstantInput(ch[4])
        self.conv1 = StyledConv(ch[4], ch[4], 3, cfg.style_dim)
        self.to_rgb1 = ToRGB(ch[4] * 2, cfg.style_dim, upsample=False)
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        in_ch = ch[4]
        for i in range(3, cfg.log_size + 1):
            out_ch = ch[2**i]
            self.convs.append(StyledConv(in_ch * 2, out_ch, 3, cfg.style_dim, upsample=True))
            self.convs.append(StyledConv(out_ch * 2, out_ch, 3, cfg.style_dim))
            self.to_rgbs.append(ToRGB(out_ch * 2, cfg.style_dim))
            in_ch = out_ch

    def forward(self, style: torch.Tensor, noise: list[torch.Tensor]) -> torch.Tensor:
        """``noise``: the encoder's features, 4 px first; both convs of a level take that level's one."""
        # A single style vector is used for every layer (no mixing at inference).
        latent = self.style(style)
        out = self.conv1(self.input(latent.shape[0]), latent, noise[0])
        skip = self.to_rgb1(out, latent)
        for conv1, conv2, n, to_rgb in zip(self.convs[::2], self.convs[1::2], noise[1:], self.to_rgbs):
            out = conv2(conv1(out, latent, n), latent, n)
            skip = to_rgb(out, latent, skip)
        return skip


class GPEN(nn.Module):
    """The official ``FullGenerator``: a U-Net-like encoder feeding a GAN prior decoder."""

    def __init__(self, cfg: GPENConfig) -> None:
        super().__init__()
        self.config = cfg
        ch = cfg.channels()
        self.generator = Generator(cfg)
        self.names = [f"ecd{i}" for i in range(cfg.log_size - 1)]
        self.ecd0 = nn.Sequential(ConvLayer(3, ch[cfg.size], 1))
        for i, name in enumerate(self.names[1:]):  # each halves the side: ecd<i+1> takes size / 2**i px
            in_ch, out_ch = ch[cfg.size >> i], ch[cfg.size >> (i + 1)]
            setattr(self, name, nn.Sequential(ConvLayer(in_ch, out_ch, 3, downsample=True)))
        self.final_linear = nn.Sequential(EqualLinear(ch[4] * 16, cfg.style_dim, activation=True))

    def encode(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The encoder's features (full size first: each is one decoder level's noise) and the style vector."""
        feats = []
        for name in self.names:
            x = getattr(self, name)(x)
            feats.append(x)
        return feats, self.final_linear(x.reshape(x.shape[0], -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats, style = self.encode(x)
        return self.generator(style, feats[::-1])
