"""``export`` checks its output path before any work, and sweeps the partial files of killed exports."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpen_core.cli import main
from gpen_core.runtimes.openvino import generator as ov_backend

from .factories import TINY, write_checkpoint

pytestmark = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (requirements.txt)")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "tiny.pth", TINY, seed=3)


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    t = time.perf_counter()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert time.perf_counter() - t < 2.0  # before loading or tracing anything
    assert "Traceback" not in err
    return err


def test_a_folder_as_the_output_is_refused_before_any_work(tiny: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "out.onnx").mkdir()
    assert "is a folder" in _refused(capsys, ["export", str(tiny), "-o", str(tmp_path / "out.onnx")])
    (tmp_path / "ir.bin").mkdir()  # the IR's weights would go there
    assert "ir.bin is a folder" in _refused(capsys, ["export", str(tiny), "-o", str(tmp_path / "ir.xml"), "--format", "openvino"])


def test_a_file_where_a_folder_should_be_is_refused_before_any_work(tiny: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "plain").write_text("a file")
    err = _refused(capsys, ["export", str(tiny), "-o", str(tmp_path / "plain" / "sub" / "out.onnx")])
    assert f"{tmp_path / 'plain'} is a file, not a folder" in err


def test_a_folder_that_refuses_writes_is_refused_before_any_work(tiny: Path, capsys) -> None:
    # /proc refuses new files even to root (tests run as root, whom chmod does not stop)
    assert "cannot write in /proc" in _refused(capsys, ["export", str(tiny), "-o", "/proc/gpen-export-test.onnx"])


def test_partial_files_of_killed_exports_go_and_live_ones_stay(tmp_path: Path) -> None:
    from gpen_core.runtimes.openvino.onnx_export import clean_stale_partials

    dead, me = _dead_pid(), 1  # pid 1 is alive for as long as this machine runs
    killed = [tmp_path / f".GPEN-BFR-256.{dead}.partial.onnx", tmp_path / f".ir.{dead}.partial.xml", tmp_path / f".ir.{dead}.partial.bin"]
    live = tmp_path / f".GPEN-BFR-512.{me}.partial.onnx"
    other = tmp_path / f".notes.{dead}.partial.txt"  # not an export's
    for p in (*killed, live, other):
        p.write_bytes(b"\0" * 1024)
    assert sorted(clean_stale_partials(tmp_path)) == sorted(killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_an_export_sweeps_the_leftovers_of_a_killed_one(tiny: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "exported" / "tiny.xml"
    out.parent.mkdir()
    left = out.parent / f".tiny.{_dead_pid()}.partial.bin"
    left.write_bytes(b"\0" * 4096)
    assert main(["export", str(tiny), "-o", str(out), "--format", "openvino"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.bin", "tiny.xml"]


def test_an_existing_output_is_kept_unless_overwrite_is_asked(tiny: Path, tmp_path: Path, capsys) -> None:
    """An export wrote over whatever file had the output's name (the IR's .bin beside it too), without asking."""
    mine = tmp_path / "model.bin"
    mine.write_bytes(b"someone's weights")
    err = _refused(capsys, ["export", str(tiny), "-o", str(tmp_path / "model.xml"), "--format", "openvino"])
    assert f"{mine} exists; add --overwrite" in err and mine.read_bytes() == b"someone's weights"
    assert main(["export", str(tiny), "-o", str(tmp_path / "model.xml"), "--format", "openvino", "--overwrite"]) == 0
    assert mine.read_bytes() != b"someone's weights"


def test_a_file_of_the_users_that_is_not_a_checkpoint_is_not_to_be_deleted(tmp_path: Path, capsys) -> None:
    """export's checkpoint path is the user's own file: say what it is not and what to check, not "delete it"."""
    notes = tmp_path / "notes.pth"
    notes.write_text("my notes, not weights\n")
    assert main(["export", str(notes), "-o", str(tmp_path / "ir.xml"), "--format", "openvino"]) == 3
    err = capsys.readouterr().err
    assert "is not a PyTorch checkpoint" in err and "Check that the path names a GPEN generator" in err, err
    assert "Delete" not in err and notes.read_text() == "my notes, not weights\n"
