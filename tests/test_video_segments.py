"""Long clips in segments: cut at keyframes, steadied across seams, joined without re-encoding, resumed.

Stand-in engines here (no network); the CLI killed with ``kill -9`` and resumed runs the real ``low``
restore in test_video_resume.py, and Ray workers in test_ray.py.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_core.faces.detect import Detection  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video import segments as segments_module  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.resumable import LocalRunner, restore_in_segments, settings_text  # noqa: E402
from gpen_core.video.segments import plan_segments, work_folder  # noqa: E402
from gpen_core.video.stream import restore_video  # noqa: E402

from .videoclips import (  # noqa: E402
    frame_index, gradient_frames, keyed_clip, keyed_frames, keyframe_times, make_clip, read_clip,
)

PAN = 0.5  # px a frame the made-up face moves
NOISE = 1.0  # px of made-up detector jitter


class Shaky:
    """A stand-in engine: one face panning PAN px a frame with NOISE px of jitter fixed per frame (read from the
    frame's index rows), and a restore that records the steadied landmarks it was handed and inverts the frame."""

    device = "cpu"

    def __init__(self) -> None:
        self.used: dict[int, np.ndarray] = {}
        self.writes: list[int] = []

    def detect(self, rgb: np.ndarray) -> list:
        i = frame_index(rgb)
        jitter = np.random.default_rng(i).normal(0, NOISE, (5, 2))
        base = np.array([[20, 20], [36, 20], [28, 28], [22, 36], [34, 36]], float) + [PAN * i, 0]
        lm = (base + jitter).astype(np.float32)
        lm.setflags(write=False)
        x0 = 10 + PAN * i
        return [Detection((x0, 10.0, x0 + 36, 46.0), 0.99, lm)]

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        i = frame_index(rgb)
        assert len(detections) == 1
        self.used[i] = np.asarray(detections[0].landmarks, float)
        self.writes.append(i)
        return FrameOut(255 - rgb, ())

    def close(self) -> None:
        pass


def _clip(tmp: Path, n: int = 70, audio: bool = True) -> Path:
    base = np.full((64, 96, 3), 110, np.uint8)
    return keyed_clip(tmp / "in.mp4", keyed_frames(n, base), audio=audio)


def _segmented(src: Path, dst: Path, engine: object, **kw: object):
    return restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=engine), "test", **kw)


def _mean_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(int) - b.astype(int)).mean())


def _movement(used: dict[int, np.ndarray], pairs: list[int]) -> float:
    """Mean landmark movement from frame i to i+1 with the pan taken out (px)."""
    return float(np.mean([np.linalg.norm(used[i + 1] - used[i] - [PAN, 0], axis=1).mean() for i in pairs]))


@pytest.mark.parametrize(("gop", "starts"), [
    # Keyframes every 0.8 s; targets 1.0 → 0.8 (0.2 off, not 1.6), 1.8 → 1.6, 2.6 → 2.4, 3.4 → 3.2 (the end, 3.96, is further).
    (20, [0, 20, 40, 60, 80]),
    # Every 0.6 s; 1.0 → 1.2 (0.2 off, not 0.6), 2.2 → 2.4, 3.4 → 3.6; 4.6 is past the end: no more cuts.
    (15, [0, 30, 60, 90]),
])
def test_segments_start_at_the_keyframes_nearest_each_length(tmp_path: Path, gop: int, starts: list[int]) -> None:
    src = keyed_clip(tmp_path / "in.mp4", keyed_frames(100, np.full((48, 64, 3), 90, np.uint8)), gop=gop, audio=False)
    assert keyframe_times(src) == [Fraction(k, 25) for k in range(0, 100, gop)]  # the clip is what the test says
    plan = plan_segments(src, 1.0, "x")
    assert [s.first_frame for s in plan.segments] == starts
    assert [s.frames for s in plan.segments] == [b - a for a, b in zip(starts, [*starts[1:], 100])]
    assert plan.frames == 100
    seg = plan.segments[1]
    tick = 512  # the MP4's time base is 1/12800: 512 ticks a frame at 25 fps
    a, b = starts[1], starts[2]
    assert (seg.context_pts, seg.start_pts, seg.end_pts, seg.tail_pts) == ((a - 3) * tick, a * tick, b * tick, (b + 3) * tick)


