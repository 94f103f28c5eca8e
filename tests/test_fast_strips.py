"""The fast GPEN forward's full-size level in strips of rows: the untiled output, without full-size tensors."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from gpen_core.networks import fast, fast_layers, prepared
from gpen_core.networks.arch import GPENConfig
from gpen_core.networks.prepared import prepare
from gpen_core.networks.plan import ForwardPlan
from gpen_core.networks.synthetic import random_generator

from .factories import FullSizeOutputs

# GPEN's 256 and 512 px architectures, narrowed for speed (every level and op is kept).
SMALL = {
    256: GPENConfig(256, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125),
    512: GPENConfig(512, style_dim=64, n_mlp=2, channel_multiplier=2, narrow=0.0625),
}
EXACT = 1e-5  # float32: the strips run the same ops on the same values; only oneDNN's blocking may differ
# bfloat16 rounds every conv output to 8 significant bits; where oneDNN blocks a strip's shape
# differently from the full image, its float32 accumulation may differ in the last bit and flip
# a rounding: one bf16 step (2^-8 relative) in a feature, carried to the output. (Measured 0 on
# the AVX-512 BF16 EPYC; other oneDNN kernels, e.g. AMX, may block differently.)
BF16_TOL = 3e-2
_ONEDNN = fast_layers.onednn_fusion(torch.device("cpu"), torch.float32)

# name: (dtype, channels_last, fir, oneDNN fusion, rearranged float32 (polyphase etc.), split at every level)
VARIANTS = {
    "f32": ("float32", True, "depthwise", True, False, False),
    "f32-split": ("float32", True, "depthwise", True, False, True),
    "f32-polyphase-split": ("float32", True, "depthwise", True, True, True),
    "f32-nchw": ("float32", False, "depthwise", True, False, False),
    "f32-native-fir": ("float32", True, "native", True, False, False),
    "f32-no-onednn": ("float32", True, "depthwise", False, False, False),
    "bf16": ("bfloat16", True, "depthwise", True, False, False),
    "bf16-nchw-split": ("bfloat16", False, "depthwise", True, False, True),
    "bf16-native-fir": ("bfloat16", True, "native", True, False, False),
}


def _prepared(monkeypatch: pytest.MonkeyPatch, size: int, variant: str, seed: int = 0) -> prepared.PreparedForward:
    dtype, channels_last, fir, onednn, rearranged, split = VARIANTS[variant]
    if not onednn:
        monkeypatch.setattr(fast, "onednn_fusion", lambda device, dt: False)
    if rearranged:
        if not _ONEDNN:
            pytest.skip("needs PyTorch's oneDNN (mkldnn) fused conv ops on this CPU")
        monkeypatch.setattr(fast.FastGPEN, "REARRANGED_DTYPES", (torch.float32, torch.bfloat16))
    if split:
        monkeypatch.setattr(fast.FastGPEN, "SPLIT_MIN_BYTES", 0)
    return prepare(random_generator(SMALL[size], seed=seed), ForwardPlan(dtype=dtype, channels_last=channels_last, fir=fir))


def _face(size: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def _untiled(fwd: prepared.PreparedForward, x: torch.Tensor) -> torch.Tensor:
    rows = fwd.net.strip_rows
    fwd.net.strip_rows = 0
    try:
        return fwd(x)
    finally:
        fwd.net.strip_rows = rows


@pytest.mark.parametrize("size", [256, 512])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_strips_compute_the_untiled_forward(monkeypatch, size: int, variant: str) -> None:
    fwd = _prepared(monkeypatch, size, variant)
    x = _face(size)
    ref = _untiled(fwd, x)
    tol = EXACT if VARIANTS[variant][0] == "float32" else BF16_TOL
    # 2: the thinnest strip; 38: strips that do not divide the image (a short last one);
    # the default; size - 2: two strips, one of them two rows.
    for rows in (2, 38, fast.FastGPEN.STRIP_ROWS, size - 2):
        fwd.net.strip_rows = rows
        out = fwd(x)
        assert out.dtype == torch.float32 and out.shape == ref.shape and out.is_contiguous()
        diff = (out - ref).abs().max().item()
        assert diff <= tol, f"{rows} rows: max |Δ| {diff}"


def test_the_default_plan_runs_the_full_size_level_in_strips() -> None:
    fwd = prepare(random_generator(SMALL[512]), ForwardPlan())
    assert 0 < fwd.net.strip_rows == fast.FastGPEN.STRIP_ROWS < 512


@pytest.mark.parametrize("halo,smaller", [("HALO", 1), ("HEAD_HALO", 0)])  # the head's stays even: stride 2
def test_a_smaller_halo_changes_the_output(monkeypatch, halo: str, smaller: int) -> None:
    """The halo is needed whole: with less, rows at the strips' edges come out wrong."""
    fwd = prepare(random_generator(SMALL[256], seed=1), ForwardPlan())
    x = _face(256, seed=1)
    ref = _untiled(fwd, x)
    fwd.net.strip_rows = 64
    assert (fwd(x) - ref).abs().max().item() <= EXACT
    monkeypatch.setattr(fast, halo, smaller)
    assert (fwd(x) - ref).abs().max().item() > 1e-3


