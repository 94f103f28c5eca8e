"""The one rename-into-place helper (gpen_core.platform.durable): whole or nothing, flushed when asked,
its temporary beside the destination and swept when its writer was killed, links replaced not followed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpen_core.platform import durable
from gpen_core.platform.leftovers import sweep_partials

from .conftest import ROOT


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_failure_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    dst = tmp_path / "plan.json"
    dst.write_text("old")
    with pytest.raises(RuntimeError, match="disk went away"), durable.replacing(dst, sync=True) as tmp:
        tmp.write_bytes(b"half of the new")
        raise RuntimeError("disk went away")
    assert dst.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_a_write_into_a_missing_folder_fails_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        durable.write_bytes(tmp_path / "gone" / "x.png", b"png", sync=False)
    assert list(tmp_path.iterdir()) == []


def test_the_temporary_is_hidden_beside_the_destination_with_this_pid(tmp_path: Path) -> None:
    dst = tmp_path / "out.mp4"
    with durable.replacing(dst, sync=False) as tmp:
        assert tmp.parent == dst.parent  # same folder, same disk: the rename is atomic
        assert tmp.name == f".out.mp4.{os.getpid()}.partial"
        tmp.write_bytes(b"new")
        assert not dst.exists()  # nothing under the final name until the block ends
    assert dst.read_bytes() == b"new" and _leftovers(tmp_path) == []


def _recording_fsync(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        seen.append((st.st_ino, st.st_mode))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_sync_flushes_the_file_and_then_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recording_fsync(monkeypatch)
    dst = tmp_path / "measurements.json"
    durable.write_text(dst, json.dumps({"speeds": {"512": 1.5}}), sync=True)
    assert json.loads(dst.read_text()) == {"speeds": {"512": 1.5}}
    assert [ino for ino, _ in seen] == [dst.stat().st_ino, tmp_path.stat().st_ino]  # the file, then the rename
    assert stat.S_ISREG(seen[0][1]) and stat.S_ISDIR(seen[1][1])


def test_without_sync_nothing_is_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recording_fsync(monkeypatch)
    durable.write_bytes(tmp_path / "photo.png", b"png", sync=False)
    assert seen == [] and (tmp_path / "photo.png").read_bytes() == b"png"


def test_a_link_as_destination_is_replaced_and_its_target_never_written(tmp_path: Path) -> None:
    """The rename swaps the folder's entry: a link planted under the output's name cannot redirect the write
    (into the input, or out of a work folder). Following it would write wherever it points."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("not ours")
    dst = tmp_path / "plan.json"
    dst.symlink_to(target)
    durable.write_text(dst, "ours", sync=True)
    assert not dst.is_symlink() and dst.read_text() == "ours"
    assert target.read_text() == "not ours"


def test_a_link_planted_under_the_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("not ours")
    dst = tmp_path / "plan.json"
    durable.partial_path(dst).symlink_to(target)
    durable.write_text(dst, "ours", sync=False)
    assert dst.read_text() == "ours" and target.read_text() == "not ours"
    assert _leftovers(tmp_path) == []


_KILLED_WRITER = """
import os, signal, sys
from gpen_core.platform import durable
with durable.replacing(sys.argv[1], sync=False) as tmp:
    tmp.write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_a_killed_writers_temporary_is_swept_and_the_old_file_kept(tmp_path: Path) -> None:
    dst = tmp_path / "out.png"
    dst.write_bytes(b"old")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(dst)], cwd=ROOT)
    assert proc.wait(timeout=60) == -9
    left = tmp_path / f".out.png.{proc.pid}.partial"
    assert left.read_bytes() == b"half" and dst.read_bytes() == b"old"  # what kill -9 leaves: no clean-up ran
    durable.write_bytes(dst, b"new", sync=False)
    assert left.exists()  # a write into a folder of thousands does not list it
    assert sweep_partials(dst) == [left]  # the leftovers sweep knows it by its dead pid
    left.write_bytes(b"half")
    durable.write_bytes(dst, b"newer", sync=False, sweep=True)
    assert _leftovers(tmp_path) == [] and dst.read_bytes() == b"newer"


def test_a_second_thread_writing_the_same_file_waits_for_the_first(tmp_path: Path) -> None:
    """Both would use the pid's temporary name: without turns the second would truncate the first's half-written
    file, or rename it away under it."""
    dst = tmp_path / "speeds.json"
    second = threading.Thread(target=durable.write_bytes, args=(dst, b"second"), kwargs={"sync": False})
    with durable.replacing(dst, sync=False) as tmp:
        tmp.write_bytes(b"first, ")
        second.start()
        second.join(timeout=0.3)
        assert second.is_alive()  # waiting for its turn
        with tmp.open("ab") as f:
            f.write(b"whole")
    second.join(timeout=10)
    assert not second.is_alive() and dst.read_bytes() == b"second"
    assert _leftovers(tmp_path) == [] and durable._writers == {}  # the per-file locks are forgotten too