def test_clip_in_segments_keeps_every_frame_time_and_audio_packet(tmp_path: Path) -> None:
    src = _clip(tmp_path)
    engine = Shaky()
    result = _segmented(src, tmp_path / "out.mp4", engine, segment_seconds=1.0)
    got, want = read_clip(tmp_path / "out.mp4"), read_clip(src)
    assert result.segments == 3 and result.frames == 70 and result.audio == "copied"
    assert got["times"] == want["times"] == [Fraction(i, 25) for i in range(70)]
    assert [frame_index(255 - f) for f in got["frames"]] == list(range(70))  # none missing or doubled at a seam
    assert sorted(engine.writes) == list(range(70))  # each frame restored once: overlap frames only steadied
    assert [(p, t) for p, t, _ in got["audio"]] == [(p, t) for p, t, _ in want["audio"]]
    assert all(np.abs(o.astype(int) - (255 - i.astype(int))).mean() < 2 for o, i in zip(got["frames"], want["frames"]))
    assert not work_folder(tmp_path / "out.mp4").exists()  # removed after the join
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4", "out.mp4"]


def test_audio_mp4_cannot_hold_is_reencoded_once_at_the_join_whole_and_said(tmp_path: Path) -> None:
    """PCM in a .mkv: the join re-encodes the input's audio to AAC once, across the seams, the tone whole and in
    time; the segmented result says so as a one-pass run's does."""
    n = 70
    src = make_clip(tmp_path / "in.mkv", keyed_frames(n, np.full((64, 96, 3), 110, np.uint8)), audio="pcm_s16le",
                    audio_seconds=n / 25, gop=25, crf=14, preset="veryfast")
    result = _segmented(src, tmp_path / "out.mp4", Shaky(), segment_seconds=1.0)
    assert result.segments == 3 and result.frames == n
    note = "audio stream 1 (pcm_s16le) cannot go into an MP4 as it is: re-encoded to AAC"  # one pass's words
    assert result.audio == "re-encoded" and note in result.notes, result.notes
    assert ("audio", "aac") in read_clip(tmp_path / "out.mp4")["streams"]
    with av.open(str(tmp_path / "out.mp4")) as c:
        stream = c.streams.audio[0]
        frames = list(c.decode(stream))
        rate = stream.rate
    first = float(frames[0].pts * frames[0].time_base)
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    assert rate == 16000 and abs(first) <= 1024 / rate  # starts with the video (AAC's priming at most)
    assert abs(len(samples) / rate - n / 25) <= 2048 / rate, len(samples) / rate  # none lost or doubled at a seam
    tone = samples[2048:-2048]  # past the encoder's ramp-in and ramp-out
    spectrum = np.abs(np.fft.rfft(tone))
    assert abs(np.argmax(spectrum) * rate / len(tone) - 440) < 5  # the input's 440 Hz tone, whole
    assert 0.15 < float(np.sqrt(np.mean(tone**2))) < 0.25  # its level: 8000/32768 peak is 0.17 RMS


@pytest.mark.parametrize(("time_base", "pts"), [
    (Fraction(1, 30000), [i * 1001 for i in range(40)]),  # 29.97 fps: a segment starts at 10010/30000 s, not whole ms
    (Fraction(1, 90000), [i * 3000 + (i % 3) * 7 for i in range(40)]),  # variable rate, MPEG-TS's clock
])
def test_segment_frame_times_are_the_one_pass_times_exactly(tmp_path: Path, time_base: Fraction, pts: list[int]) -> None:
    src = make_clip(tmp_path / "in.mp4", keyed_frames(40, np.full((48, 64, 3), 110, np.uint8)), time_base=time_base,
                    pts=pts, gop=10)
    restore_video(src, tmp_path / "one.mp4", engine=Shaky())
    _segmented(src, tmp_path / "seg.mp4", Shaky(), segment_seconds=0.5)
    want = [p * time_base for p in pts]
    assert read_clip(tmp_path / "one.mp4")["times"] == want
    assert read_clip(tmp_path / "seg.mp4")["times"] == want  # not a tick off at any segment's start


