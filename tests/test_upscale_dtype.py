"""The upscaler's compute dtype: bfloat16 autocast on CPUs with native bf16, else float32.

``tiles.choose_bf16`` decides; the pipeline passes its answer to ``run_tiles`` and says the dtype in
the result (``upscale.dtype``, the note, the measured panel). The numerical check runs the real
bf16 kernels, so it skips on CPUs without native bf16 (there bf16 is emulated and not chosen).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gpen_core.networks import plan
from gpen_core.upscale import tiles
from gpen_core.modes import MODES
from gpen_core.networks.upscaler import RRDBNet, UpscalerConfig, official_init_upscaler, random_upscaler, save_upscaler

from .conftest import shared_path

NATIVE = {"native_bf16": True}
EMULATED = {"native_bf16": False}


def _features(monkeypatch, feats: dict[str, bool]) -> None:
    monkeypatch.setattr(plan, "cpu_features", lambda: dict(feats))


@pytest.mark.parametrize("mode", ["low", "balanced", "faces-only"])
def test_cpu_choice_follows_native_bf16(monkeypatch, mode):
    _features(monkeypatch, NATIVE)
    bf16, why = tiles.choose_bf16("cpu", MODES[mode])
    assert bf16 and why.startswith("bfloat16") and "native" in why
    _features(monkeypatch, EMULATED)
    bf16, why = tiles.choose_bf16("cpu", MODES[mode])
    assert not bf16 and why.startswith("float32") and "no native bfloat16" in why
    # an explicit feature dict wins over the probe
    assert tiles.choose_bf16("cpu", MODES[mode], features=NATIVE)[0]


def test_quality_stays_float32_even_with_native_bf16(monkeypatch):
    _features(monkeypatch, NATIVE)
    bf16, why = tiles.choose_bf16("cpu", MODES["quality"])
    assert not bf16 and "quality" in why


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_gpu_path_is_unchanged_float32_without_probing_the_cpu(monkeypatch, device):
    def probe() -> dict[str, bool]:
        raise AssertionError("the GPU path must not depend on the CPU's features")

    monkeypatch.setattr(plan, "cpu_features", probe)
    for mode in (None, *MODES.values()):
        bf16, why = tiles.choose_bf16(device, mode)
        assert not bf16 and why.startswith(f"float32 on {device}")


# ------------------------------------------------------------ through the pipeline


def _restore_json(tmp_path, capsys, models_dir, gen256, photo, upscaler, mode="low") -> dict:
    from gpen_core.cli import main

    rc = main(
        ["restore", str(photo), "-o", str(tmp_path / "out.png"), "--upscale", "2", "--upscaler", upscaler, "--tile", "64",
         "--model", str(gen256), "--mode", mode, "--models-dir", str(models_dir), "--json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    rec = [json.loads(line) for line in out.splitlines() if line.strip()][-1]
    assert rc == 0, rec
    return rec


@pytest.fixture
def small_case(tmp_path):
    from PIL import Image

    with Image.open(shared_path("faces", "Solvay_conference_1927.png")) as im:
        im.convert("RGB").crop((0, 0, 130, 98)).save(tmp_path / "photo.png")
    net = random_upscaler(UpscalerConfig(scale=2, num_block=1, num_feat=8, num_grow_ch=4), seed=2)
    return tmp_path / "photo.png", str(save_upscaler(net, tmp_path / "small_x2.pth"))


@pytest.mark.parametrize("feats, dtype", [(NATIVE, "bfloat16"), (EMULATED, "float32")])
def test_pipeline_runs_and_reports_the_chosen_dtype(monkeypatch, models_with_detector, gen256, small_case, tmp_path, capsys, feats, dtype):
    """``low`` (float32 generator on the CPU either way) with the CPU probe patched both ways: the
    upscaler's dtype follows the probe, and the JSON record and the note say which ran."""
    _features(monkeypatch, feats)
    seen: list[bool] = []
    real = tiles.run_tiles

    def spy(*args, **kwargs):
        seen.append(kwargs.get("bf16", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(tiles, "run_tiles", spy)
    photo, upscaler = small_case
    rec = _restore_json(tmp_path, capsys, models_with_detector, gen256, photo, upscaler)
    assert seen == [dtype == "bfloat16"]
    assert rec["upscale"]["dtype"] == dtype
    assert rec["dtype"] == "float32"  # the generator's dtype is the mode's, untouched by the upscaler's
    assert any("upscaled ×2" in n and f"in {dtype}:" in n for n in rec["notes"]), rec["notes"]


def test_measured_panel_names_the_upscalers_dtype():
    from gpen_core.result import Peaks, RestoreResult, Timings, UpscaleInfo
    from gpen_app.panels import metrics_markdown

    result = RestoreResult(
        image=np.zeros((160, 200, 3), np.uint8), faces=(), timings=Timings(total_s=2.0, decode_s=0.1, detect_s=0.2,
        restore_s=1.0, encode_s=0.1, load_s=0.3), peaks=Peaks(1 << 30, 1 << 29, "vmhwm"), mode=MODES["balanced"],
        requested_mode="balanced", mode_reason="", checkpoint="GPEN-BFR-512", detector="mobilenet0.25", device="cpu",
        dtype="bfloat16", output_format="png", encoded=b"x", notes=(), input_size=(100, 80), processed_size=(100, 80),
        upscale=UpscaleInfo(2, "realesrnet_x2.pth", 128, 10, 4, 1.5, "bfloat16"),
    )  # fmt: skip
    assert "upscaled ×2 to 200×160 (4 tiles of 128 px, bfloat16)" in metrics_markdown(result)


# ------------------------------------------------------------ numerics


def _official_init(config: UpscalerConfig) -> RRDBNet:
    """The official RRDBNet initialisation: outputs mostly in range, as a trained upscaler's."""
    return official_init_upscaler(config)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.mark.parametrize("scale", [2, 4])
def test_bf16_stays_close_to_float32_on_a_real_crop(scale):
    if not plan.cpu_features()["native_bf16"]:
        pytest.skip("needs a CPU with native bfloat16 (AVX-512 BF16 or AMX); elsewhere bf16 is emulated and not chosen")
    from PIL import Image

    with Image.open(shared_path("faces", "Solvay_conference_1927.png")) as im:
        rgb = np.ascontiguousarray(np.asarray(im.convert("RGB"))[200:264, 600:664])
    net = _official_init(UpscalerConfig(scale=scale, num_block=2))
    f32 = tiles.run_tiles(rgb, net, 48)
    auto = tiles.run_tiles(rgb, net, 48, bf16=True)
    weights = tiles.run_tiles(rgb, net.to(torch.bfloat16), 48)
    assert (f32.dtype, auto.dtype, weights.dtype) == ("float32", "bfloat16", "bfloat16")
    for got in (auto, weights):
        assert got.image.shape == f32.image.shape == (64 * scale, 64 * scale, 3)
        p = _psnr(got.image, f32.image)
        assert 40 <= p < float("inf"), p  # close, yet not identical: bf16 really ran
