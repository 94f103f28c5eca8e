"""Where a restore writes, checked before any frame, on every path (one pass, segments, photos): the input itself
by any link, devices and FIFOs, folders nobody can write, a photo named .mp4; a full disk said the same way on
every path; what killed runs leave (partials beside the output) swept; SIGTERM cleans up as Ctrl-C does.

Stand-in engines (no network): what is checked is the paths and the files, not the restore.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.cli import main  # noqa: E402
from gpen_core.errors import InputError  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.errors import VideoStopped  # noqa: E402
from gpen_core.video.output import WriteFailed  # noqa: E402
from gpen_core.video.resumable import LocalRunner, restore_in_segments  # noqa: E402
from gpen_core.video.segments import work_folder  # noqa: E402
from gpen_core.video.stream import restore_video  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .videoclips import gradient_frames, keyed_clip, keyed_frames, make_clip  # noqa: E402


class Inverts:
    """A stand-in engine: no faces, every frame inverted; counts the frames it was handed."""

    device = "cpu"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.frames, self.delay_s = 0, delay_s

    def detect(self, rgb: np.ndarray) -> list:
        time.sleep(self.delay_s)
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        self.frames += 1
        return FrameOut(255 - rgb, ())

    def close(self) -> None:
        pass


def _clip(path: Path, n: int = 50) -> Path:
    return keyed_clip(path, keyed_frames(n, np.full((48, 64, 3), 100, np.uint8)))


def _segmented(src: Path, dst: Path, engine: object) -> object:
    return restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=engine), "test", segment_seconds=1.0)


def _photo(path: Path) -> Path:
    from PIL import Image

    Image.fromarray(np.full((40, 40, 3), 128, np.uint8)).save(path)
    return path


@pytest.fixture
def no_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals come before any work: a restore, a model load or a frame fails the test."""
    from gpen_core import cli
    from gpen_core.restorer import Restorer

    def no_work(*a: object, **k: object) -> None:
        pytest.fail("work started although the output was refused")

    monkeypatch.setattr(Restorer, "__call__", no_work)
    monkeypatch.setattr(cli, "_load_engine", no_work)