def test_no_seam_shows_in_the_landmarks(tmp_path: Path) -> None:
    src = _clip(tmp_path, audio=False)
    whole, parts = Shaky(), Shaky()
    restore_video(src, tmp_path / "one.mp4", engine=whole)
    _segmented(src, tmp_path / "seg.mp4", parts, segment_seconds=1.0)
    seams = [24, 49]  # frame 25 and 50 start segments: the pairs (24, 25) and (49, 50) cross them
    inside = [i for i in range(3, 66) if i not in seams]
    raw = np.mean([NOISE * np.sqrt(2) * 0.8])  # ~ what an unsteadied detector moves (for the message)
    across, within = _movement(parts.used, seams), _movement(parts.used, inside)
    print(f"landmark movement: across seams {across:.3f} px, inside segments {within:.3f} px, raw ~{raw:.2f} px")
    assert across <= within * 1.5
    # The overlap gives every frame the neighbours it has in one pass: the same steadied landmarks.
    assert sorted(parts.used) == sorted(whole.used) == list(range(70))
    assert max(float(np.abs(parts.used[i] - whole.used[i]).max()) for i in range(70)) < 1e-4


def test_without_the_overlap_the_seam_would_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with no overlap frames, the frames at a seam are smoothed one-sided."""
    monkeypatch.setattr(segments_module, "OVERLAP_FRAMES", 0)
    src = _clip(tmp_path, audio=False)
    whole, parts = Shaky(), Shaky()
    restore_video(src, tmp_path / "one.mp4", engine=whole)
    _segmented(src, tmp_path / "seg.mp4", parts, segment_seconds=1.0)
    assert max(float(np.abs(parts.used[i] - whole.used[i]).max()) for i in (24, 25, 49, 50)) > 0.05


def test_a_resumed_run_keeps_finished_segments_and_redoes_the_rest(tmp_path: Path) -> None:
    src = _clip(tmp_path)
    dst = tmp_path / "out.mp4"
    reference = _segmented(src, tmp_path / "ref.mp4", Shaky(), segment_seconds=1.0)

    class DiesInSegment2(Shaky):
        def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
            if frame_index(rgb) == 55:
                raise KeyboardInterrupt  # as Ctrl-C would, mid-segment
            return super().restore(rgb, detections)

    with pytest.raises(KeyboardInterrupt):
        _segmented(src, dst, DiesInSegment2(), segment_seconds=1.0)
    folder = work_folder(dst)
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "plan.json", "seg-00000.mp4", "seg-00001.mp4"]  # partial removed
    assert not dst.exists()
    (folder / "seg-00001.mp4").write_bytes((folder / "seg-00001.mp4").read_bytes()[:-300])  # torn by a power loss
    (folder / ".seg-00002.mp4.99.partial").write_bytes(b"half")  # left by kill -9
    again = Shaky()
    counts: list[tuple[int, int]] = []
    result = _segmented(src, dst, again, segment_seconds=1.0, progress=lambda d, t: counts.append((d, t)))
    assert result.segments_kept == 1 and result.frames_kept == 25
    # the time a frame is this run's over the frames it restored: the kept ones cost it nothing
    assert result.seconds_per_frame == pytest.approx(result.total_s / 45, rel=1e-6)
    assert sorted(again.writes) == list(range(25, 70))  # the torn segment and the unfinished one redone, once each
    assert counts[0] == (25, 70) and counts[-1] == (70, 70)  # progress counts what was already done
    got, ref = read_clip(dst), read_clip(tmp_path / "ref.mp4")
    assert got["times"] == ref["times"] and [a for a, _, _ in got["audio"]] == [a for a, _, _ in ref["audio"]]
    assert [frame_index(255 - f) for f in got["frames"]] == list(range(70))
    # Within 2 grey levels a frame (mean): x264's threads make two encodes of the same frames differ by a few levels
    # at a few pixels (measured: two uninterrupted runs, up to 8 at one pixel, 0.04 mean).
    assert max(_mean_diff(a, b) for a, b in zip(got["frames"], ref["frames"])) <= 2
    assert reference.frames == result.frames == 70
    assert not folder.exists()


def test_a_one_frame_clip_in_segments_lasts_its_frame(tmp_path: Path) -> None:
    # it said "1 frame (0.00 s, 12800.00 fps)": the frame's length taken as one tick of the time base
    result = _segmented(_clip(tmp_path, n=1, audio=False), tmp_path / "out.mp4", Shaky())
    assert result.frames == 1 and result.duration_s == pytest.approx(0.04) and result.fps == pytest.approx(25.0)


def test_other_options_do_not_resume_anothers_segments_unless_fresh(tmp_path: Path) -> None:
    src = _clip(tmp_path, n=40, audio=False)
    dst = tmp_path / "out.mp4"

    class Dies(Shaky):
        def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
            if frame_index(rgb) == 30:
                raise KeyboardInterrupt
            return super().restore(rgb, detections)

    with pytest.raises(KeyboardInterrupt):
        _segmented(src, dst, Dies(), segment_seconds=1.0)
    other = settings_text(RestoreOptions(mode="low"), 18)
    with pytest.raises(InputError, match="--fresh"):
        restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=Shaky()), other, segment_seconds=1.0)
    assert (work_folder(dst) / "seg-00000.mp4").exists()  # nothing thrown away by the refusal
    engine = Shaky()
    result = restore_in_segments(src, dst, LocalRunner(None, RestoreOptions(), 18, engine=engine), other,
                                 segment_seconds=1.0, fresh=True)
    assert result.segments_kept == 0 and sorted(engine.writes) == list(range(40))
    assert any("--fresh" in n for n in result.notes)


def test_the_long_clip_hint_names_the_resumable_command() -> None:
    from gpen_core.video.command import resume_command

    assert resume_command("my talk.mov") == \
        "python -m gpen_core restore 'my talk.mov' -o 'my talk_restored.mp4' --segments"


def test_the_cli_chooses_segments_for_long_clips_and_refuses_them_with_a_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from gpen_core.scaleout import cli as scaleout_cli

    def args(**kw: object) -> argparse.Namespace:
        base = {"segments": None, "ray": False, "start": None, "end": None}
        return argparse.Namespace(**{**base, **kw})

    monkeypatch.setattr(scaleout_cli, "_duration", lambda src: 599.0)
    assert not scaleout_cli.wants_segments(args(), Path("x.mp4"))
    assert scaleout_cli.wants_segments(args(segments=True), Path("x.mp4"))
    assert scaleout_cli.wants_segments(args(ray=True), Path("x.mp4"))
    monkeypatch.setattr(scaleout_cli, "_duration", lambda src: 600.0)
    assert scaleout_cli.wants_segments(args(), Path("x.mp4"))
    assert not scaleout_cli.wants_segments(args(segments=False), Path("x.mp4"))
    assert not scaleout_cli.wants_segments(args(start=5.0), Path("x.mp4"))  # a part of a clip: one pass
    with pytest.raises(InputError, match="--end restores in one pass"):
        scaleout_cli.wants_segments(args(segments=True, end=3.0), Path("x.mp4"))
    with pytest.raises(InputError, match="--no-segments"):
        scaleout_cli.wants_segments(args(segments=False, ray=True), Path("x.mp4"))


def test_a_clip_sent_to_ray_has_its_first_bytes_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    """``--ray`` on a video file tells it from a photo batch by its first bytes, and the run keeps that answer."""
    from gpen_core.cli import main
    from gpen_core.images import limits

    clip = make_clip(tmp_path / "clip.mp4", gradient_frames(3))
    heads: list[bytes] = []
    looks = limits.looks_like_video
    monkeypatch.setattr(limits, "looks_like_video", lambda head: heads.append(head) or looks(head))
    # --no-segments: refused once the clip is told, before Ray or the engine start
    assert main(["restore", str(clip), "-o", str(tmp_path / "out.mp4"), "--ray", "--no-segments"]) == 2
    assert "leave out --no-segments" in capsys.readouterr().err
    assert len(heads) == 1


def test_a_clip_with_no_frame_that_decodes_is_refused_in_segments_as_in_one_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every packet blanked: a segmented run says what one pass says (what the decoder said, how to fix it),
    exit 2, not a decoder traceback."""
    from gpen_core.cli import main

    good = make_clip(tmp_path / "good.mkv", [np.full((64, 64, 3), 90, np.uint8)] * 4)
    src = tmp_path / "blank.mkv"
    with av.open(str(good)) as i, av.open(str(src), "w") as o:
        s = o.add_stream_from_template(i.streams.video[0])
        for p in i.demux(i.streams.video[0]):
            if p.size:
                q = av.Packet(bytes(p.size))
                q.pts, q.dts, q.time_base, q.is_keyframe, q.stream = p.pts, p.dts, p.time_base, p.is_keyframe, s
                o.mux(q)
    for flag in ("--no-segments", "--segments"):
        code = main(["restore", str(src), "-o", str(tmp_path / f"out{flag}.mp4"), "--mode", "low", flag])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "has no frame that decodes (the decoder said: " in err and "Re-export or re-download it" in err, err


