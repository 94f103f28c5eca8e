"""This machine's measurements in one typed, versioned file: one reader, one writer, never a crash on an old file."""

from __future__ import annotations

import json
from pathlib import Path

from gpen_core.platform import measurements
from gpen_core.runtimes.openvino import generator as ov_backend


def test_the_profile_and_the_speed_records_share_one_file_and_neither_write_drops_the_other(tmp_path: Path) -> None:
    from dataclasses import replace

    measurements.update(lambda s: replace(s, profiles={"cpu": {"mark": "profile"}}), tmp_path)
    ov_backend.record_speed(512, "float32", torch_s=1.7, openvino_s=1.2, models_dir=tmp_path, source="test")
    saved = json.loads((tmp_path / "measurements.json").read_text())
    assert saved["version"] == 2 and saved["profiles"] == {"cpu": {"mark": "profile"}}
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
    f.write_text(json.dumps({"version": 2, "speeds": {"me": {"a": good, "b": {"torch_s": "x"}, "c": [1]}}}))
    assert list(measurements.read(tmp_path).speeds["me"]) == ["a"]  # a damaged record costs only itself


def test_files_of_the_format_before_are_read_until_the_first_write_carries_them_over(tmp_path: Path) -> None:
    (tmp_path / "profile.json").write_text(json.dumps({"profiles": {"cpu": {"format": 1, "mark": "old"}, "cuda:0": {"format": 0}}}))
    (tmp_path / "openvino").mkdir()
    old = {"512-float32": {"torch_s": 1.7, "openvino_s": 1.2, "openvino": "2025", "cpu": "c", "measured_at": "t", "source": "s"}}
    (tmp_path / "openvino" / f"speed-{ov_backend.cpu_id()}.json").write_text(json.dumps(old))
    st = measurements.read(tmp_path)
    assert st.profiles == {"cpu": {"mark": "old"}} and ov_backend.speed_records(tmp_path)["512-float32"].torch_s == 1.7
    ov_backend.record_speed(256, "float32", 0.5, 0.25, models_dir=tmp_path, source="test")
    saved = json.loads((tmp_path / "measurements.json").read_text())
    assert saved["profiles"] == {"cpu": {"mark": "old"}}
    assert set(saved["speeds"][ov_backend.cpu_id()]) == {"512-float32", "256-float32"}


def _advice(machine: str) -> dict:
    from gpen_core.hwcheck import advice

    tip = advice.TIPS[10]
    return advice.AdviceReport(machine, "2026-12-01T10:00:00", "w", 1,
                               (advice.TipResult(tip, "not measurable here", "no swap"),)).to_dict()


def test_version_1_and_the_advice_file_are_read_until_the_first_write_carries_them_over(tmp_path: Path) -> None:
    from gpen_core.hwcheck import advice

    rec = {"torch_s": 1.7, "openvino_s": 1.2, "openvino": "2025", "cpu": "c", "measured_at": "t", "source": "s"}
    (tmp_path / "measurements.json").write_text(json.dumps(
        {"version": 1, "profiles": {"cpu": {"format": 1, "mark": "v1"}, "cuda:0": {"format": 7}},
         "speeds": {ov_backend.cpu_id(): {"512-float32": rec}}}))
    (tmp_path / "advice.json").write_text(json.dumps(_advice("the old file")))
    st = measurements.read(tmp_path)
    # the profile's own format was a second version number: gone, only the file's remains
    assert st.profiles == {"cpu": {"mark": "v1"}} and st.note == ""
    assert advice.load_report(tmp_path).machine == "the old file"  # type: ignore[union-attr]
    ov_backend.record_speed(256, "float32", 0.5, 0.25, models_dir=tmp_path, source="test")
    saved = json.loads((tmp_path / "measurements.json").read_text())
    assert saved["version"] == 2 and saved["profiles"] == {"cpu": {"mark": "v1"}}
    assert saved["advice"]["machine"] == "the old file" and set(saved["speeds"][ov_backend.cpu_id()]) == {"512-float32", "256-float32"}
    assert (tmp_path / "advice.json").exists()  # not ours to delete; no longer read once the store holds the advice
    advice.save_report(advice.report_from_dict(_advice("measured again")), tmp_path)
    (tmp_path / "advice.json").write_text(json.dumps(_advice("the old file")))
    assert advice.load_report(tmp_path).machine == "measured again"  # type: ignore[union-attr]


_WRITER = """
import sys
from gpen_core.hwcheck import advice
from gpen_core.runtimes.openvino import generator as ov
home, who = sys.argv[1], int(sys.argv[2])
for i in range(12):
    if who == 0:
        ov.record_speed(100 + i, "float32", 1.0, 0.5, models_dir=home, source="writer")
    else:
        from gpen_core.platform import measurements
        from dataclasses import replace
        measurements.update(lambda s, i=i: replace(s, profiles={**s.profiles, f"dev{i}": {"i": i}}), home)
        report = advice.AdviceReport(f"run {i}", "now", "w", 1, (advice.TipResult(advice.TIPS[10], "not measurable here", "-"),))
        advice.save_report(report, home)
"""


def test_writers_in_two_processes_lose_none_of_each_others_figures(tmp_path: Path) -> None:
    import subprocess
    import sys

    from .conftest import ROOT

    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(who)], cwd=ROOT) for who in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    st = measurements.read(tmp_path)
    assert set(st.speeds[ov_backend.cpu_id()]) == {f"{100 + i}-float32" for i in range(12)}
    assert set(st.profiles) == {f"dev{i}" for i in range(12)}
    assert st.advice is not None and st.advice["machine"] == "run 11"
    assert not list(tmp_path.glob(".*.partial")) and not (tmp_path / "advice.json").exists()


def test_a_saved_profile_keeps_each_speed_once_and_reads_back_whole(tmp_path: Path) -> None:
    from gpen_core.engine import profile_records as records
    from gpen_core.engine import profile_store

    row = records.BackendSpeed(512, "float32", ("balanced",), "GPEN-BFR-512", "synthetic", 3, "now", torch_s=1.5,
                               openvino_s=0.9, torch_times=(1.4, 1.5, 1.7), openvino_times=(0.9, 0.8, 1.0), recorded=True)
    odd = records.BackendSpeed(256, "float32", ("low",), "GPEN-BFR-256", "synthetic", 1, "now", torch_s=0.5)  # no runs kept
    prof = records.Profile("now", "cpu", True, {}, {}, {}, False, (), {}, backends=records.BackendCheck(None, (row, odd)))
    profile_store.save_profile(prof, tmp_path)
    stored = json.loads((tmp_path / "measurements.json").read_text())["profiles"]["cpu"]["backends"]["rows"]
    assert "torch_s" not in stored[0] and "openvino_s" not in stored[0] and stored[1]["torch_s"] == 0.5
    assert profile_store.load_json(tmp_path / "measurements.json") == prof
