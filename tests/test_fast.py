"""The fast forward: the plain model's numbers, and plans that fit the hardware.

Speed is measured by ``benchmarks/bench_forward.py``, not here; these tests guard
correctness of every fast path and the plan logic.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from gpen_core.networks import fast, fast_layers
from gpen_core.networks import plan as plan_module
from gpen_core.networks.arch import GPEN, GPENConfig, set_fir_impl
from gpen_core.networks.checkpoint import load_generator
from gpen_core.errors import ResourceError
from gpen_core.networks.prepared import PreparedForward, prepare
from gpen_core.networks.plan import ForwardPlan, choose_plan, cpu_features
from gpen_core.networks.synthetic import random_generator
from gpen_core.platform.paths import models_dir
from gpen_core.networks.tensors import to_image, to_tensor

from .conftest import shared_path
from .factories import TINY

EXACT = 1e-4  # max abs difference allowed for the float32 fast path (outputs are O(1))
SMALL_128 = GPENConfig(128, style_dim=64, n_mlp=2, channel_multiplier=2, narrow=0.125)


def _plain(model: GPEN, x: torch.Tensor) -> torch.Tensor:
    """The reference: our arch with the official generic FIR, eager float32."""
    set_fir_impl(model, "native")
    try:
        with torch.inference_mode():
            return model(x)
    finally:
        set_fir_impl(model, "depthwise")


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _save_pair(name: str, a: np.ndarray, b: np.ndarray) -> Path:
    """Keep a failing pair for a human to look at."""
    from PIL import Image

    out = Path(os.environ.get("GPEN_TEST_ARTIFACTS", "/tmp")) / f"{name}.png"
    Image.fromarray(np.concatenate([a, b], axis=1)).save(out)
    return out


@pytest.fixture(scope="module")
def bfr256() -> tuple[GPEN, dict]:
    data = torch.load(shared_path("reference", "gpen_bfr256_random.pt"), weights_only=True)
    model = load_generator({k: v.float() for k, v in data["state_dict"].items()})
    return model, data


@pytest.fixture(scope="module")
def bfr256_plain(bfr256) -> torch.Tensor:
    model, data = bfr256
    return _plain(model, data["input"].float())


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize(
    "plan",
    [ForwardPlan(), ForwardPlan(channels_last=False), ForwardPlan(fir="native")],
    ids=["default", "nchw", "native-fir"],
)
def test_float32_fast_path_matches_plain_eager_on_bfr256(bfr256, bfr256_plain, plan: ForwardPlan) -> None:
    model, data = bfr256
    out = prepare(model, plan)(data["input"].float())
    assert out.dtype == torch.float32 and out.shape == bfr256_plain.shape
    assert (out - bfr256_plain).abs().max().item() <= EXACT
    # and therefore the official generator's output too
    assert (out - data["output"].float()).abs().max().item() <= EXACT + 1e-5


@pytest.mark.parametrize("cfg", [TINY, SMALL_128], ids=["tiny64", "small128-cm2"])
@pytest.mark.parametrize("seed,split", [(0, False), (1, True)], ids=["concat", "split"])
def test_float32_fast_path_matches_plain_eager_on_random_models(monkeypatch, cfg: GPENConfig, seed: int, split: bool) -> None:
    if split:  # the unconcatenated hand-over that big (512 px) levels use, forced on every level
        monkeypatch.setattr(fast.FastGPEN, "SPLIT_MIN_BYTES", 0)
    model = random_generator(cfg, seed=seed)
    x = torch.rand(2, 3, cfg.size, cfg.size, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    ref = _plain(model, x)
    fwd = prepare(model, ForwardPlan())
    assert any(fwd.net.split_levels) == (split and fast_layers.onednn_fusion(torch.device("cpu"), torch.float32))
    out = fwd(x)
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() <= EXACT
    # a batch is the same as its faces one by one
    assert torch.equal(prepare(model, ForwardPlan())(x[1:]), out[1:])


_ONEDNN = fast_layers.onednn_fusion(torch.device("cpu"), torch.float32)


@pytest.mark.skipif(not _ONEDNN, reason="needs PyTorch's oneDNN (mkldnn) fused conv ops on this CPU")
@pytest.mark.parametrize("cfg", [TINY, SMALL_128], ids=["tiny64", "small128-cm2"])
@pytest.mark.parametrize("split", [False, True], ids=["concat", "split"])
def test_bfloat16_rearrangements_compute_the_plain_model(monkeypatch, cfg: GPENConfig, split: bool) -> None:
    """Polyphase upsampling, input modulation with packed weights and the fused noise half are
    exact rewrites: forced onto a float32 plan they match the plain model to EXACT."""
    monkeypatch.setattr(fast.FastGPEN, "REARRANGED_DTYPES", (torch.float32, torch.bfloat16))
    if split:
        monkeypatch.setattr(fast.FastGPEN, "SPLIT_MIN_BYTES", 0)
    model = random_generator(cfg, seed=2)
    x = torch.rand(2, 3, cfg.size, cfg.size, generator=torch.Generator().manual_seed(2)) * 2 - 1
    fwd = prepare(model, ForwardPlan())
    convs = [m for m in fwd.net.modules() if isinstance(m, fast_layers.ModConv)]
    assert any(c.polyphase and c.packed for c in convs) and any(c.polyphase and not c.packed for c in convs)
    assert any(c.packed and not c.upsample for c in convs) and fwd.net.split_last
    assert any(fwd.net.split_levels) == split
    out = fwd(x)
    assert (out - _plain(model, x)).abs().max().item() <= EXACT
    # The float32 twin (the overflow redo) copies packed weights as plain ones and computes the same.
    twin = fwd.float32_twin()
    assert all(b.layout == torch.strided for b in twin.net.buffers())
    assert any(b.layout != torch.strided for b in fwd.net.buffers())
    assert (twin(x) - out).abs().max().item() <= 1e-5
    assert torch.equal(fwd(x), out)


def test_polyphase_interleave_is_the_transposed_conv() -> None:
    """The 2×2 phase conv + interleave + blur == conv_transpose2d + blur, for odd and even sizes."""
    torch.manual_seed(0)
    model = random_generator(TINY)
    conv = fast_layers.ModConv(model.generator.convs[0].conv, 1.0, "depthwise", torch.float32, torch.device("cpu"), torch.channels_last)
    w = conv.weight.clone()  # (in, out, 3, 3): the transposed conv's layout
    bias = torch.randn(w.shape[1])
    conv.use_polyphase()
    for h in (3, 8):
        x = torch.randn(1, w.shape[0], h, h).contiguous(memory_format=torch.channels_last)
        ref = conv.blur(F.conv_transpose2d(x, w, stride=2), bias)
        got = conv.blur.from_phases(F.conv2d(x, conv.weight, padding=1), bias, leaky=False)
        assert got.shape == ref.shape == (1, w.shape[1], 2 * h, 2 * h)
        assert (got - ref).abs().max().item() <= 1e-6 * ref.abs().max().item()  # unscaled weights: outputs ~50


def test_prepare_leaves_the_model_alone() -> None:
    model = random_generator(TINY)
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.inference_mode():
        expected = model(x)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prepare(model, ForwardPlan())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(m.impl == "depthwise" for m in model.modules() if hasattr(m, "impl"))
    with torch.inference_mode():
        assert torch.equal(model(x), expected)


def test_forward_contract_shape_dtype_and_errors() -> None:
    model = random_generator(TINY)
    fwd = prepare(model, ForwardPlan())
    assert isinstance(fwd, PreparedForward) and fwd.size == 64 and not fwd.compiled
    out = fwd(torch.zeros(1, 3, 64, 64, dtype=torch.float64))  # any float dtype in
    assert out.dtype == torch.float32 and out.shape == (1, 3, 64, 64) and out.is_contiguous()
    with pytest.raises(ValueError, match="1×3×64×64|N×3×64×64"):
        fwd(torch.zeros(1, 3, 128, 128))
    with pytest.raises(TypeError, match="GPEN"):
        prepare(torch.nn.Linear(2, 2), ForwardPlan())  # type: ignore[arg-type]


# ------------------------------------------------------------------ bfloat16


def _face(size: int) -> torch.Tensor:
    from PIL import Image

    face = Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB")
    return to_tensor(np.array(face.resize((size, size), Image.BICUBIC)))


def _check_bf16_psnr(model: GPEN, x: torch.Tensor, name: str) -> None:
    ref = to_image(_plain(model, x))
    got = to_image(prepare(model, ForwardPlan(dtype="bfloat16"))(x.to(torch.bfloat16)))
    psnr = _psnr(ref, got)
    if psnr < 40:
        pytest.fail(f"bfloat16 PSNR {psnr:.1f} dB < 40 dB; pair saved to {_save_pair(name, ref, got)}")


def test_bfloat16_path_keeps_psnr_above_40db_on_a_small_model() -> None:
    """bf16 convolutions (forced, even where this CPU only emulates them) on a real face."""
    _check_bf16_psnr(random_generator(SMALL_128), _face(128), "fast_bf16_small128")


@pytest.mark.skipif(
    not cpu_features()["native_bf16"],
    reason="this CPU has no native bfloat16 (AVX-512 BF16 / AMX): emulated bf16 takes ~60 s here",
)
def test_bfloat16_path_keeps_psnr_above_40db_on_bfr256(bfr256) -> None:
    model, _ = bfr256
    _check_bf16_psnr(model, _face(256), "fast_bf16_bfr256")


# ------------------------------------------------------------------ plans


def _features(monkeypatch: pytest.MonkeyPatch, native_bf16: bool) -> None:
    feats = dict(cpu_features(), native_bf16=native_bf16)
    monkeypatch.setattr(plan_module, "cpu_features", lambda: feats)


@pytest.mark.parametrize(
    "requested,native,expected,noted",
    [
        ("float32", False, "float32", False),
        ("bfloat16", True, "bfloat16", False),
        ("bfloat16", False, "float32", True),
        ("float16", True, "bfloat16", True),
        ("float16", False, "float32", True),
        ("auto", True, "bfloat16", False),
        ("auto", False, "float32", False),
    ],
)
def test_cpu_plan_picks_a_dtype_the_cpu_runs_well(monkeypatch, requested, native, expected, noted) -> None:
    _features(monkeypatch, native)
    plan, note = choose_plan("cpu", requested)
    assert plan.device == "cpu" and plan.dtype == expected and plan.dtype_torch == getattr(torch, expected)
    assert plan.channels_last and plan.fir == "depthwise" and not plan.compile
    assert (note is not None) == noted
    if noted:
        assert requested in note and expected in note


def test_cuda_plan_without_cuda_says_so(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ResourceError, match="CUDA is not available"):
        choose_plan("cuda", "float16")


def test_cuda_plan_falls_back_to_float16_without_bf16(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (7, 5))  # before Ampere: no native bf16
    plan, note = choose_plan("cuda:0", "bfloat16")
    assert (plan.device, plan.dtype) == ("cuda:0", "float16") and "float16" in (note or "")
    assert choose_plan("cuda", "auto") == (ForwardPlan(device="cuda", dtype="float16"), None)


def test_plan_rejects_unknowns_and_is_a_hashable_value() -> None:
    with pytest.raises(ValueError, match="dtype"):
        choose_plan("cpu", "int8")
    with pytest.raises(ValueError, match="device"):
        choose_plan("tpu", "float32")
    plan, _ = choose_plan("cpu", torch.float32)  # a torch dtype is accepted too
    assert {plan: 1}[ForwardPlan()] == 1
    with pytest.raises(AttributeError):
        plan.dtype = "float16"  # type: ignore[misc]


def test_compile_is_off_by_default_and_refused_without_a_compiler(monkeypatch) -> None:
    assert not choose_plan("cpu", "float32")[0].compile
    monkeypatch.setattr("shutil.which", lambda name: None)
    plan, note = choose_plan("cpu", "float32", allow_compile=True)
    assert not plan.compile and "C++ compiler" in (note or "")


def test_cpu_features_are_booleans_consistent_with_the_flags() -> None:
    feats = cpu_features()
    for key in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "native_bf16"):
        assert isinstance(feats[key], bool), key
    if feats["native_bf16"]:
        assert feats["avx512_bf16"] or feats["amx_bf16"] or feats["arm_bf16"]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        assert feats["avx512_bf16"] == (" avx512_bf16" in cpuinfo.read_text())


# ------------------------------------------------------------------ slow / GPU


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GPEN_RUN_SLOW"), reason="compiles for minutes on 2 cores; set GPEN_RUN_SLOW=1")
def test_compiled_forward_matches_eager_and_caches_under_gpen_home(monkeypatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model = random_generator(TINY)
    plan, note = choose_plan("cpu", "float32", allow_compile=True)
    if not plan.compile:
        pytest.skip(f"torch.compile unavailable here: {note}")
    fwd = prepare(model, plan)
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    assert not fwd.compiled
    assert (fwd(x) - _plain(model, x)).abs().max().item() <= EXACT and fwd.compiled
    assert any((models_dir() / "torch_compile").rglob("*")), "inductor wrote nothing under $GPEN_HOME"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float16_512_fits_in_1gb_and_stays_close() -> None:
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.networks.checkpoint import build_from_state_dict

    model = build_from_state_dict(random_state_dict(GPENConfig(512)))
    x = torch.rand(1, 3, 512, 512, generator=torch.Generator().manual_seed(0)) * 2 - 1
    ref = prepare(model, ForwardPlan(device="cuda", dtype="float32"))(x.cuda())
    fwd = prepare(model, ForwardPlan(device="cuda", dtype="float16"))
    del model
    fwd(x.cuda().half())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = fwd(x.cuda().half())
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() <= 1 << 30
    assert _psnr(to_image(ref), to_image(out)) >= 40