# Frames (clip numbers) where the crowd shows more faces than max faces = 1, and how many: 5 in segment 0, 8 in
# segment 1 and 5 in segment 2 of _clip's 1 s segments (cut at frames 25 and 50), several in the 3 overlap frames
# each side of a seam that two segments decode.
CROWDED = {**dict.fromkeys(range(20, 31), 2), 48: 3, 49: 2, 50: 2, 51: 2, 52: 2, 60: 4, 61: 2}
CAPPED = ("found more than 1 face in 18 frames (up to 4 in one); restored the 1 with the highest detection scores in "
          "each (max faces = 1)")


# What the finder's passes did in frame i, as FoundFaces says it (turned: the face's quarter turns): one note each for
# the clip. Frame 24 is in the overlap segment 1 decodes; segment 0 writes it.
FINDER = {3: {"turned": 1}, 24: {"turned": 3}, 35: {"turned": 1, "merged": 2}, 10: {"unchecked": ("r1",)},
          40: {"unchecked": ("r2", "r2")}, 60: {"large": 1}}
FOUND_NOTES = ["face check off: kept 3 detections in 2 frames the check would have dropped (r1; r2)",
               "3 faces in 3 frames found only on the frame turned 90°, 180° or 270°: restored upright, pasted back as "
               "in the frame",
               "2 detections in the clip's frames were the same face as another and merged (one box per face)",
               "1 large face in the clip's frames found on a 400 px copy (the detector misses or splits faces over "
               "about 256 px)"]


