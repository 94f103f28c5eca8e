"""GPEN's face-parsing network (the official ``face_parse/parse_model.py`` ParseNet under the same module names:
GPEN's and facexlib's weights load strictly) and :class:`FaceParser`, the official ``FaceParse.process`` on RGB
uint8. Imports torch: import it only to build a parser.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

import cv2
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.errors import WeightsError
from gpen_core.networks.checkpoint import read_network_weights, state_dict_problems
from gpen_core.rgb import check_rgb

# The released network: official FaceParse.load_model and facexlib's init_parsing_model.
RELEASED_CONFIG: dict[str, Any] = {"in_size": 512, "out_size": 512, "min_feat_size": 32, "base_ch": 64, "parsing_ch": 19,
                                   "norm_type": "bn", "relu_type": "LeakyReLU", "ch_range": (32, 256)}
PARSE_SIZE = 512  # the official FaceParse.size: every face is parsed at 512×512

# The official img2tensor, ``img / 255. * 2 - 1`` in float64 then ``.float()``, bit for bit: the generator's float32
# form is one ulp off on a third of the values, and ParseNet amplifies that about 4000×.
_INPUT_LUT = (np.arange(256, dtype=np.float64) / 255.0 * 2 - 1).astype(np.float32)

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
    """Official ``ConvLayer``: [nearest ×2] → reflection pad → conv (stride 2 for 'down'; no bias under batch
    norm) → norm → act."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int = 3, scale: str = "none",
                 norm_type: NormType = "none", relu_type: ReluType = "none") -> None:
        super().__init__()
        self.up = scale == "up"
        self.reflection_pad = nn.ReflectionPad2d(int(math.ceil((kernel_size - 1.0) / 2)))
        stride = 2 if scale == "down" else 1
        self.conv2d = nn.Conv2d(c_in, c_out, kernel_size, stride, bias=norm_type != "bn")
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
        same = scale == "none" and c_in == c_out
        self.shortcut_func: nn.Module = nn.Identity() if same else ConvLayer(c_in, c_out, 3, scale)
        s1, s2 = self._SCALES[scale]
        self.conv1 = ConvLayer(c_in, c_out, 3, s1, norm_type=norm_type, relu_type=relu_type)
        self.conv2 = ConvLayer(c_out, c_out, 3, s2, norm_type=norm_type, relu_type="none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The branch first, the shortcut added in place: no shortcut held through the branch's temporaries
        # and no third tensor for the sum (docs/performance.md: 452 → 388 MiB per 512 px face). Same values
        # as official (shortcut + branch): float addition is commutative.
        out = self.conv2(self.conv1(x))
        return out.add_(self.shortcut_func(x))


class ParseNet(nn.Module):
    """The official ParseNet: encoder → residual blocks → decoder; fully convolutional (the released weights also
    run at 256 px). ``forward(x)``, x 1×3×H×W RGB in [-1, 1]: ``(parsing_logits, image)`` as official."""

    def __init__(self, in_size: int = 128, out_size: int = 128, min_feat_size: int = 32, base_ch: int = 64,
                 parsing_ch: int = 19, res_depth: int = 10, relu_type: ReluType = "LeakyReLU",
                 norm_type: NormType = "bn", ch_range: tuple[int, int] | list[int] = (32, 256)) -> None:
        super().__init__()
        min_ch, max_ch = ch_range

        def clip(c: int) -> int:
            return max(min_ch, min(c, max_ch))

        min_feat_size = min(in_size, min_feat_size)
        down_steps = int(np.log2(in_size // min_feat_size))
        up_steps = int(np.log2(out_size // min_feat_size))
        act = {"norm_type": norm_type, "relu_type": relu_type}

        encoder: list[nn.Module] = [ConvLayer(3, base_ch, 3, "none")]
        head = base_ch
        for _ in range(down_steps):
            encoder.append(ResidualBlock(clip(head), clip(head * 2), scale="down", **act))
            head *= 2
        body = [ResidualBlock(clip(head), clip(head), **act) for _ in range(res_depth)]
        decoder: list[nn.Module] = []
        for _ in range(up_steps):
            decoder.append(ResidualBlock(clip(head), clip(head // 2), scale="up", **act))
            head //= 2
        self.encoder = nn.Sequential(*encoder)
        self.body = nn.Sequential(*body)
        self.decoder = nn.Sequential(*decoder)
        self.out_img_conv = ConvLayer(clip(head), 3)
        self.out_mask_conv = ConvLayer(clip(head), parsing_ch)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.encoder(x)
        return self.decoder(feat + self.body(feat))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._features(x)
        return self.out_mask_conv(x), self.out_img_conv(x)

    def parse(self, x: torch.Tensor) -> torch.Tensor:
        """Parsing logits 1×parsing_ch×H×W only (the unused image head skipped)."""
        return self.out_mask_conv(self._features(x))


# The full-size layers a strip of rows at a time: the same logits, less memory (docs/performance.md, "ParseNet's
# full-size layers in strips"). Every layer is a reflection pad of 1, a 3×3 conv (stride 1 or 2, after a nearest
# ×2 for "up" layers), a norm and an activation: output row o reads (upsampled) input rows s·o-1 .. s·o+1,
# reflected at the edges, and upsampled row u is input row u // 2. A strip pads a row only where its slice
# touches the image's edge, so each output row comes from the same numbers as in the whole forward (only the
# convolution's summation order may differ). ParseNet.parse stays the whole-image module (what OpenVINO traces).

STRIP_ROWS = 64  # output rows per strip at the full-size levels (8 strips at 512 px)


def _need(stage: ConvLayer | ResidualBlock, o_lo: int, o_hi: int, h_in: int) -> tuple[int, int]:
    """The input rows ``[lo, hi)`` that output rows ``[o_lo, o_hi)`` of ``stage`` read (reflections included)."""
    if isinstance(stage, ResidualBlock):
        a_lo, a_hi = _need(stage.conv2, o_lo, o_hi, _out_height(stage.conv1, h_in))
        lo, hi = _need(stage.conv1, a_lo, a_hi, h_in)
        short = stage.shortcut_func
        s_lo, s_hi = (o_lo, o_hi) if isinstance(short, torch.nn.Identity) else _need(short, o_lo, o_hi, h_in)
        return min(lo, s_lo), max(hi, s_hi)
    e_lo, e_hi, h = _read(stage, o_lo, o_hi, h_in)
    # Rows -1 and h are the padding: reflections of rows 1 and h-2, which are read anyway.
    a, b = max(e_lo, 0), min(e_hi, h)
    return (a // 2, (b - 1) // 2 + 1) if stage.up else (a, b)


def _read(layer: ConvLayer, o_lo: int, o_hi: int, h_in: int) -> tuple[int, int, int]:
    """``(lo, hi, h)``: the rows ``[lo, hi)`` that output rows ``[o_lo, o_hi)`` of ``layer`` read, padding included,
    of its (upsampled, for an "up" layer) input of ``h`` rows."""
    s, h = layer.conv2d.stride[0], 2 * h_in if layer.up else h_in
    return s * o_lo - 1, s * (o_hi - 1) + 2, h


class _Rows(NamedTuple):
    """Rows ``[lo, lo + len)`` of a whole tensor of height ``height``."""

    t: torch.Tensor
    lo: int
    height: int


def _out_height(stage: ConvLayer | ResidualBlock, h_in: int) -> int:
    if isinstance(stage, ResidualBlock):
        return _out_height(stage.conv2, _out_height(stage.conv1, h_in))
    h = 2 * h_in if stage.up else h_in
    return (h - 1) // stage.conv2d.stride[0] + 1


def _conv_rows(layer: ConvLayer, x: _Rows, o_lo: int, o_hi: int) -> _Rows:
    """Output rows ``[o_lo, o_hi)`` of ``layer`` from ``x`` (which holds every row they read): the layer's own ops
    on a slice, a row reflection-padded only where the slice touches the image's edge."""
    e_lo, e_hi, h = _read(layer, o_lo, o_hi, x.height)
    a, b = max(e_lo, 0), min(e_hi, h)
    if layer.up:
        src = x.t[:, :, a // 2 - x.lo : (b - 1) // 2 + 1 - x.lo]
        eff = F.interpolate(src, scale_factor=2, mode="nearest")[:, :, a % 2 : a % 2 + b - a]
    else:
        eff = x.t[:, :, a - x.lo : b - x.lo]
    padded = F.pad(eff, (1, 1, int(e_lo < 0), int(e_hi > h)), mode="reflect")
    del eff
    y = layer.relu(layer.norm(F.conv2d(padded, layer.conv2d.weight, layer.conv2d.bias, layer.conv2d.stride)))
    return _Rows(y, o_lo, _out_height(layer, x.height))


def _run(stage: ConvLayer | ResidualBlock, x: _Rows, o_lo: int, o_hi: int) -> _Rows:
    """Output rows ``[o_lo, o_hi)`` of ``stage``; a residual block's branch first, then its shortcut
    added in place (as the block does)."""
    if not isinstance(stage, ResidualBlock):
        return _conv_rows(stage, x, o_lo, o_hi)
    a_lo, a_hi = _need(stage.conv2, o_lo, o_hi, _out_height(stage.conv1, x.height))
    out = _conv_rows(stage.conv2, _conv_rows(stage.conv1, x, a_lo, a_hi), o_lo, o_hi)
    short = stage.shortcut_func
    if isinstance(short, torch.nn.Identity):
        out.t.add_(x.t[:, :, o_lo - x.lo : o_hi - x.lo])
    else:
        out.t.add_(_conv_rows(short, x, o_lo, o_hi).t)
    return out


def run_in_strips(stages: list, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """``stages`` (ParseNet conv layers and residual blocks, in order) applied to ``x``, ``rows`` output rows at a
    time (default :data:`STRIP_ROWS`)."""
    rows = rows or STRIP_ROWS
    heights = [x.shape[2]]
    for stage in stages:
        heights.append(_out_height(stage, heights[-1]))
    out: torch.Tensor | None = None
    for lo in range(0, heights[-1], rows):
        ranges = [(lo, min(lo + rows, heights[-1]))]
        for stage, h_in in zip(reversed(stages), reversed(heights[:-1])):
            ranges.append(_need(stage, *ranges[-1], h_in))
        ranges.reverse()
        cur = _Rows(x[:, :, ranges[0][0] : ranges[0][1]], ranges[0][0], heights[0])
        for stage, (o_lo, o_hi) in zip(stages, ranges[1:]):
            cur = _run(stage, cur, o_lo, o_hi)
        if out is None:
            n, c, _, w = cur.t.shape
            fmt = torch.channels_last if cur.t.is_contiguous(memory_format=torch.channels_last) and c > 1 else torch.contiguous_format
            out = torch.empty((n, c, heights[-1], w), dtype=cur.t.dtype, device=cur.t.device).contiguous(memory_format=fmt)
        out[:, :, ranges[-1][0] : ranges[-1][1]] = cur.t
        del cur
    assert out is not None
    return out


def parse_in_strips(net: nn.Module, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """``net.parse(x)`` with the full-size ends (the encoder's first two stages, the last decoder block and the mask
    head) in strips."""
    enc, dec = list(net.encoder), list(net.decoder)
    feat = run_in_strips(enc[:2], x, rows)
    for stage in enc[2:]:
        feat = stage(feat)
    feat = feat + net.body(feat)
    for stage in dec[:-1]:
        feat = stage(feat)
    return run_in_strips([dec[-1], net.out_mask_conv], feat, rows)


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A float32 ParseNet state_dict from GPEN's ``ParseNet-latest.pth`` or facexlib's ``parsing_parsenet.pth``."""
    return read_network_weights(
        path, "ParseNet", missing=f"ParseNet weights not found at {path}. Put ParseNet-latest.pth (GPEN) or "
        "parsing_parsenet.pth (facexlib) in the models folder, or run `python -m gpen_core download ParseNet-latest`.",
    )


def build(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None, source: str = "") -> ParseNet:
    """A ParseNet (default: the released configuration) with ``state_dict`` loaded strictly, in eval mode."""
    net = ParseNet(**dict(config or RELEASED_CONFIG))
    if problems := state_dict_problems(net, state_dict):
        raise WeightsError(f"{source or 'the file'} is not GPEN/facexlib ParseNet weights: {problems}. "
                           "Use ParseNet-latest.pth (GPEN) or parsing_parsenet.pth (facexlib).")
    net.load_state_dict(dict(state_dict), strict=True)
    return net.eval()


def official_input(rgb: np.ndarray) -> torch.Tensor:
    """RGB uint8 H×W×3 → 1×3×H×W float32 in [-1, 1] (the official ``img2tensor``), channels-last in memory."""
    return torch.from_numpy(_INPUT_LUT[rgb]).permute(2, 0, 1).unsqueeze(0)


class FaceParser:
    """Restored face (RGB uint8) → class labels at 512×512, as GPEN's ``FaceParse.process``; calls are serialised.
    ``input_size``: 512 is official; 256 parses the face shrunk (a quarter of the cost), the logits upsampled
    bilinearly. ``channels_last``: NHWC convolutions (faster with oneDNN, the same labels). ``strips``:
    :func:`parse_in_strips` (default: on the CPU)."""

    def __init__(self, net: ParseNet, *, device: str | torch.device = "cpu", input_size: int = PARSE_SIZE,
                 dtype: torch.dtype = torch.float32, channels_last: bool = True, strips: bool | None = None) -> None:
        if not 32 <= input_size <= 1024 or input_size % 16:
            raise ValueError(f"input_size must be a multiple of 16 between 32 and 1024 px (512 official), got {input_size}")
        self.device = torch.device(device)
        self.input_size = int(input_size)
        self.dtype = dtype
        # Same labels, less memory, no slower on the CPU (docs/performance.md, "ParseNet's full-size layers
        # in strips"). Unmeasured on CUDA, where it stays off unless asked for.
        self.strips = self.device.type == "cpu" if strips is None else bool(strips)
        self._memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self._net = net.to(self.device, dtype=dtype, memory_format=self._memory_format).eval()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> FaceParser:
        """Load GPEN's ``ParseNet-latest.pth`` or facexlib's ``parsing_parsenet.pth``."""
        path = Path(path)
        return cls(build(load_state_dict(path), source=str(path)), **kwargs)

    def logits(self, face_rgb: np.ndarray, out_size: int | None = None) -> torch.Tensor:
        """1×C×S×S float32 logits for an RGB uint8 face (S = ``out_size``, default the input size)."""
        check_rgb(face_rgb, "the face to parse")
        s = self.input_size
        x = face_rgb
        if x.shape[:2] != (s, s):
            x = cv2.resize(x, (s, s), interpolation=cv2.INTER_LINEAR)  # official: cv2.resize default
        with self._lock, torch.inference_mode():
            inp = official_input(x)
            inp = inp.to(self.device, dtype=self.dtype, memory_format=self._memory_format)
            out = (parse_in_strips(self._net, inp) if self.strips else self._net.parse(inp)).float()
            if out_size is not None and out_size != s:
                out = F.interpolate(out, size=(out_size, out_size), mode="bilinear", align_corners=False)
        return out

    def labels(self, face_rgb: np.ndarray) -> np.ndarray:
        """int64 512×512 class labels (0..18, GPEN's CelebAMask-HQ order) for an RGB uint8 face."""
        return self.logits(face_rgb, out_size=PARSE_SIZE).argmax(dim=1)[0].cpu().numpy()