@pytest.mark.parametrize("variant", ["f32", "f32-polyphase-split", "f32-nchw", "f32-native-fir"])
def test_the_halo_is_what_each_conv_of_the_level_needs(monkeypatch, variant: str) -> None:
    """Each conv as a black box, computed on a strip of its input: which output rows come out right.

    The upsampling conv on input rows [m0, m1) gets full-size rows [2·m0 + 3, 2·m1 - 2]
    right (away from the image's border), so rows [r0 - 1, r1 + 1), what the 3×3 conv reads
    for output rows [r0, r1), need input rows [r0/2 - 2, r1/2 + 2): fast.input_rows.
    The 3×3 conv on rows [a, b) gets rows [a + 1, b - 1) right.
    """
    fwd = _prepared(monkeypatch, 256, variant, seed=3)
    net = fwd.net
    up_conv, conv = net.convs[-2], net.convs[-1]
    half = 128
    cin = up_conv.conv.wsq.shape[1]
    mf = net.memory_format
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, cin, half, half, generator=gen).contiguous(memory_format=mf)
    latent = torch.randn(1, net.style[-1].weight.shape[0], generator=gen)
    noise = torch.randn(1, conv.bias_noise.shape[1], 2 * half, 2 * half, generator=gen).contiguous(memory_format=mf)

    def cat(y):
        return torch.cat(y, 1) if isinstance(y, tuple) else y

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:  # unscaled random inputs: values far from 1
        return (a - b).abs().max().item() <= EXACT * (1 + b.abs().max().item())

    def second(y: torch.Tensor) -> torch.Tensor:  # the 3×3 conv, handed a pair where its weight is split
        c = conv.conv.split_at
        return cat(conv([y[:, :c], y[:, c:]] if c else y, latent, noise[:, :, a:b] if y.shape[2] < 2 * half else noise))

    with torch.inference_mode():
        full = cat(up_conv(x, latent, noise))
        r0, r1 = 96, 160
        m0, m1 = fast.input_rows(r0, r1, half)
        assert (m0, m1) == (r0 // 2 - 2, r1 // 2 + 2)

        def strip(a: int, b: int) -> torch.Tensor:  # full-size rows [2a, 2b) from input rows [a, b)
            return cat(up_conv(x[:, :, a:b], latent, noise[:, :, 2 * a : 2 * b]))

        got = strip(m0, m1)
        assert close(got[:, :, r0 - 1 - 2 * m0 : r1 + 1 - 2 * m0], full[:, :, r0 - 1 : r1 + 1])
        # One input row less on either side gets the first / last needed row wrong.
        assert not close(strip(m0 + 1, m1)[:, :, r0 - 1 - 2 * (m0 + 1)], full[:, :, r0 - 1])
        assert not close(strip(m0, m1 - 1)[:, :, r1 - 2 * m0], full[:, :, r1])
        # At the image's top and bottom the strip's zero padding is the full computation's.
        assert close(strip(0, 10)[:, :, :17], full[:, :, :17])
        assert close(strip(half - 10, half)[:, :, 3:], full[:, :, 2 * half - 17 :])

        # The 3×3 conv: rows [a, b) in, rows [a + 1, b - 1) right, the edge rows not.
        y = full.contiguous(memory_format=mf)
        a, b = r0 - 1, r1 + 1
        full2 = second(y)
        got2 = second(y[:, :, a:b])
        assert close(got2[:, :, 1:-1], full2[:, :, r0:r1])
        assert not close(got2[:, :, 0], full2[:, :, a])



@pytest.mark.parametrize("variant", ["f32", "f32-split", "f32-nchw", "bf16"])
def test_the_forward_builds_no_full_size_feature(monkeypatch, variant: str) -> None:
    """Neither the encoder's head nor the last decoder level makes a tensor as tall as the image and wider than RGB.

    (The untiled forward makes several: the full-size encoder feature, its blurred copy, and
    the last level's (features, noise) outputs.)
    """
    fwd = _prepared(monkeypatch, 256, variant)
    net = fwd.net
    assert 0 < net.strip_rows < 256
    calls = []
    net.convs[-2].register_forward_pre_hook(lambda m, i: calls.append(i[0].shape))
    mode = FullSizeOutputs(256, 3)
    with mode:
        out = fwd(_face(256))
    assert out.shape == (1, 3, 256, 256)
    assert len(calls) == -(-256 // net.strip_rows)  # the level's first conv ran once per strip
    assert mode.seen == []


@pytest.mark.parametrize("variant", ["f32", "f32-nchw", "f32-native-fir"])
def test_the_encoder_head_halo_is_what_its_layers_need(monkeypatch, variant: str) -> None:
    """encoder[1](encoder[0](rows [a, b))) as a black box: half-size rows [a/2 + 1, b/2 - 1) come out right."""
    net = _prepared(monkeypatch, 256, variant, seed=4).net
    x = _face(256, seed=4).contiguous(memory_format=net.memory_format)

    def head(a: int, b: int) -> torch.Tensor:  # half-size rows from a/2 on
        return net.encoder[1](net.encoder[0](x[:, :, a:b]))

    with torch.inference_mode():
        full = head(0, 256)
        j0, j1 = 40, 72
        h = fast.HEAD_HALO
        assert (head(2 * j0 - h, 2 * j1 + h)[:, :, 1 : 1 + j1 - j0] - full[:, :, j0:j1]).abs().max().item() <= EXACT
        # Two rows less at the top (strips start on even rows) or one less at the bottom: an edge row is wrong.
        assert (head(2 * j0 - h + 2, 2 * j1 + h)[:, :, 0] - full[:, :, j0]).abs().max().item() > 1e-3
        assert (head(2 * j0 - h, 2 * j1 + h - 1)[:, :, j1 - j0] - full[:, :, j1 - 1]).abs().max().item() > 1e-3
        # The image's top and bottom rows: the strip's zero padding is the full computation's.
        assert (head(0, 20)[:, :, :9] - full[:, :, :9]).abs().max().item() <= EXACT
        assert (head(236, 256)[:, :, 1:] - full[:, :, 119:]).abs().max().item() <= EXACT


def test_a_strip_height_must_be_even() -> None:
    fwd = prepare(random_generator(SMALL[256]), ForwardPlan())
    fwd.net.strip_rows = 33
    with pytest.raises(ValueError, match="even"):
        fwd(_face(256))


def test_the_polyphase_interleave_takes_a_strip_of_rows() -> None:
    """from_phases on a non-square phase image (a strip): the same as the transposed conv + blur."""
    model = random_generator(SMALL[256])
    conv = fast_layers.ModConv(model.generator.convs[0].conv, 1.0, "depthwise", torch.float32, torch.device("cpu"), torch.channels_last)
    w = conv.weight.clone()
    conv.use_polyphase()
    x = torch.randn(1, w.shape[0], 5, 12, generator=torch.Generator().manual_seed(0)).contiguous(memory_format=torch.channels_last)
    ref = conv.blur(F.conv_transpose2d(x, w, stride=2))
    got = conv.blur.from_phases(F.conv2d(x, conv.weight, padding=1), None, leaky=False)
    assert got.shape == ref.shape == (1, w.shape[1], 10, 24)
    assert (got - ref).abs().max().item() <= 1e-6 * ref.abs().max().item()