class Crowd:
    """A stand-in Restorer whose frame session finds CROWDED[i] faces (else 1) in frame i, as the real session
    reports them to FrameEngine (``finds`` before max faces), and inverts the frame; it dies at frame ``dies_at``."""

    device = "cpu"

    def __init__(self, dies_at: int | None = None) -> None:
        from types import SimpleNamespace

        from gpen_core.modes import get_mode

        self.session = SimpleNamespace(mode=get_mode("low"), notes=(), finds=None, runtimes=(), plan=None,
                                       detect=self._detect, restore=self._restore)
        self.dies_at = dies_at

    def frames(self, opts: RestoreOptions, size: tuple[int, int]):
        from contextlib import nullcontext

        return nullcontext(self.session)

    def _detect(self, rgb: np.ndarray) -> list:
        from dataclasses import replace
        from types import SimpleNamespace

        i = frame_index(rgb)
        dets = [Detection((10.0 + k, 10.0, 46.0 + k, 46.0), 0.99, np.zeros((5, 2), np.float32))
                for k in range(CROWDED.get(i, 1))]
        f = FINDER.get(i, {})
        dets[0] = replace(dets[0], turn=f.get("turned", 0))
        unchecked = tuple((Detection((50.0, 10.0, 60.0, 20.0), 0.95, np.zeros((5, 2), np.float32)), r)
                          for r in f.get("unchecked", ()))
        self.session.finds = SimpleNamespace(faces=tuple(dets), rejected=(), unchecked=unchecked,  # a FoundFaces'
                                             merged=f.get("merged", 0), large=f.get("large", 0))
        return dets[:1]

    def _restore(self, rgb: np.ndarray, detections: list, check_identity: bool = True):
        from types import SimpleNamespace

        if frame_index(rgb) == self.dies_at:
            raise KeyboardInterrupt  # as Ctrl-C would, mid-segment
        return SimpleNamespace(image=255 - rgb, faces=(), notes=())


def _crowd_run(src: Path, dst: Path, restorer: Crowd):
    opts = RestoreOptions(mode="low", max_faces=1, identity="off")
    return restore_in_segments(src, dst, LocalRunner(restorer, opts, 18), settings_text(opts, 18), segment_seconds=1.0)


def test_max_faces_is_said_once_for_a_segmented_clip_counting_each_frame_once(tmp_path: Path) -> None:
    """Three segments each cap faces: one note for the clip, its frames summed and each counted once (the overlap
    frames two segments decode are counted by the one writing them), as one pass says it."""
    from gpen_core.video.engine_seam import FrameEngine

    src = _clip(tmp_path)
    result = _crowd_run(src, tmp_path / "out.mp4", Crowd())
    assert result.segments == 3
    assert [n for n in result.notes if "max faces" in n] == [CAPPED]
    assert [r.tally.capped_frames for r in result.records] == [5, 8, 5]
    one = restore_video(src, tmp_path / "one.mp4",
                        engine=FrameEngine(Crowd(), RestoreOptions(mode="low", max_faces=1, identity="off"), (96, 64)))
    assert [n for n in one.notes if "max faces" in n] == [CAPPED]


