"""``auto`` does not start a first-use OpenVINO conversion that the free RAM cannot hold.

A conversion needs far more memory than running the converted model (measured: +1.66 GB for
GPEN-BFR-512, +0.76 GB for GPEN-BFR-256, against the mode's ~1.15 GB), so on a tight machine
the request runs on torch, and says why, instead of failing mid-conversion.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.engine.model_cache import ModelCache
from gpen_core.engine.runtime_choice import RuntimeFacts, decide_runtime
from gpen_core.modes import MODES
from gpen_core.options import RestoreOptions
from gpen_core.runtimes.openvino.choice import BackendChoice

from .factories import low_on_openvino

pytestmark = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)
MB = 2**20
LOW_OV = low_on_openvino()  # low itself keeps to torch under auto


@pytest.fixture()
def home(tmp_path: Path, gen256: Path) -> Path:
    (tmp_path / "GPEN-BFR-256.pth").symlink_to(gen256)
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=tmp_path, source="test")
    return tmp_path


def test_auto_converts_a_checkpoint_only_when_the_free_ram_holds_its_measured_conversion(home: Path) -> None:
    ckpt = home / "GPEN-BFR-256.pth"
    need, measured = ov_backend.conversion_ram(256, ckpt)
    assert measured and need == ov_backend.CONVERT_RAM_MEASURED[256]
    facts = RuntimeFacts("generator", "the generator GPEN-BFR-256", "auto", BackendChoice("openvino", "measured faster here"),
                         "float32", "float32", converted=False, convert_ram=need, free_ram=need - 1, converting=ckpt.name)
    why = decide_runtime(facts).note
    assert why and "GPEN-BFR-256.pth" in why and "ran it on torch" in why and "is free" in why
    assert decide_runtime(replace(facts, free_ram=need)).runtime == "openvino"
    unknown, measured = ov_backend.conversion_ram(2048, ckpt)  # no measurement for that size: an estimate
    assert not measured and unknown == int(ckpt.stat().st_size * 10.5)
    assert "(estimated from the file size)" in (decide_runtime(replace(facts, convert_ram_estimated=True)).note or "")


def test_generator_runs_on_torch_and_says_why_then_converts_when_memory_is_free(home: Path, monkeypatch) -> None:
    opts = RestoreOptions(mode="low")
    cache = ModelCache(home)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(100 * MB))
    g = cache.generator(LOW_OV, opts, "cpu")
    assert g.runtime == "torch" and "converting GPEN-BFR-256.pth" in g.reason
    assert g.note and "ran it on torch" in g.note
    assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # nothing was converted
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(32 * 10**9))
    g = cache.generator(LOW_OV, opts, "cpu")
    assert g.runtime == "openvino" and g.size == 256
    assert g.note and "converted the generator to OpenVINO" in g.note
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(100 * MB))  # converted now: little RAM is no reason for torch
    assert cache.generator(LOW_OV, opts, "cpu").runtime == "openvino"


def test_parser_and_detector_fall_back_the_same_way(tmp_path: Path, monkeypatch) -> None:
    import torch

    from gpen_core.faces.parse import choose_parse_dtype
    from gpen_core.networks.parsenet import RELEASED_CONFIG, ParseNet

    from .conftest import shared_path

    mobilenet = shared_path("weights", "detection_mobilenet0.25_Final.pth")  # skips without ../shared
    (tmp_path / mobilenet.name).symlink_to(mobilenet)
    torch.manual_seed(0)
    torch.save(ParseNet(**RELEASED_CONFIG).state_dict(), tmp_path / "ParseNet-latest.pth")
    dt = choose_parse_dtype("cpu", MODES["balanced"].cpu_dtype)
    ov_backend.record_speed(256, dt, 0.2, 0.1, models_dir=tmp_path, network="parsenet", source="test")
    ov_backend.record_speed(1000, "float32", 0.1, 0.05, models_dir=tmp_path, network="retinaface-mobilenet0.25", source="test")
    opts, cache = RestoreOptions(mode="balanced"), ModelCache(tmp_path)

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(100 * MB))
    notes: list[str] = []
    assert cache.parser(MODES["balanced"], "cpu", notes, opts).backend == "torch"
    assert cache.detector("mobilenet0.25", "cpu", opts, notes).backend == "torch"
    assert any("the 256 px parser" in n and "ran it on torch" in n for n in notes)
    assert any("the mobilenet0.25 detector" in n and "ran it on torch" in n for n in notes)
    assert not any((tmp_path / "openvino").glob("parsenet-*")) and not any((tmp_path / "openvino").glob("retinaface-*"))

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(32 * 10**9))
    notes.clear()
    assert cache.parser(MODES["balanced"], "cpu", notes, opts).backend == "openvino"
    assert cache.detector("mobilenet0.25", "cpu", opts, notes).backend == "openvino"
    assert not any("ran it on torch" in n for n in notes)
