"""GPEN's background upscaler: the official ``sr_model/rrdbnet_arch.py`` RRDBNet under the same module names, so the
released ``params_ema`` loads strictly (its keys and shapes decide the architecture). Tiling: :mod:`gpen_core.upscale`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.errors import WeightsError
from gpen_core.networks.checkpoint import read_network_weights, shape_problems, state_dict_problems

# conv_first's input channels → output scale (GPEN's RRDBNet unshuffles ×2 and ×1 inputs).
_IN_CH_TO_SCALE = {3: 4, 12: 2, 48: 1}
_BODY = re.compile(r"^body\.(\d+)\.rdb1\.conv1\.weight$")


@dataclass(frozen=True)
class UpscalerConfig:
    """RRDBNet's arguments. GPEN's released files: num_feat 32, num_block 23, num_grow_ch 32."""

    scale: int = 2  # output / input size: 4, 2 or 1
    num_feat: int = 32  # channels of the trunk
    num_block: int = 23  # RRDB blocks
    num_grow_ch: int = 32  # channels each dense conv adds

    @property
    def unshuffle(self) -> int:
        """Pixel-unshuffle factor of the input (4 / scale): inputs must be a multiple of it."""
        return 4 // self.scale


class ResidualDenseBlock(nn.Module):
    """Five 3×3 convs, each seeing every earlier output (ESRGAN's RDB); residual scaled by 0.2."""

    def __init__(self, num_feat: int, num_grow_ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_grow_ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat + num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv3 = nn.Conv2d(num_feat + 2 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv4 = nn.Conv2d(num_feat + 3 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv5 = nn.Conv2d(num_feat + 4 * num_grow_ch, num_feat, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    """Three dense blocks and a residual scaled by 0.2."""

    def __init__(self, num_feat: int, num_grow_ch: int) -> None:
        super().__init__()
        self.rdb1 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb2 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb3 = ResidualDenseBlock(num_feat, num_grow_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.rdb3(self.rdb2(self.rdb1(x)))
        return out * 0.2 + x


class RRDBNet(nn.Module):
    """GPEN's RealESRNet: N×3×H×W RGB in [0, 1] → N×3×sH×sW (s = ``config.scale``). H and W that ×2 / ×1 cannot
    unshuffle are reflect-padded at the bottom/right, as the official ``RealESRNet.process`` does, and the output
    cropped back to sH×sW."""

    def __init__(self, config: UpscalerConfig) -> None:
        super().__init__()
        self.config = config
        c, g = config.num_feat, config.num_grow_ch
        self.conv_first = nn.Conv2d(3 * config.unshuffle**2, c, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(c, g) for _ in range(config.num_block)])
        self.conv_body = nn.Conv2d(c, c, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(c, c, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(c, c, 3, 1, 1)
        self.conv_hr = nn.Conv2d(c, c, 3, 1, 1)
        self.conv_last = nn.Conv2d(c, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    @property
    def scale(self) -> int:
        return self.config.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.config.unshuffle
        h, w = x.shape[-2:]
        ph, pw = (-h) % u, (-w) % u
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph), mode="reflect" if min(h, w) > max(ph, pw) else "replicate")
        # torch's pixel_unshuffle orders channels c*u*u + i*u + j, exactly GPEN's view/permute.
        feat = F.pixel_unshuffle(x, u) if u > 1 else x
        feat = self.conv_first(feat)
        feat = feat + self.conv_body(self.body(feat))
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")))
        out = self.conv_last(self.lrelu(self.conv_hr(feat)))
        if ph or pw:
            s = self.config.scale
            out = out[..., : h * s, : w * s]
        return out


# Where GPEN's and Real-ESRGAN's training scripts nest the weights, in the order looked for.
_WRAPPERS = ("params_ema", "params")
_NOT_AN_UPSCALER = ("{where} is not an upscaler checkpoint: expected a dict with 'params_ema', found {found}. "
                    "Use GPEN's realesrnet_x2.pth or realesrnet_x4.pth.")


def infer_config(sd: Mapping[str, torch.Tensor], where: str = "the checkpoint") -> UpscalerConfig:
    """Read scale, features, blocks and growth off the keys; WeightsError when it is not an RRDBNet."""
    needed = ("conv_first.weight", "body.0.rdb1.conv1.weight", "conv_up2.weight", "conv_last.weight")
    missing = [k for k in needed if k not in sd]
    if missing:
        sample = ", ".join(list(sd)[:3]) or "nothing"
        gpen = " (it looks like a GPEN face generator: pass it as the model, not the upscaler)" if any(
            k.startswith("generator.") for k in sd
        ) else ""
        raise WeightsError(f"{where} is not an RRDBNet upscaler checkpoint{gpen}: it lacks {', '.join(missing)}; "
                           f"found {len(sd)} keys like {sample}. Use GPEN's realesrnet_x2.pth or realesrnet_x4.pth "
                           "(`python -m gpen_core download realesrnet_x2`).")
    if bad := shape_problems(sd, dict.fromkeys(needed, 4)):  # the shapes read below: never indexed blindly
        raise WeightsError(f"{where} is not an RRDBNet upscaler checkpoint: {bad}. Use GPEN's realesrnet_x2.pth or "
                           "realesrnet_x4.pth.")
    first = sd["conv_first.weight"]
    in_ch = int(first.shape[1])
    if in_ch not in _IN_CH_TO_SCALE:
        raise WeightsError(
            f"{where}: conv_first takes {in_ch} input channels; GPEN's RRDBNet takes 3 (×4), 12 (×2) or 48 (×1). "
            "Use GPEN's realesrnet_x2.pth or realesrnet_x4.pth."
        )
    if int(sd["conv_last.weight"].shape[0]) != 3:
        raise WeightsError(f"{where}: conv_last gives {int(sd['conv_last.weight'].shape[0])} channels, not RGB's 3.")
    blocks = {int(m.group(1)) for k in sd if (m := _BODY.match(k))}
    return UpscalerConfig(scale=_IN_CH_TO_SCALE[in_ch], num_feat=int(first.shape[0]), num_block=max(blocks) + 1,
                          num_grow_ch=int(sd["body.0.rdb1.conv1.weight"].shape[0]))


def build_upscaler(sd: Mapping[str, torch.Tensor], where: str = "the checkpoint") -> RRDBNet:
    """A float32 RRDBNet in eval mode with ``sd`` loaded strictly."""
    config = infer_config(sd, where)
    net = RRDBNet(config)
    if problems := state_dict_problems(net, sd):
        raise WeightsError(f"{where} does not match the RRDBNet it describes ({config}): {problems}. The file is "
                           "corrupt or another network; use GPEN's realesrnet_x2.pth or realesrnet_x4.pth.")
    net.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    # Channels-last weights: faster on the CPU, same output (measured: docs/upscaling.md); the tiles
    # arrive channels-last anyway (an H×W×3 array viewed as 1×3×H×W).
    return net.eval().requires_grad_(False).to(memory_format=torch.channels_last)


def missing_upscaler_text(path: str, download: str = "realesrnet_x2") -> str:
    """An upscaler path that does not exist, and the fix: ``download``, the registry file of the factor asked."""
    return (f"upscaler file {path} does not exist. Fix: `python -m gpen_core download {download}` puts GPEN's upscaler "
            "in the models folder, where it is found without --upscaler; or pass the path of an existing "
            "realesrnet_x2.pth / realesrnet_x4.pth.")


def load_upscaler(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> RRDBNet:
    """A RealESRNet checkpoint as a float32 :class:`RRDBNet` on ``device``; WeightsError when the file is missing,
    unreadable, or not an RRDBNet upscaler."""
    p = Path(path)
    sd = read_network_weights(
        p, "upscaler", wrappers=_WRAPPERS, not_a_dict=_NOT_AN_UPSCALER,
        missing=missing_upscaler_text(str(p), "realesrnet_x4" if "x4" in p.name else "realesrnet_x2"),
    )
    return build_upscaler(sd, str(p)).to(device)


def random_upscaler(config: UpscalerConfig, seed: int = 0) -> RRDBNet:
    """An RRDBNet with seeded random weights (tests, benchmarks), scaled as the official
    ``default_init_weights(..., 0.1)`` does so activations stay sane through 23 blocks."""
    gen = torch.Generator().manual_seed(seed)
    net = RRDBNet(config)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("weight"):
                fan_in = p[0].numel()
                scale = 0.1 if name.startswith("body.") else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * scale * (2.0 / fan_in) ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return net.eval().requires_grad_(False).to(memory_format=torch.channels_last)  # as build_upscaler


def official_init_upscaler(config: UpscalerConfig, seed: int = 0) -> RRDBNet:
    """An RRDBNet with the official initialisation (Kaiming-normal × 0.1, zero bias on the dense blocks),
    seeded. For accuracy checks: unlike :func:`random_upscaler`'s, its output is mostly in range."""
    torch.manual_seed(seed)
    net = RRDBNet(config)
    with torch.no_grad():
        for name, m in net.named_modules():
            if name.startswith("body.") and isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight)
                m.weight.mul_(0.1)
                m.bias.zero_()
    return net.eval().requires_grad_(False).to(memory_format=torch.channels_last)  # as build_upscaler


def save_upscaler(net: RRDBNet, path: str | os.PathLike[str]) -> Path:
    """Write ``net`` in GPEN's released layout: ``{"params_ema": state_dict}``."""
    p = Path(path)
    torch.save({"params_ema": net.state_dict()}, p)
    return p