def test_the_finders_notes_are_said_once_for_a_clip_one_pass_segmented_or_resumed(tmp_path: Path) -> None:
    """Faces found turned, detections the face check off kept, merged boxes, large faces: a photo's notes say each,
    a clip's said none. Now each once for the clip, its frames summed, on every path, a resumed run's too."""
    import json

    from gpen_core.video.engine_seam import FrameEngine

    src = _clip(tmp_path)
    assert [n for n in _crowd_run(src, tmp_path / "out.mp4", Crowd()).notes if n in FOUND_NOTES] == FOUND_NOTES
    opts = RestoreOptions(mode="low", max_faces=1, identity="off")
    one = restore_video(src, tmp_path / "one.mp4", engine=FrameEngine(Crowd(), opts, (96, 64)))
    assert [n for n in one.notes if n in FOUND_NOTES] == FOUND_NOTES
    dst = tmp_path / "resumed.mp4"
    with pytest.raises(KeyboardInterrupt):
        _crowd_run(src, dst, Crowd(dies_at=55))  # segments 0 and 1 finished
    plan = json.loads((work_folder(dst) / "plan.json").read_text())
    assert [f["tally"]["turned_faces"] for f in plan["finished"]] == [2, 1]
    result = _crowd_run(src, dst, Crowd())
    assert result.segments_kept == 2
    assert [n for n in result.notes if n in FOUND_NOTES] == FOUND_NOTES  # the kept segments' counts read back


def test_a_resumed_run_counts_its_kept_segments_frames_in_the_note(tmp_path: Path) -> None:
    import json

    src = _clip(tmp_path)
    for older in (False, "no counts", "other counts"):
        dst = tmp_path / f"out{older}.mp4".replace(" ", "_")
        with pytest.raises(KeyboardInterrupt):
            _crowd_run(src, dst, Crowd(dies_at=55))  # segments 0 and 1 finished
        plan_path = work_folder(dst) / "plan.json"
        plan = json.loads(plan_path.read_text())
        assert [f["tally"]["capped_frames"] for f in plan["finished"]] == [5, 8]
        if older:  # as a plan written before finished segments recorded their counts, or by a version counting others
            for f in plan["finished"]:
                if older == "no counts":
                    del f["tally"]
                else:
                    del f["tally"]["faced_frames"]
                    f["tally"]["a_later_count"] = 1
            plan_path.write_text(json.dumps(plan))
        result = _crowd_run(src, dst, Crowd())
        assert result.segments_kept == 2
        capped = [n for n in result.notes if "max faces" in n]
        if not older:
            assert capped == [CAPPED]
        else:  # only the segment this run restored is counted, and the note says what it leaves out
            assert capped == [CAPPED.replace("18 frames", "5 frames"),
                              "2 segments kept from an earlier run are not counted in what the notes say of the faces "
                              "found, max faces, the identity limit and the face check: the plan has no counts for them (written by an "
                              "earlier version, or the run was killed as they finished)"]


def test_json_in_segments_says_that_its_lines_are_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clip of ten minutes or more goes to segments unasked, and there --json printed a line per segment and none
    per frame (the steadied landmarks the docs promise) without a word; the notes now say so and how to get them."""
    import argparse
    from dataclasses import dataclass

    from gpen_core.scaleout import cli as scaleout_cli

    @dataclass(frozen=True)
    class Done:
        notes: tuple[str, ...] = ()

        def to_json(self) -> dict:
            return {"notes": list(self.notes)}

    printed: list[tuple[str, ...]] = []
    monkeypatch.setattr(scaleout_cli, "restore_segmented", lambda *a, **k: Done(("a note of the clip",)))
    monkeypatch.setattr(scaleout_cli, "print_segmented", lambda src, result, json_records: printed.append(result.notes))
    base = dict(segments=True, ray=False, start=None, end=None, tracks=None, segment_seconds=None, fresh=False)
    records: list[dict] = []
    for as_json in (False, True):
        args = argparse.Namespace(**base, json=as_json)
        assert scaleout_cli.restore_if_segmented(args, Path("a.mp4"), Path("o.mp4"), None, records.append)  # type: ignore[arg-type]
    plain, with_json = printed
    assert plain == ("a note of the clip",)
    [said] = [n for n in with_json if "--json" in n]
    assert "per segment" in said and "--no-segments" in said and "a note of the clip" in with_json
    assert said in records[-1]["video"]["notes"]
