"""The hardware check's parser and detector rows (torch vs OpenVINO, seconds per call): carried from
:func:`gpen_core.hwcheck.backends.measure` into the stored profile and shown in the report, with what
``--backend auto`` now runs for them. The measurements are stood in for (no weights, no conversion): quick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.runtimes.openvino import detector as ov_detect
from gpen_core.runtimes.openvino import parser as ov_parse
from gpen_core.hwcheck import backends
from gpen_core.engine import profile_records as records
from gpen_core.hwcheck import report
from gpen_core.engine import profile_store as store


def _parse_measured(size: int, dtype: str, **k: Any) -> dict[str, Any]:
    """What ov_parse.measure_speed returns (recorded), with fixed times."""
    return {"size": size, "dtype": dtype, "precision": "f32", "note": None, "weights": "/x/parsenet-synthetic.pth",
            "convert_s": 12.5, "torch_s": 0.4, "torch_times": [0.41, 0.4, 0.39], "openvino_s": 0.2,
            "openvino_times": [0.2, 0.21, 0.19], "speed_file": "/x/speed.json"}


def _detect_measured(network: str, load_as: Any, **k: Any) -> dict[str, Any]:
    """What ov_detect.measure_speed returns (recorded): resnet50 measured, mobilenet fails."""
    if network == "mobilenet0.25":
        raise RuntimeError("the plugin refused it")
    return {"network": f"retinaface-{network}", "size": ov_detect.DETECT_SIDE, "threads": 1, "convert_s": None, "load_s": 0.3,
            "torch_s": 0.3, "torch_times": [0.3, 0.3, 0.3], "openvino_s": 0.6, "openvino_times": [0.6, 0.6, 0.6],
            "speed_file": "/x/speed.json"}


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> records.BackendCheck:
    """measure() → finish() for the parser and two detectors, through the real check_row wrappers."""
    monkeypatch.setattr(ov_backend, "unavailable_reason", lambda: None)
    monkeypatch.setattr(ov_parse, "measure_speed", _parse_measured)
    monkeypatch.setattr(ov_detect, "measure_speed", _detect_measured)
    spec = {"pairs": [], "runs": 3, "models_dir": str(tmp_path), "threads": 1,
            "parse": [{"size": 512, "dtype": "float32", "weights": None}], "detect": ["mobilenet0.25", "resnet50"]}
    result = backends.measure(spec, lambda f, d: None)
    assert len(result["parse"]) == 1 and len(result["detect"]) == 2
    return backends.finish(records.BackendCheck(skipped=None, openvino="test"), spec, result, str(tmp_path))


def _profile(check: records.BackendCheck, modes: tuple[str, ...] = ("low", "quality")) -> records.Profile:
    return records.Profile(
        created="now", device="cpu", synthetic=True, fingerprint={}, machine={}, free_at_start={},
        isolated=False, workloads=(), backends=check,
        modes={m: records.failed_mode({"mode": m, "kind": "synthetic", "notes": []}, "test", 0) for m in modes})


def test_finish_keeps_the_parser_and_detector_rows(measured: records.BackendCheck) -> None:
    assert measured.rows == () and measured.speed_file == "/x/speed.json"  # recorded by ov_parse / ov_detect
    parse, mobile, resnet = measured.networks
    assert (parse.network, parse.size, parse.dtype, parse.weights, parse.runs) == ("parsenet", 512, "float32", "synthetic", 3)
    assert parse.torch_s == 0.4 and parse.openvino_s == 0.2 and parse.torch_times == (0.41, 0.4, 0.39)
    assert parse.recorded and parse.faster == "openvino" and parse.convert_s == 12.5 and parse.precision == "f32"
    assert mobile.network == "retinaface-mobilenet0.25" and mobile.size == ov_detect.DETECT_SIDE and not mobile.recorded
    assert mobile.error == "RuntimeError: the plugin refused it" and mobile.faster is None
    assert mobile.note == "not measured: RuntimeError: the plugin refused it"
    assert resnet.recorded and resnet.faster == "torch" and resnet.weights == "synthetic" and resnet.convert_s is None


def test_the_rows_survive_the_store(measured: records.BackendCheck, tmp_path: Path) -> None:
    prof = _profile(measured)
    assert records.Profile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof
    store.save_profile(prof, tmp_path)
    assert store.load_json(tmp_path / "measurements.json").backends == measured
    # a later check that measured no networks (--no-backends, a GPU-less override run) keeps the earlier rows
    store.save_profile(_profile(records.BackendCheck(skipped="asked not to (--no-backends)")), tmp_path)
    kept = store.load_json(tmp_path / "measurements.json").backends
    assert kept is not None and kept.networks == measured.networks


def test_a_profile_saved_before_the_network_rows_still_loads(measured: records.BackendCheck, tmp_path: Path) -> None:
    d = _profile(measured).to_dict()
    del d["backends"]["networks"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    old = store.load_json(path)
    assert old.backends is not None and old.backends.networks == () and old.backends.speed_file == "/x/speed.json"
    assert "**Parser and detectors**" not in report.backends_section(old, tmp_path)


def test_the_report_shows_them_per_call(measured: records.BackendCheck, tmp_path: Path) -> None:
    text = report.backends_section(_profile(measured), tmp_path)
    assert "**Parser and detectors** (seconds per call" in text
    assert "| network | input | dtype | torch s / call | OpenVINO s / call | faster | OpenVINO conversion |" in text
    assert "| ParseNet | 512 px | float32 | 0.400 | 0.200 (f32) | OpenVINO 2.00× | 12.5 s (first use; cached) |" in text
    assert f"| RetinaFace resnet50 | {ov_detect.DETECT_SIDE} px (longest side) | float32 | 0.300 | 0.600 (f32) | torch 2.00× |" in text
    assert "- RetinaFace mobilenet0.25 1000 px float32: not measured: RuntimeError: the plugin refused it" in text
    assert "Recorded in /x/speed.json" in text
    # the generator's table keeps its own unit (none here: no generator rows)
    assert "s / face" not in text.split("**Parser and detectors**")[1]


def test_the_report_says_what_auto_runs_for_the_parser_and_detector(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ov_backend, "openvino_version", lambda: "test")
    ov_backend.record_speed(512, "float32", 0.4, 0.2, models_dir=tmp_path, network="parsenet")
    ov_backend.record_speed(ov_detect.DETECT_SIDE, "float32", 0.3, 0.6, models_dir=tmp_path, network="retinaface-resnet50")
    prof = _profile(records.BackendCheck(skipped=None, openvino="test"))
    chosen = report.auto_networks(prof, tmp_path)
    side = ov_detect.DETECT_SIDE
    assert chosen == {
        ("parsenet", 512, "float32"): ("openvino", "measured faster here: 0.20 s vs torch 0.40 s per face", ("quality",)),
        ("retinaface-mobilenet0.25", side, "float32"):
            ("torch", f"no OpenVINO measurement for retinaface-mobilenet0.25 at {side} px float32 on this CPU or CPUs of its kind yet", ("low",)),
        ("retinaface-resnet50", side, "float32"): ("torch", "measured faster here: 0.30 s vs OpenVINO 0.60 s per detection", ("quality",)),
    }
    text = report.backends_section(prof, tmp_path)
    assert ("For the parser and detector `auto` now runs: "
            "ParseNet 512 px float32 (`quality`) → OpenVINO (measured faster here: 0.20 s vs torch 0.40 s per face); ") in text
    assert f"RetinaFace resnet50 {side} px float32 (`quality`) → torch (measured faster here: 0.30 s vs OpenVINO 0.60 s per detection)" in text
    # a GPU check: the generator line says GPU, no parser/detector line
    assert report.auto_networks(records.Profile(**{**prof.__dict__, "device": "cuda:0"}), tmp_path) == {}
