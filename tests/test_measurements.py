"""This machine's measurements in one typed, versioned file: one reader, one writer, never a crash on an old file."""

from __future__ import annotations

import json
from pathlib import Path

from gpen_core.platform import measurements
from gpen_core.runtimes.openvino import generator as ov_backend


def test_the_profile_and_the_speed_records_share_one_file_and_neither_write_drops_the_other(tmp_path: Path) -> None:
    from dataclasses import replace

    measurements.update(lambda s: replace(s, profiles={"cpu": {"format": 0, "mark": "profile"}}), tmp_path)
    ov_backend.record_speed(512, "float32", torch_s=1.7, openvino_s=1.2, models_dir=tmp_path, source="test")
    saved = json.loads((tmp_path / "measurements.json").read_text())
    assert saved["version"] == 1 and saved["profiles"] == {"cpu": {"format": 0, "mark": "profile"}}
    assert saved["speeds"][ov_backend.cpu_id()]["512-float32"]["torch_s"] == 1.7
    measurements.update(lambda s: replace(s, profiles={}), tmp_path)  # a new profile write keeps the speeds
    back = measurements.read(tmp_path)
    assert back.profiles == {} and back.speeds[ov_backend.cpu_id()]["512-float32"] == measurements.SpeedRecord(
        1.7, 1.2, ov_backend.openvino_version(), back.speeds[ov_backend.cpu_id()]["512-float32"].cpu,
        back.speeds[ov_backend.cpu_id()]["512-float32"].measured_at, "test")


def test_a_file_of_another_version_is_ignored_with_a_note_and_replaced_by_the_next_write(tmp_path: Path) -> None:
    f = tmp_path / "measurements.json"
    f.write_text(json.dumps({"version": 99, "profiles": {"cpu": {"x": 1}}, "speeds": {}}))
    st = measurements.read(tmp_path)
    assert st.profiles == {} and st.speeds == {}
    assert "version 99" in st.note and "measure again" in st.note
    ov_backend.record_speed(256, "float32", 0.5, 0.25, models_dir=tmp_path, source="test")
    assert json.loads(f.read_text())["version"] == measurements.VERSION
    assert measurements.read(tmp_path).note == "" and set(ov_backend.speed_records(tmp_path)) == {"256-float32"}


def test_a_damaged_file_or_record_is_no_measurement(tmp_path: Path) -> None:
    f = tmp_path / "measurements.json"
    f.write_bytes(b"\xff\xfe{ torn")
    st = measurements.read(tmp_path)
    assert (st.profiles, st.speeds) == ({}, {}) and "could not be read" in st.note and "measure again" in st.note
    good = {"torch_s": 1, "openvino_s": 2, "openvino": None, "cpu": "c", "measured_at": "t"}
    f.write_text(json.dumps({"version": 1, "speeds": {"me": {"a": good, "b": {"torch_s": "x"}, "c": [1]}}}))
    assert list(measurements.read(tmp_path).speeds["me"]) == ["a"]  # a damaged record costs only itself


def test_files_of_the_format_before_are_read_until_the_first_write_carries_them_over(tmp_path: Path) -> None:
    (tmp_path / "profile.json").write_text(json.dumps({"format": 3, "profiles": {"cpu": {"mark": "old"}}}))
    (tmp_path / "openvino").mkdir()
    old = {"512-float32": {"torch_s": 1.7, "openvino_s": 1.2, "openvino": "2025", "cpu": "c", "measured_at": "t", "source": "s"}}
    (tmp_path / "openvino" / f"speed-{ov_backend.cpu_id()}.json").write_text(json.dumps(old))
    st = measurements.read(tmp_path)
    assert st.profiles == {"cpu": {"mark": "old"}} and ov_backend.speed_records(tmp_path)["512-float32"].torch_s == 1.7
    ov_backend.record_speed(256, "float32", 0.5, 0.25, models_dir=tmp_path, source="test")
    saved = json.loads((tmp_path / "measurements.json").read_text())
    assert saved["profiles"] == {"cpu": {"mark": "old"}}
    assert set(saved["speeds"][ov_backend.cpu_id()]) == {"512-float32", "256-float32"}
