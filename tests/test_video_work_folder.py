"""The segments' work folder and its plan under hostile or careless hands: a link in its place, two runs at once,
an edited plan.json, a swapped segment file, a replaced input. Stand-in engines (no network); small clips."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.resumable import LocalRunner, restore_in_segments  # noqa: E402
from gpen_core.video.segments import work_folder  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .videoclips import frame_index, keyed_clip, keyed_frames, make_clip, read_clip  # noqa: E402

N = 40  # 25 fps, a keyframe a second: segments of 25 and 15 frames


class Invert:
    """A stand-in engine: no faces, each frame inverted; ``die_at`` raises KeyboardInterrupt there (as Ctrl-C),
    ``hold_at`` waits there until ``go`` is set (a run caught mid-segment)."""

    device = "cpu"

    def __init__(self, die_at: int | None = None, hold_at: int | None = None) -> None:
        self.die_at, self.hold_at = die_at, hold_at
        self.writes: list[int] = []
        self.held, self.go = threading.Event(), threading.Event()

    def detect(self, rgb: np.ndarray) -> list:
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        i = frame_index(rgb)
        if i == self.die_at:
            raise KeyboardInterrupt
        if i == self.hold_at:
            self.held.set()
            assert self.go.wait(60)
        self.writes.append(i)
        return FrameOut(255 - rgb, ())

    def close(self) -> None:
        pass


def _clip(path: Path, grey: int = 110) -> Path:
    return keyed_clip(path, keyed_frames(N, np.full((48, 64, 3), grey, np.uint8)), audio=False)


def _run(src: Path, dst: Path, engine: Invert, **kw: object):
    return restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=engine), "test",
                               segment_seconds=1.0, **kw)


def _interrupted(src: Path, dst: Path) -> Path:
    """A run stopped in its second segment: the work folder with the plan and segment 0."""
    with pytest.raises(KeyboardInterrupt):
        _run(src, dst, Invert(die_at=30))
    return work_folder(dst)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_work_folder_that_is_a_link_is_refused_and_nothing_behind_it_is_touched(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    theirs = tmp_path / "my-edits"
    theirs.mkdir()
    (theirs / "movie.mkv.partial").write_bytes(b"a render in progress")
    (theirs / "seg-00000.mp4").write_bytes(b"someone else's segment")
    before = _tree(theirs)
    work_folder(dst).symlink_to(theirs)
    for fresh in (False, True):
        with pytest.raises(InputError, match="symbolic link") as err:
            _run(src, dst, Invert(), fresh=fresh)
        assert f"rm '{work_folder(dst)}'" in str(err.value)  # what to do: remove the link, not what it points to
        assert _tree(theirs) == before  # nothing deleted, overwritten or added (no plan) behind the link
    assert not dst.exists()


def test_only_the_runs_own_files_are_deleted(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    (folder / "movie.mkv.partial").write_bytes(b"the user's")  # not the run's by name
    (folder / "seg-00007.mp4").write_bytes(b"not in the plan")  # the run's pattern, but the plan has 2 segments
    result = _run(src, dst, Invert(), fresh=True)
    assert result.frames == N and read_clip(dst)["times"][-1] == pytest.approx((N - 1) / 25)
    assert sorted(p.name for p in folder.iterdir()) == ["movie.mkv.partial", "seg-00007.mp4"]  # kept, folder too
    assert any(str(folder) in n and "did not write" in n for n in result.notes)
    # A new plan is not started among files the run did not write (it would write over seg-00000.mp4 there).
    (folder / "seg-00000.mp4").write_bytes(b"someone else's")
    with pytest.raises(InputError, match="did not write"):
        _run(src, tmp_path / "out.mp4", Invert(), fresh=True)
    assert (folder / "seg-00000.mp4").read_bytes() == b"someone else's"


@pytest.mark.parametrize("name", ["seg-00001.mp4", "plan.json"])
def test_a_folder_under_one_of_the_runs_names_is_refused_not_deleted(tmp_path: Path, name: str) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    (folder / name).unlink(missing_ok=True)  # the run stopped in segment 1: its file never was
    (folder / name).mkdir()
    (folder / name / "keep.txt").write_text("the user's")
    for fresh in (False, True):
        with pytest.raises(InputError, match=f"{name}.*(folder|Is a directory|move them)"):
            _run(src, dst, Invert(), fresh=fresh)
        assert (folder / name / "keep.txt").read_text() == "the user's"


def test_a_second_run_on_the_same_output_is_refused_naming_the_first(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    first = Invert(hold_at=30)
    done: dict[str, object] = {}
    t = threading.Thread(target=lambda: done.setdefault("result", _run(src, dst, first)))
    t.start()
    try:
        assert first.held.wait(60)
        for fresh in (False, True):  # --fresh must not pull the segments from under the running one either
            with pytest.raises(InputError, match=f"process {os.getpid()} ") as err:
                _run(src, dst, Invert(), fresh=fresh)
            assert "pytest" in str(err.value) or "python" in str(err.value)  # its command, read from /proc
    finally:
        first.go.set()
        t.join(60)
    assert done["result"].frames == N  # the first run was not disturbed
    assert [frame_index(255 - f) for f in read_clip(dst)["frames"]] == list(range(N))


def test_the_cli_says_which_process_holds_the_folder_and_a_killed_holder_leaves_no_lock(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from gpen_core.video.work_dir import "
         "open_work_folder; w = open_work_folder(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)", str(dst)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cli = subprocess.run([sys.executable, "-m", "gpen_core", "restore", str(src), "-o", str(dst), "--segments",
                              "--segment-seconds", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert cli.returncode == 2, cli.stderr[-2000:]
        assert f"process {holder.pid} ({sys.executable} -c import sys" in cli.stderr and "Traceback" not in cli.stderr
    finally:
        holder.kill()  # as kill -9: the kernel drops its lock
        holder.wait(30)
    assert _run(src, dst, Invert()).frames == N


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d["segments"][1].update(index="../x"), "index"),
    (lambda d: d.update(time_base="1/0"), "time base"),
    (lambda d: d.update(frames="40"), "frames"),
    (lambda d: d["segments"][0].pop("tail_pts"), "lacks"),
    (lambda d: d["segments"][1].update(frames=-15), "negative"),
    (lambda d: d["finished"][0].update(sha256=7), "sha256"),
    (lambda d: d["segments"].pop(), "run to the clip's end"),  # the last segment removed
    (lambda d: d.update(version=1), "version is 1"),  # an older program's plan
])
def test_an_edited_plan_is_refused_with_the_fix_and_nothing_is_deleted(tmp_path: Path, edit, why: str) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    plan = json.loads((folder / "plan.json").read_text())
    edit(plan)
    (folder / "plan.json").write_text(json.dumps(plan))
    before = _tree(folder)
    with pytest.raises(InputError, match="--fresh") as err:
        _run(src, dst, Invert())
    assert why in str(err.value) and "plan.json" in str(err.value)
    assert _tree(folder) == before and not dst.exists()
    engine = Invert()
    assert _run(src, dst, engine, fresh=True).frames == N and sorted(engine.writes) == list(range(N))


def test_a_plan_that_is_not_json_is_refused_with_the_fix(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    (folder / "plan.json").write_text('{"version": 2, "segments": [')
    with pytest.raises(InputError, match="not JSON.*--fresh"):
        _run(src, dst, Invert())
    assert (folder / "seg-00000.mp4").exists()


def test_a_29_97_fps_clip_resumes_every_finished_segment(tmp_path: Path) -> None:
    """Its segments' first frames sit at the plan's times to the tick, so the resume's check keeps them all."""
    src = make_clip(tmp_path / "in.mp4", keyed_frames(N, np.full((48, 64, 3), 110, np.uint8)), gop=10,
                    time_base=Fraction(1, 30000), pts=[i * 1001 for i in range(N)])
    dst = tmp_path / "out.mp4"
    with pytest.raises(KeyboardInterrupt):
        restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=Invert(die_at=35)), "test",
                            segment_seconds=0.5)
    engine = Invert()
    result = restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=engine), "test",
                                 segment_seconds=0.5)
    assert result.segments_kept == 2 and sorted(engine.writes) == list(range(20, N))  # frames 0-9 and 10-19 kept