@pytest.mark.parametrize("link", ["same name", "symbolic link", "hard link"])
def test_the_input_itself_is_refused_on_every_path(tmp_path: Path, link: str, no_restore: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = make_clip(tmp_path / "same.mp4", gradient_frames(6))
    before = src.read_bytes()
    dst = {"same name": lambda: src, "symbolic link": lambda: (tmp_path / "l.mp4").symlink_to(src) or tmp_path / "l.mp4",
           "hard link": lambda: os.link(src, tmp_path / "h.mp4") or tmp_path / "h.mp4"}[link]()
    for extra in ([], ["--segments"], ["--no-segments"]):
        assert main(["restore", str(src), "-o", str(dst), "--overwrite", *extra]) == 2
        assert "is the input itself" in capsys.readouterr().err
    with pytest.raises(InputError, match="the input itself"):
        restore_video(src, dst, engine=Inverts())
    with pytest.raises(InputError, match="the input itself"):
        _segmented(src, dst, Inverts())
    assert src.read_bytes() == before and not work_folder(dst).exists()


def test_a_photo_written_over_itself_is_refused(tmp_path: Path, no_restore: None, capsys: pytest.CaptureFixture[str]) -> None:
    photo = _photo(tmp_path / "p.png")
    os.link(photo, tmp_path / "h.png")
    before = photo.read_bytes()
    for out in (photo, tmp_path / "h.png", tmp_path):  # the file, a hard link, its own folder
        assert main(["restore", str(photo), "-o", str(out), "--overwrite"]) == 2
        assert "is the input itself" in capsys.readouterr().err
    assert photo.read_bytes() == before


def test_several_inputs_and_one_output_file_are_refused_naming_what_they_are(
    tmp_path: Path, no_restore: None, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _clip(tmp_path / "a.mp4", 6), _clip(tmp_path / "b.mp4", 6)
    p, q = _photo(tmp_path / "p.png"), _photo(tmp_path / "q.png")
    for inputs, name, counted in (((a, b), "o.mp4", "2 videos"), ((a, p, q), "o.mp4", "1 video and 2 photos"),
                                  ((a, p), "o.png", "1 video and 1 photo"), ((p, q), "o.png", "2 photos")):
        out = tmp_path / name
        assert main(["restore", *map(str, inputs), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{counted} need an output folder, not the file {out}: give a folder for -o (made if missing), " \
               f"e.g. {tmp_path / 'o'}" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["/proc/self", "/sys/kernel"])  # kernel file systems: even root cannot create files
def test_an_output_folder_nobody_can_write_is_refused_before_any_frame(where: str, tmp_path: Path, no_restore: None,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src = _clip(tmp_path / "in.mp4", 10)
    out = Path(where) / "o.mp4"
    for extra in ([], ["--segments"]):
        assert main(["restore", str(src), "-o", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and f"cannot write {out}" in err and "Traceback" not in err
    for run in (restore_video, _segmented):
        engine = Inverts()
        with pytest.raises(InputError, match="cannot write"):
            run(src, out, engine=engine) if run is restore_video else run(src, out, engine)
        assert engine.frames == 0


def test_a_device_or_fifo_as_output_is_refused(tmp_path: Path, no_restore: None, capsys: pytest.CaptureFixture[str]) -> None:
    src = _clip(tmp_path / "in.mp4", 10)
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    for out, kind in (("/dev/full", "a device"), (str(fifo), "a FIFO")):
        assert main(["restore", str(src), "-o", out, "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert f"the output {out} is {kind}" in err and "Traceback" not in err
    assert fifo.is_fifo()  # left as it was
    photo = _photo(tmp_path / "p.png")
    os.mkfifo(tmp_path / "pipe.png")
    assert main(["restore", str(photo), "-o", str(tmp_path / "pipe.png"), "--overwrite"]) == 2
    assert "is a FIFO" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["p.png", "anim.gif"])
def test_a_photo_with_a_video_output_name_is_refused_and_nothing_made(tmp_path: Path, name: str, no_restore: None,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    photo = tmp_path / name
    frames = [Image.fromarray(np.full((40, 40, 3), v, np.uint8)) for v in (50, 150)]
    frames[0].save(photo, save_all=True, append_images=frames[1:]) if name.endswith(".gif") else frames[0].save(photo)
    assert main(["restore", str(photo), "-o", str(tmp_path / "x.mp4")]) == 2
    err = capsys.readouterr().err
    assert "x.mp4 names a video" in err and "x.png" in err
    assert not (tmp_path / "x.mp4").exists()


class _FullDisk:
    """``av.open`` whose output files named like ``pattern`` fail with ENOSPC after ``after`` packets, as a disk that
    fills up does (PyAV raises av.error.OSError, errno 28, from mux)."""

    def __init__(self, real: object, pattern: str, after: int) -> None:
        self.real, self.pattern, self.after = real, pattern, after

    def __call__(self, file: object, mode: str = "r", *a: object, **k: object) -> object:
        c = self.real(file, mode, *a, **k)  # type: ignore[operator]
        return _Filling(c, self.after) if "w" in mode and self.pattern in Path(str(file)).name else c


class _Filling:
    def __init__(self, container: object, after: int) -> None:
        self._c, self._left = container, after

    def mux(self, packet: object) -> None:
        self._left -= 1
        if self._left < 0:
            av.error.err_check(-errno.ENOSPC, self._c.name)
        self._c.mux(packet)

    def __getattr__(self, name: str) -> object:
        return getattr(self._c, name)


@pytest.mark.parametrize("fills", ["in a segment", "in the join", "in one pass"])
def test_a_full_disk_is_said_the_same_way_on_every_path(fills: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _clip(tmp_path / "in.mp4")
    dst = tmp_path / "out.mp4"
    pattern = {"in a segment": ".seg-00001", "in the join": ".out.mp4", "in one pass": ".out.mp4"}[fills]
    monkeypatch.setattr(av, "open", _FullDisk(av.open, pattern, after=5))
    with pytest.raises(WriteFailed) as caught:
        restore_video(src, dst, engine=Inverts()) if fills == "in one pass" else _segmented(src, dst, Inverts())
    msg = str(caught.value)
    assert "No space left on device" in msg and "disk has space" in msg and caught.value.exit_code == 2
    assert not dst.exists() and not list(tmp_path.glob(".out.mp4.*.partial"))
    if fills != "in one pass":
        kept = sorted(p.name for p in work_folder(dst).glob("seg-*.mp4"))
        assert kept == (["seg-00000.mp4"] if fills == "in a segment" else ["seg-00000.mp4", "seg-00001.mp4"])


def test_the_cli_says_what_a_full_disk_left_and_how_to_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.scaleout import cli as scaleout_cli

    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    monkeypatch.setattr(av, "open", _FullDisk(av.open, ".seg-00001", after=5))
    args = argparse.Namespace(segment_seconds=1.0, ray=False, address=None, segments=True, crf=18, json=False, fresh=False,
                              start=None, end=None)
    with pytest.raises(WriteFailed) as caught:
        scaleout_cli.restore_segmented(args, src, dst, LocalRunner(None, RestoreOptions(), 18, engine=Inverts()),
                                       lambda d, t: None)
    assert "No space left on device" in str(caught.value)
    assert f"The 1 finished segment is kept in {work_folder(dst)}; run the same command again to resume" in str(caught.value)


def test_partials_of_killed_runs_are_swept_and_a_running_ones_kept(tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4", 10), tmp_path / "out.mp4"
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "30"])
    try:
        dead_partial = tmp_path / f".out.mp4.{gone.pid}.partial"  # left by kill -9 (of a one pass or a join)
        live_partial = tmp_path / f".out.mp4.{alive.pid}.partial"  # another run writing this output now
        others = [tmp_path / f".other.mp4.{gone.pid}.partial", tmp_path / ".out.mp4.notapid.partial"]
        for p in (dead_partial, live_partial, *others):
            p.write_bytes(b"half")
        restore_video(src, dst, engine=Inverts())
        assert not dead_partial.exists() and live_partial.exists() and all(p.exists() for p in others)
        dead_partial.write_bytes(b"half")
        _segmented(src, dst, Inverts())  # the join sweeps too
        assert not dead_partial.exists() and live_partial.exists()
    finally:
        alive.kill()
        alive.wait()


def test_leftover_temp_folders_of_dead_workers_are_swept(tmp_path: Path) -> None:
    from gpen_core.platform.leftovers import sweep_folders

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead, live, other = tmp_path / f"gpen-seg-{gone.pid}-abc", tmp_path / f"gpen-seg-{os.getpid()}-x", tmp_path / "gpen-seg-x"
    for d in (dead, live, other):
        (d / "sub").mkdir(parents=True)
    assert sweep_folders(tmp_path, "gpen-seg-") == [dead]
    assert live.is_dir() and other.is_dir()


_STAND_IN_CLI = """
import sys, time
from functools import partial
from gpen_core import cli, restorer
from gpen_core.video import resumable, stream
from gpen_core.video.engine_seam import FrameOut

class Slow:
    device = "cpu"
    def detect(self, rgb):
        time.sleep(0.05)
        return []
    def restore(self, rgb, d):
        return FrameOut(rgb, ())
    def close(self):
        pass

real = stream.restore_video
stream.restore_video = lambda *a, **k: real(*a, engine=Slow(), **k)
resumable.LocalRunner = partial(resumable.LocalRunner, engine=Slow())
cli._load_engine = lambda: None
restorer.Restorer = lambda **k: None
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("how", ["one pass", "segments"])
def test_sigterm_cleans_up_as_ctrl_c_does(how: str, tmp_path: Path) -> None:
    src, dst = _clip(tmp_path / "in.mp4", 75), tmp_path / "out.mp4"
    extra = ["--no-segments"] if how == "one pass" else ["--segments", "--segment-seconds", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _STAND_IN_CLI, "restore", str(src), "-o", str(dst), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = (lambda: list(tmp_path.glob(".out.mp4.*.partial"))) if how == "one pass" else (
        lambda: (work_folder(dst) / "seg-00000.mp4").exists())
    deadline = time.monotonic() + 60
    while not started() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and not dst.exists()
    assert not [p for p in tmp_path.rglob("*.partial")]  # the partial removed, as Ctrl-C does
    if how == "segments":
        assert "finished segment" in err and "run the same command again" in err
        assert (work_folder(dst) / "seg-00000.mp4").exists()


def test_a_stopped_run_counts_only_its_own_segment_files(tmp_path: Path) -> None:
    """The message after a stop counted every seg-*.mp4 in the work folder: a user's seg-notes.mp4 and a folder
    under a segment's name were claimed as finished segments."""
    from gpen_core.scaleout.cli import kept_segments

    (tmp_path / "seg-00000.mp4").write_bytes(b"x")
    (tmp_path / "seg-notes.mp4").write_bytes(b"mine")
    (tmp_path / "seg-00001.mp4").mkdir()
    assert kept_segments(tmp_path).startswith(f"the 1 finished segment is kept in {tmp_path}")


@pytest.mark.parametrize("how", ["one pass", "segments"])
def test_what_the_run_did_before_its_first_frame_leads_the_clips_notes_on_every_path(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The conversion the run weighed before its first frame (here: not made, so the generator stays on torch) is a
    change from what ``auto`` would run: a one-pass clip's record and summary said so, a clip in segments did not."""
    import json

    from gpen_core import cli, restorer
    from gpen_core.engine.convert_first import ConvertFirst
    from gpen_core.video import resumable, stream

    note = "GPEN-BFR-512 was not converted for OpenVINO before this run: a stand-in reason"
    monkeypatch.setattr(cli, "convert_before_clips", lambda args, videos, say: ConvertFirst("short run", note))
    monkeypatch.setattr(cli, "_load_engine", lambda: None)
    monkeypatch.setattr(restorer, "Restorer", lambda **k: None)
    monkeypatch.setattr(resumable, "LocalRunner", partial(LocalRunner, engine=Inverts()))
    monkeypatch.setattr(stream, "restore_video", partial(restore_video, engine=Inverts()))
    src, dst = _clip(tmp_path / "in.mp4"), tmp_path / "out.mp4"
    extra = ["--no-segments"] if how == "one pass" else ["--segments", "--segment-seconds", "1"]
    assert main(["restore", str(src), "-o", str(dst), "--json", *extra]) == 0
    out = capsys.readouterr()
    [rec] = [r for r in map(json.loads, out.out.splitlines()) if "video" in r]
    assert rec["video"]["notes"][0] == note
    assert f"note: {note}" in out.err
    assert rec["video"]["crf"] == 18  # no --crf: the default, in one pass and in segments alike


@pytest.mark.parametrize("how", ["one pass", "segments"])
def test_a_turned_clip_written_upright_says_so_on_every_path(how: str, tmp_path: Path) -> None:
    """A phone clip shown turned is written upright with no rotation tag: one pass said so, segments did not."""
    src, dst = make_clip(tmp_path / "phone.mp4", gradient_frames(30), rotation=90), tmp_path / "out.mp4"
    result = restore_video(src, dst, engine=Inverts()) if how == "one pass" else _segmented(src, dst, Inverts())
    assert result.rotation and [n for n in result.notes if "frames were restored and written upright" in n], result.notes


@pytest.mark.parametrize("flag", [["--aligned"], ["--mask", "m.png"]])  # --orientations: test_video_faces
def test_a_photos_flag_given_with_a_clip_is_refused_not_dropped(flag: list[str], tmp_path: Path, no_restore: None,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The clip's options left these out, so the clip ran as if they were not asked (the engine's own refusal of
    aligned frames was never reached from the command line)."""
    monkeypatch.chdir(tmp_path)
    _photo(tmp_path / "m.png")
    src = _clip(tmp_path / "in.mp4", 6)
    assert main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), *flag]) == 2
    err = capsys.readouterr().err
    assert f"{flag[0]} is for photos" in err and "in.mp4" in err, err


@pytest.mark.parametrize("flag", [["--start", "2"], ["--end", "2"], ["--tracks", "1"], ["--no-audio"], ["--segments"],
                                  ["--segment-seconds", "5"], ["--fresh"], ["--crf", "20"], ["--identity-every", "3"]])
def test_a_clips_flag_given_with_photos_only_is_refused_not_dropped(flag: list[str], tmp_path: Path, no_restore: None,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The photos' options have no place for these: the photo ran as if they were not asked."""
    photo = _photo(tmp_path / "p.png")
    assert main(["restore", str(photo), "-o", str(tmp_path / "out.png"), *flag]) == 2
    err = capsys.readouterr().err
    assert f"{flag[0]} is for videos" in err and "p.png" in err, err


@pytest.mark.parametrize("flags, said", [(["--aligned", "--detector", "resnet50"], "--detector is for finding faces"),
                                         (["--aligned", "--orientations"], "--orientations is for finding faces"),
                                         (["--aligned", "--no-face-check"], "--no-face-check is for finding faces"),
                                         (["--aligned", "--threshold", "0.5"], "--threshold is for finding faces"),
                                         (["--aligned", "--max-faces", "3"], "--max-faces is for finding faces")])
def test_a_flag_this_run_would_not_use_is_refused_not_dropped(flags: list[str], said: str, tmp_path: Path,
                                                              no_restore: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Face finding's flags with --aligned (no detection runs): the photo ran as if they were not asked, and nothing
    said so."""
    photo = _photo(tmp_path / "p.png")
    assert main(["restore", str(photo), "-o", str(tmp_path / "out.png"), *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "leave it out" in err, err


def test_a_face_asked_for_that_the_clip_never_shows_is_said(tmp_path: Path) -> None:
    """``--tracks 2`` on a clip with no second face restored nothing for it, and the result did not say so."""
    from gpen_core.video.options import VideoOptions

    src, dst = _clip(tmp_path / "in.mp4", 6), tmp_path / "out.mp4"
    result = restore_video(src, dst, engine=Inverts(), video=VideoOptions(tracks=frozenset({1})))
    assert [n for n in result.notes if n.startswith("face 2 (asked for) was not in the restored frames")], result.notes


def test_a_photos_bad_output_in_a_run_with_clips_is_refused_before_any_clip(
    tmp_path: Path, no_restore: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder of clips and photos restored every clip (hours, for a film) before it found that a photo's
    output could not be written; every output is checked before any model loads."""
    src = tmp_path / "in"
    src.mkdir()
    _clip(src / "clip.mp4", 6)
    _photo(src / "p.png")
    out = tmp_path / "out"
    (out / "p.png").mkdir(parents=True)  # a folder where the photo's result would go
    assert main(["restore", str(src), "-o", str(out), "--mode", "low"]) == 2
    err = capsys.readouterr().err
    assert "is a folder, not a file" in err and "p.png" in err, err
    assert not (out / "clip.mp4").exists()


@pytest.mark.parametrize("flags", [["--no-segments", "--segment-seconds", "2"], ["--no-segments", "--fresh"],
                                   ["--start", "0.1", "--segment-seconds", "2"], ["--end", "0.1", "--fresh"],
                                   ["--segments", "--start", "0.1"], ["--tracks", "1", "--segments"],
                                   ["--segment-seconds", "0"], ["--segments", "--segment-seconds", "-3"]])
def test_segment_flags_that_cannot_apply_are_refused_before_any_work(flags: list[str], tmp_path: Path, no_restore: None,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--segment-seconds or --fresh beside --no-segments or a trim restored the clip in one pass as if they were
    not given; --segments beside a trim was refused only once the engine had loaded."""
    src = _clip(tmp_path / "in.mp4", 6)
    assert main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), *flags]) == 2
    err = capsys.readouterr().err
    named = [f for f in flags if f.startswith("--") and f not in ("--no-segments", "--segments")]
    assert all(f in err for f in named) and ("leave out" in err or "more than 0" in err) and "Traceback" not in err, err
    if flags == ["--tracks", "1", "--segments"]:  # face numbers count across one pass; each segment would renumber
        assert "--segments is for a whole clip in segments, and --tracks restores in one pass" in err, err
    assert not (tmp_path / "out.mp4").exists()


def test_segment_seconds_or_fresh_on_a_short_clip_asks_for_segments(tmp_path: Path) -> None:
    """A clip under the segments' default length, given --segment-seconds 2, was restored in one pass."""
    from gpen_core.scaleout.cli import wants_segments

    src = _clip(tmp_path / "in.mp4", 6)
    base = dict(segments=None, ray=False, start=None, end=None, tracks=None, segment_seconds=None, fresh=False)
    assert not wants_segments(argparse.Namespace(**base), src)
    assert wants_segments(argparse.Namespace(**{**base, "segment_seconds": 2.0}), src)
    assert wants_segments(argparse.Namespace(**{**base, "fresh": True}), src)


def test_a_clip_is_said_long_once_measured_and_only_where_its_length_chose_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 6 s clip given --segment-seconds was said to be "6 s long, so restored in segments" (of 10 minutes or more),
    and a long clip was opened twice for its length: once to choose segments, once to say so."""
    from types import SimpleNamespace

    from gpen_core.options import RestoreOptions
    from gpen_core.scaleout import cli as scaleout_cli
    from gpen_core.video import resumable

    monkeypatch.setattr(resumable, "restore_in_segments", lambda *a, **k: SimpleNamespace(notes=(), to_json=dict))
    monkeypatch.setattr(scaleout_cli, "print_segmented", lambda *a, **k: None)
    src = Path("in.mp4")  # never opened: its length is the stand-in's
    base = dict(segments=None, ray=False, start=None, end=None, tracks=None, segment_seconds=None, fresh=False,
                crf=18, json=False)
    measured: list[Path] = []
    monkeypatch.setattr(scaleout_cli, "_duration", lambda path: measured.append(path) or 600.0)
    asked = argparse.Namespace(**{**base, "segment_seconds": 2.0})
    local = LocalRunner(None, RestoreOptions(), 18)
    assert scaleout_cli.restore_if_segmented(asked, src, tmp_path / "out.mp4", local, print)
    assert "s long" not in capsys.readouterr().err and not measured  # asked: its length is not why
    assert scaleout_cli.restore_if_segmented(argparse.Namespace(**base), src, tmp_path / "out.mp4", local, print)
    assert capsys.readouterr().err.startswith("in.mp4: 600 s long, so restored in segments")
    assert measured == [src]


def test_a_folder_named_as_the_segments_manifest_is_refused_naming_it(tmp_path: Path) -> None:
    """--ray appends a line per segment to manifest.jsonl beside the output: a folder by that name raised
    IsADirectoryError (a traceback) where the photo batch says what is in the way."""
    from gpen_core.options import RestoreOptions
    from gpen_core.scaleout.cli import restore_segmented

    (tmp_path / "manifest.jsonl").mkdir()
    args = argparse.Namespace(segment_seconds=1.0, ray=True, address=None, workers=1, gpus_per_worker=0.0,
                              models_dir=None, device="cpu", crf=18, segments=True, fresh=False, json=False)
    with pytest.raises(InputError, match=r"manifest\.jsonl is a folder, not a file"):
        restore_segmented(args, _clip(tmp_path / "in.mp4", 6), tmp_path / "out.mp4",
                          LocalRunner(None, RestoreOptions(), 18), lambda done, total: None)
    assert not (tmp_path / "out.mp4").exists()


def test_a_start_past_the_clips_end_says_so(tmp_path: Path) -> None:
    """``--start 5`` on a clip of 0.24 s was told the file is "empty or damaged from its start"."""
    from gpen_core.video.options import VideoOptions

    src = _clip(tmp_path / "in.mp4", 6)
    with pytest.raises(InputError, match=r"between 5 s and the end starts at or past the clip's end \(it is 0\.24 s long\)"):
        restore_video(src, tmp_path / "out.mp4", engine=Inverts(), video=VideoOptions(start_s=5.0))
    with pytest.raises(InputError, match="damaged from its start"):  # a real gap in the middle keeps that wording
        restore_video(src, tmp_path / "out.mp4", engine=Inverts(), video=VideoOptions(start_s=0.05, end_s=0.06))
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("flags", [["--mode", "faces-only"], ["--upscale", "2"], ["--task", "colorize"],
                                   ["--identity-alpha", "0.5"], ["--tile", "256"], ["--upscaler", "realesrnet_x2"]])
def test_what_a_clip_cannot_take_is_refused_before_any_work(flags: list[str], tmp_path: Path, no_restore: None,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """faces-only, upscaling or another task on a clip were refused only once the engine had loaded and, on weights
    placed by hand, once a long clip's generator had been converted for OpenVINO (a minute or more)."""
    src = _clip(tmp_path / "in.mp4", 6)
    assert main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err, err
    if flags[0] in ("--upscale", "--task"):  # the fix for what was asked only, never an 'aligned' nobody set
        assert ("use upscale 1" in err) is (flags[0] == "--upscale") and "'aligned'" not in err, err
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("flags", [["--address", "127.0.0.1:1"], ["--workers", "3"], ["--gpus-per-worker", "0.5"]])
def test_a_ray_flag_without_ray_is_refused_not_dropped(flags: list[str], tmp_path: Path, no_restore: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--address HEAD:6379 --workers 16`` without --ray restored a film here, in one process, as if not given."""
    for src, out in ((_clip(tmp_path / "in.mp4", 6), tmp_path / "o.mp4"), (_photo(tmp_path / "p.png"), tmp_path / "o.png")):
        assert main(["restore", str(src), "-o", str(out), *flags]) == 2
        err = capsys.readouterr().err
        assert f"{flags[0]} is for --ray runs" in err and "Traceback" not in err, err
        assert not out.exists()


@pytest.mark.parametrize("how", ["one pass", "segments"])
def test_ctrl_c_ends_the_batch_naming_the_clip_what_was_removed_and_how_to_resume(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in a one-pass clip printed only "interrupted": not which clip, nor that its partial output was removed,
    nor that a clip in segments resumes where it stopped. In segments it said so, then went on to the next clip."""
    from gpen_core import cli, restorer
    from gpen_core.scaleout import cli as scaleout_cli
    from gpen_core.video import stream

    clips = [_clip(tmp_path / f"{n}.mp4", 3) for n in ("a", "b")]
    handed: list[str] = []

    def interrupted(src: Path, *a: object, **k: object) -> None:
        handed.append(Path(src).name)
        raise KeyboardInterrupt

    def stopped(args: object, src: Path, *a: object, **k: object) -> None:  # what a stopped segmented run raises
        handed.append(Path(src).name)
        raise VideoStopped("stopped: the 1 finished segment is kept in …; run the same command again to resume")

    monkeypatch.setattr(stream, "restore_video", interrupted)
    monkeypatch.setattr(scaleout_cli, "restore_if_segmented", stopped if how == "segments" else lambda *a: False)
    monkeypatch.setattr(cli, "_load_engine", lambda: None)
    monkeypatch.setattr(restorer, "Restorer", lambda **k: None)
    assert main(["restore", *map(str, clips), "-o", str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert handed == ["a.mp4"]  # the batch stops at Ctrl-C
    assert f"error: {clips[0]}: stopped" in err and "Traceback" not in err
    assert ("run the same command again" if how == "segments" else "partial output was removed") in err
    if how == "one pass":
        assert "--segments" in err and not (tmp_path / "out").exists()  # nor the folder made for the run
