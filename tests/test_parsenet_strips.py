"""ParseNet's full-size layers in strips of rows: the whole forward's logits, without its full-size features."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet, build
from gpen_core.networks.parsenet import parse_in_strips, run_in_strips

from .conftest import shared_path
from .factories import FullSizeOutputs

# The released architecture narrowed for speed: every layer kind and level is kept.
SMALL = {**RELEASED_CONFIG, "in_size": 128, "out_size": 128, "base_ch": 8, "ch_range": (8, 16)}


def _net(config: dict = SMALL, seed: int = 0) -> ParseNet:
    torch.manual_seed(seed)
    net = ParseNet(**config).eval()
    for m in net.modules():  # batch norms that are not the identity (fresh ones are)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return net


def _face(size: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.mark.parametrize("rows", [64, 16, 7, 1])  # one strip, several, odd heights (stride-2 layers), one row
@pytest.mark.parametrize("channels_last", [False, True])
def test_strips_compute_the_whole_forward(rows: int, channels_last: bool) -> None:
    mf = torch.channels_last if channels_last else torch.contiguous_format
    net = _net().to(memory_format=mf)
    x = _face(128).contiguous(memory_format=mf)
    with torch.inference_mode():
        whole = net.parse(x)
        got = parse_in_strips(net, x, rows)
    assert got.shape == whole.shape
    # the same values through the same ops; only oneDNN's summation order may follow the strip's shape
    assert float((got - whole).abs().max() / whole.abs().max()) <= 1e-5
    assert torch.equal(got.argmax(1), whole.argmax(1))


def test_bfloat16_strips_stay_within_bfloat16_rounding() -> None:
    net = _net().to(torch.bfloat16)
    x = _face(128).to(torch.bfloat16)
    with torch.inference_mode():
        whole, got = net.parse(x).float(), parse_in_strips(net, x, 16).float()
    # one bf16 step (2^-8 relative) flipped where a strip's kernel rounds differently, carried through
    assert float((got - whole).abs().max() / whole.abs().max()) <= 3e-2
    assert float((got.argmax(1) == whole.argmax(1)).float().mean()) >= 0.99


def test_a_wrong_row_dependency_would_show() -> None:
    """The strips read exactly the rows each layer needs: cutting a strip's input short changes its output."""
    net = _net(seed=2)
    x = _face(128, seed=2)
    head = list(net.encoder)[:2]
    with torch.inference_mode():
        whole = head[1](head[0](x))
        ours = run_in_strips(head, x, 8)
        # the same two layers on rows [0, 40) only: the output rows next to the cut differ
        cut = head[1](head[0](x[:, :, :40]))
    assert torch.allclose(ours, whole, rtol=0, atol=1e-5 * float(whole.abs().max()))
    assert not torch.allclose(cut[:, :, 19], whole[:, :, 19], rtol=0, atol=1e-5 * float(whole.abs().max()))



def test_the_strips_build_no_full_size_feature() -> None:
    config = {**SMALL, "base_ch": 32, "ch_range": (32, 64)}  # full-size features of 32-64 channels, as released (64-128)
    net = _net(config)
    x = _face(128)
    whole, strips = FullSizeOutputs(128, 19), FullSizeOutputs(128, 19)
    with torch.inference_mode():
        with whole:
            net.parse(x)
        with strips:
            parse_in_strips(net, x, 32)
    assert len(whole.seen) >= 4  # the whole forward makes them: the check can fail
    assert strips.seen == []


def test_the_runner_parses_in_strips_when_asked_and_matches_the_official_logits() -> None:
    ref = torch.load(shared_path("reference", "parse", "parsenet_tiny128_seeded.pt"), weights_only=True)
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ref["state_dict_fp16"].items()}
    face_rgb = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    assert FaceParser(build(sd, ref["config"]), input_size=ref["config"]["in_size"]).strips  # the CPU's default
    assert not FaceParser(build(sd, ref["config"]), device="meta", input_size=ref["config"]["in_size"]).strips  # elsewhere: asked for only
    parser = FaceParser(build(sd, ref["config"]), input_size=ref["config"]["in_size"], channels_last=False, strips=True)
    calls = []
    parser._net.out_mask_conv.register_forward_pre_hook(lambda m, i: calls.append(i[0].shape))
    logits = parser.logits(face_rgb)
    assert calls == []  # the mask head ran as a strip function, not as the module on the whole image
    # The bound of the whole forward against the official reference (tests/test_parsenet.py):
    # 1e-5 of the logits' scale (the convolutions' summation order), and the same labels.
    want = ref["logits"]
    assert float((logits - want).abs().max() / want.abs().max()) <= 1e-5
    assert np.array_equal(logits.argmax(dim=1)[0].numpy(), want.argmax(dim=1)[0].numpy())
    whole = FaceParser(build(sd, ref["config"]), input_size=ref["config"]["in_size"], channels_last=False, strips=False)
    assert not whole.strips
    assert float((whole.logits(face_rgb) - logits).abs().max() / want.abs().max()) <= 1e-5