def test_a_plan_that_covers_less_than_the_input_is_refused_and_the_summary_counts_what_was_written(tmp_path: Path) -> None:
    """The last segment removed and the plan made consistent without it: the input itself shows it."""
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    plan = json.loads((folder / "plan.json").read_text())
    plan["segments"].pop()
    plan["segments"][0].update(end_pts=None, tail_pts=None)
    plan["frames"] = 25
    (folder / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(InputError, match="the input has 40 video frames, the plan counted 25.*--fresh"):
        _run(src, dst, Invert())
    result = _run(src, dst, Invert(), fresh=True)
    assert result.frames == len(read_clip(dst)["frames"]) == N


def test_a_swapped_segment_file_is_redone_with_a_note(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    other = _interrupted(_clip(tmp_path / "other.mp4", grey=30), tmp_path / "other-out.mp4")
    folder = _interrupted(src, dst)
    shutil.copyfile(other / "seg-00000.mp4", folder / "seg-00000.mp4")  # the same frames and times, other pictures
    engine = Invert()
    result = _run(src, dst, engine)
    assert sorted(engine.writes) == list(range(N)) and result.segments_kept == 0
    assert any("segment 0's file (seg-00000.mp4) changed since it was written" in n for n in result.notes)
    frames = read_clip(dst)["frames"]
    assert max(abs(float(f[20:, :].mean()) - (255 - 110)) for f in frames) < 4  # every frame the input's own


def test_a_finished_segment_the_plan_had_no_time_to_record_is_kept(tmp_path: Path) -> None:
    """kill -9 between a segment's rename and the plan's update: the file is whole, so it is kept (and recorded)."""
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    folder = _interrupted(src, dst)
    plan = json.loads((folder / "plan.json").read_text())
    plan["finished"] = []
    (folder / "plan.json").write_text(json.dumps(plan))
    engine = Invert()
    result = _run(src, dst, engine)
    assert result.segments_kept == 1 and sorted(engine.writes) == list(range(25, N)) and result.frames == N


def test_a_replaced_input_of_the_same_size_and_time_is_not_resumed(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4", 110), tmp_path / "out.mp4"
    replacement = _clip(tmp_path / "new.mp4", 30)  # the same frames and times, other pictures
    _same_size(src, replacement)
    folder = _interrupted(src, dst)
    st = src.stat()
    os.replace(replacement, src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (src.stat().st_size, src.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    before = _tree(folder)
    with pytest.raises(InputError, match="content has changed.*--fresh"):
        _run(src, dst, Invert())
    assert _tree(folder) == before


def _same_size(*clips: Path) -> None:
    """Pad MP4s to one size with a trailing ``free`` box, which every reader skips."""
    size = max(p.stat().st_size for p in clips) + 16
    for p in clips:
        pad = size - p.stat().st_size
        with open(p, "ab") as f:
            f.write(struct.pack(">I4s", pad, b"free") + bytes(pad - 8))
