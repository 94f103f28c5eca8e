"""The parser's dtype per CPU (gpen_core.faces.parse.choose_parse_dtype) and bf16's effect on the paste mask.

docs/paste-mask.md: on a CPU with native bf16 (AMX / AVX-512 BF16) ParseNet in
bfloat16 is 3.6-4.8× faster than float32; without it, 5× slower. ``balanced`` (CPU dtype
bfloat16) parses in bf16 only where the CPU has it; ``quality`` keeps the official float32.
"""

from __future__ import annotations

import copy
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from gpen_core.networks import plan
from gpen_core.faces.masks import parsing_labels_to_mask
from gpen_core.faces.parse import choose_parse_dtype
from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet, build, official_input

from .conftest import shared_path

_NATIVE = plan.cpu_features()["native_bf16"]
_needs_native_bf16 = pytest.mark.skipif(
    not _NATIVE, reason="this CPU has no native bf16 (AMX / AVX-512 BF16): bf16 ParseNet is emulated there, ~5× slower"
)


def _features(native: bool):
    feats = {k: False for k in plan.cpu_features()}
    feats.update(avx2=True, avx512_bf16=native, amx_bf16=native, native_bf16=native)
    return lambda: feats


@pytest.mark.parametrize("native", [True, False])
def test_parser_dtype_follows_the_cpu(
    native: bool, monkeypatch: pytest.MonkeyPatch, _isolated_models_home: Path
) -> None:
    monkeypatch.setattr(plan, "cpu_features", _features(native))
    bf16_here = "bfloat16" if native else "float32"
    assert choose_parse_dtype("cpu", "bfloat16") == bf16_here
    assert choose_parse_dtype(torch.device("cpu"), "auto") == bf16_here
    assert choose_parse_dtype("cpu", "float32") == "float32"  # quality: the official float32 mask
    for gpu in ("cuda", "cuda:1", torch.device("cuda", 0)):  # the GPU path stays float32 on any CPU
        assert choose_parse_dtype(gpu, "bfloat16") == "float32"

    # What a request gets: the model cache builds each mode's parser with the mode's CPU dtype.
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.modes import MODES

    cache = ModelCache(_isolated_models_home, synthetic_weights=True)
    notes: list[str] = []
    balanced = cache.parser(MODES["balanced"], "cpu", notes)
    assert balanced._parser.dtype == getattr(torch, bf16_here)
    assert notes[-1] == f"paste mask: GPEN's face-parsing mask (synthetic weights, 256 px input, {bf16_here})"
    quality = cache.parser(MODES["quality"], "cpu", notes)
    assert quality._parser.dtype == torch.float32
    assert notes[-1] == "paste mask: GPEN's face-parsing mask (synthetic weights, 512 px input, float32)"


def _masks(net: ParseNet, size: int, face: np.ndarray, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(512×512 labels, final 512×512 paste mask) of ``face`` parsed by a copy of ``net`` in ``dtype``."""
    labels = FaceParser(copy.deepcopy(net), input_size=size, dtype=dtype).labels(face)  # .to() casts in place
    return labels, parsing_labels_to_mask(labels, 512)


def _agreement(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[float, float, float]:
    """(label agreement in %, final paste mask |Δ| max, mean) between two :func:`_masks`."""
    diff = np.abs(a[1] - b[1])
    return float((a[0] == b[0]).mean() * 100), float(diff.max()), float(diff.mean())


@_needs_native_bf16
def test_bf16_mask_agrees_on_the_official_reference_network() -> None:
    # The official ParseNet class with the reference's seeded weights (logits up to 124, five
    # classes, some pixels off): measured 99.92 % labels, final mask max |Δ| 0.026, mean 7e-5.
    # Bound: at least 99.5 % labels; max 0.05 is a 5 % step of a blurred mask edge, invisible
    # in the paste.
    ref = torch.load(shared_path("reference", "parse", "parsenet_tiny128_seeded.pt"), weights_only=True)
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ref["state_dict_fp16"].items()}
    face = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    net = build(sd, ref["config"])
    agree, max_d, mean_d = _agreement(_masks(net, 128, face, torch.float32), _masks(net, 128, face, torch.bfloat16))
    assert agree >= 99.5 and max_d <= 0.05 and mean_d <= 1e-3, (agree, max_d, mean_d)


def _calibrated_released_net(face: np.ndarray) -> ParseNet:
    """The released architecture, random weights, batch-norm statistics taken from ``face`` and
    logits scaled to a trained net's range (std 8): all 19 classes appear, so the mask moves.
    Random weights amplify rounding more than trained ones (no margins): a stress test."""
    torch.manual_seed(0)
    net = ParseNet(**RELEASED_CONFIG)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None  # cumulative average: the statistics of this one batch
    net = net.to(memory_format=torch.channels_last)
    x = official_input(face).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        logits = net.train().parse(x)  # batch statistics: what eval mode will use, bar Bessel's n/(n-1)
        net.out_mask_conv.conv2d.weight.mul_(8.0 / float(logits.std()))
        net.out_mask_conv.conv2d.bias.zero_()
    return net.eval()


@_needs_native_bf16
def test_bf16_moves_the_released_mask_less_than_one_grey_level_of_noise() -> None:
    # balanced's parser (released architecture, 256 px input). Measured on three FFHQ faces:
    # bf16 vs float32 95.0-96.4 % labels, final mask max |Δ| 0.08-0.14, mean 0.005-0.007;
    # float32 on the face plus ±1 grey level of noise: 88.3-90.4 %, 0.23-0.33, 0.014-0.017.
    # So bf16's rounding changes the paste mask less than the face's own last bit does.
    rgb = cv2.cvtColor(cv2.imread(str(shared_path("faces", "ffhq_00000_512.png"))), cv2.COLOR_BGR2RGB)
    face = cv2.resize(rgb, (256, 256), interpolation=cv2.INTER_LINEAR)
    net = _calibrated_released_net(face)
    noise_1 = np.random.default_rng(0).integers(-1, 2, face.shape)  # -1, 0 or +1 grey level per value
    noisy = np.clip(face.astype(np.int16) + noise_1, 0, 255).astype(np.uint8)
    f32 = _masks(net, 256, face, torch.float32)
    bf16 = _agreement(f32, _masks(net, 256, face, torch.bfloat16))
    noise = _agreement(f32, _masks(net, 256, noisy, torch.float32))
    assert noise[0] < 99, f"the stress net should be sensitive to input noise (labels {noise[0]:.1f} % equal)"
    assert bf16[0] > noise[0] and bf16[1] < noise[1] and bf16[2] < noise[2], f"bf16 {bf16} vs ±1 noise {noise}"
    assert bf16[2] <= 0.01, f"mean paste mask change {bf16[2]:.4f}"
