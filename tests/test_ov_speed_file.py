"""The speed records ``auto`` reads (per CPU model, in the measurements store): tolerant of a missing or damaged file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpen_core.platform import measurements
from gpen_core.runtimes.openvino import generator as ov_backend

needs_openvino = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)


def _speed_file(home: Path) -> Path:
    return measurements.path(home)


def test_a_missing_file_reads_as_no_records(tmp_path: Path) -> None:
    assert not _speed_file(tmp_path).exists()
    assert ov_backend.speed_records(tmp_path) == {}


@pytest.mark.parametrize("damage", [b"{\"512-float32\": {\"torch_s\": 1.", b"\xff\xfe not json", b"[1, 2]", b"\"text\""])
def test_a_damaged_file_reads_as_no_records_and_the_next_record_rewrites_it(tmp_path: Path, damage: bytes) -> None:
    f = _speed_file(tmp_path)
    f.write_bytes(damage)
    assert ov_backend.speed_records(tmp_path) == {}
    ov_backend.record_speed(256, "float32", torch_s=0.5, openvino_s=0.25, models_dir=tmp_path, source="test")
    saved = json.loads(f.read_text())["speeds"][ov_backend.cpu_id()]
    assert list(saved) == ["256-float32"] and saved["256-float32"]["openvino_s"] == 0.25


def test_records_of_other_networks_are_kept(tmp_path: Path) -> None:
    ov_backend.record_speed(256, "float32", 0.5, 0.25, models_dir=tmp_path, source="test")
    ov_backend.record_speed(512, "bfloat16", 0.4, 0.3, models_dir=tmp_path, network="parsenet", source="test")
    assert set(ov_backend.speed_records(tmp_path)) == {"256-float32", "parsenet-512-bfloat16"}


@needs_openvino
@pytest.mark.parametrize("damage", [None, b"not json {", b"[\"512-float32\"]"])
def test_auto_without_a_readable_record_says_there_is_no_measurement(tmp_path: Path, damage: bytes | None) -> None:
    if damage is not None:
        _speed_file(tmp_path).write_bytes(damage)
    choice = ov_backend.choose_backend("auto", 512, "float32", models_dir=tmp_path)
    backend, why = choice.runtime, choice.why
    assert backend == "torch" and "no OpenVINO measurement for 512 px float32" in why


@needs_openvino
def test_auto_follows_a_record_written_over_a_damaged_file(tmp_path: Path) -> None:
    f = _speed_file(tmp_path)
    f.write_text("{ torn")
    ov_backend.record_speed(512, "float32", torch_s=1.7, openvino_s=1.2, models_dir=tmp_path, source="test")
    choice = ov_backend.choose_backend("auto", 512, "float32", models_dir=tmp_path)
    backend, why = choice.runtime, choice.why
    assert backend == "openvino" and "1.20 s vs torch 1.70 s" in why
