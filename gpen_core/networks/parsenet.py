"""GPEN's face-parsing network (ParseNet) and the runner that turns a restored face into labels.

The network is the official yangxy/GPEN ``face_parse/parse_model.py`` ``ParseNet`` under the same module
names, so GPEN's ``ParseNet-latest.pth`` and facexlib's ``parsing_parsenet.pth`` (the same class, arguments
and 19 CelebAMask-HQ classes: docs/paste-mask.md) both load strictly.

The runner follows the official ``FaceParse.process``: resize the face to 512×512 (INTER_LINEAR), RGB in
[-1, 1] as its ``img2tensor`` computes it (:func:`official_input`), forward, argmax over the 19 classes.
It takes RGB uint8 (the official code takes BGR and flips it itself). torch is imported here; import this
module only when a parser is built.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.errors import WeightsError
from gpen_core.networks.parsenet_layers import ConvLayer, NormType, ReluType, ResidualBlock
from gpen_core.networks.parsenet_strips import parse_in_strips
from gpen_core.rgb import check_rgb


# The released network: official FaceParse.load_model and facexlib's init_parsing_model.
RELEASED_CONFIG: dict[str, Any] = {"in_size": 512, "out_size": 512, "min_feat_size": 32, "base_ch": 64, "parsing_ch": 19,
                                   "norm_type": "bn", "relu_type": "LeakyReLU", "ch_range": (32, 256)}
PARSE_SIZE = 512  # the official FaceParse.size: every face is parsed at 512×512

# The official FaceParse.img2tensor: ``img / 255. * 2 - 1`` in float64, then ``.float()``.
# The generator's float32 ``(x / 255 - 0.5) / 0.5`` (tensors.to_tensor) differs from it by one
# float32 ulp on about a third of the pixel values, and ParseNet amplifies that input
# difference about 4000× (2.4e-4 on the tiny reference's logits). A table of the 256 exact
# values gives the official input bit for bit.
_INPUT_LUT = (np.arange(256, dtype=np.float64) / 255.0 * 2 - 1).astype(np.float32)


class ParseNet(nn.Module):
    """The official ParseNet: encoder (down to ``min_feat_size``) → 10 residual blocks → decoder.

    ``forward(x)`` with x 1×3×H×W RGB in [-1, 1] returns ``(parsing_logits, image)`` as
    official; :meth:`parse` returns the logits only (skips the unused image head).
    The network is fully convolutional: the released weights also run on 256×256 input.
    """

    def __init__(
        self,
        in_size: int = 128,
        out_size: int = 128,
        min_feat_size: int = 32,
        base_ch: int = 64,
        parsing_ch: int = 19,
        res_depth: int = 10,
        relu_type: ReluType = "LeakyReLU",
        norm_type: NormType = "bn",
        ch_range: tuple[int, int] | list[int] = (32, 256),
    ) -> None:
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
        """Parsing logits 1×parsing_ch×H×W only."""
        return self.out_mask_conv(self._features(x))


# ----------------------------------------------------------------------------- loading


def key_table(config: Mapping[str, Any] | None = None) -> dict[str, tuple[int, ...]]:
    """Every state_dict key of a ParseNet (default: the released one) and its shape."""
    with torch.device("meta"):
        net = ParseNet(**dict(config or RELEASED_CONFIG))
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A ParseNet state_dict from a file (``torch.load(weights_only=True)``, CPU, float32).

    Accepts GPEN's ``ParseNet-latest.pth`` and facexlib's ``parsing_parsenet.pth`` (a bare
    state_dict; a ``state_dict`` wrapper and ``module.`` prefixes are unwrapped too).
    """
    from gpen_core.networks.checkpoint import read_network_weights

    path = Path(path)

    def not_a_dict(found: str) -> str:
        return f"{path} does not hold a ParseNet state_dict (found {found})"

    sd = read_network_weights(
        path, "ParseNet weights", wrappers=("state_dict",), not_a_dict=not_a_dict,
        missing=f"ParseNet weights not found at {path}. Put ParseNet-latest.pth (GPEN) or "
        "parsing_parsenet.pth (facexlib) in the models folder, or run `python -m gpen_core download ParseNet-latest`.",
    )
    if not sd:
        raise WeightsError(not_a_dict("dict"))
    return sd


def build(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None, source: str = "") -> ParseNet:
    """A ParseNet (default: the released configuration) with ``state_dict`` loaded strictly, in eval mode."""
    net = ParseNet(**dict(config or RELEASED_CONFIG))
    try:
        net.load_state_dict(dict(state_dict), strict=True)
    except RuntimeError as exc:
        first = " ".join(str(exc).splitlines()[:3])
        raise WeightsError(
            f"{source or 'the file'} is not GPEN/facexlib ParseNet weights: {first}. "
            "Use ParseNet-latest.pth (GPEN) or parsing_parsenet.pth (facexlib)."
        ) from exc
    return net.eval()


# ----------------------------------------------------------------------------- runner


def official_input(rgb: np.ndarray) -> torch.Tensor:
    """RGB uint8 H×W×3 → 1×3×H×W float32 in [-1, 1], bit for bit the official ``img2tensor``.

    A view of an H×W×3 array: its memory is already channels-last.
    """
    return torch.from_numpy(_INPUT_LUT[rgb]).permute(2, 0, 1).unsqueeze(0)


class FaceParser:
    """Restored face (RGB uint8) → per-pixel class labels at 512×512, as GPEN's ``FaceParse.process``.

    ``input_size``: 512 is official; 256 runs the same weights on a face shrunk to 256 (about a quarter of
    the cost) and upsamples the logits bilinearly to 512 before the argmax. ``dtype``: float32 (exact) or
    bfloat16 (CPUs with native bf16, CUDA). ``channels_last``: NHWC convolutions (faster with oneDNN; another
    summation order: 4.5e-4 on the tiny reference's logits of up to 124, same labels). ``strips``: the
    full-size layers a strip of rows at a time (:mod:`gpen_core.networks.parsenet_strips`; default: on the
    CPU). One instance may be shared; calls are serialised by a lock.
    """

    def __init__(
        self,
        net: ParseNet,
        *,
        device: str | torch.device = "cpu",
        input_size: int = PARSE_SIZE,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = True,
        strips: bool | None = None,
    ) -> None:
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
