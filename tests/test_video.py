"""The video path's container work, with a stand-in engine (no network): frames, timestamps, audio,
rotation, colour, odd sizes, trimming, refusals and stops. Faces and the real engine: test_video_faces.py."""

from __future__ import annotations

import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.errors import VideoStopped  # noqa: E402
from gpen_core.video.stream import VideoOptions, restore_video  # noqa: E402

from .videoclips import gradient_frames, make_clip, read_clip  # noqa: E402


class Invert:
    """Stands in for the engine: no faces, and each frame comes back inverted (so the output is provably ours)."""

    device = "cpu"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def detect(self, rgb: np.ndarray) -> list:
        self.seen.append(rgb.shape[:2])
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        return FrameOut(255 - rgb, ())


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name)


def _close(a: np.ndarray, b: np.ndarray, tol: float = 6.0) -> bool:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) < tol


def test_constant_rate_clip_keeps_every_frame_and_its_time(tmp_path: Path) -> None:
    frames = gradient_frames(10)
    src = make_clip(tmp_path / "in.mp4", frames, time_base=Fraction(1, 25))
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert())
    got, want = read_clip(tmp_path / "out.mp4"), read_clip(src)
    assert result.frames == 10 and len(got["times"]) == 10
    assert got["times"] == want["times"] == [Fraction(i, 25) for i in range(10)]
    assert result.fps == pytest.approx(25.0)
    assert all(_close(o, 255 - i) for o, i in zip(got["frames"], want["frames"]))  # the engine's frames, in order
    assert got["streams"] == [("video", "h264")] and result.audio == "none"
    assert not _leftovers(tmp_path)


def test_a_one_frame_clip_lasts_its_frame_not_zero_seconds(tmp_path: Path) -> None:
    # one frame at 25 fps shows for 1/25 s: the summary said "1 frames (0.00 s, 0.00 fps)"
    src = make_clip(tmp_path / "one.mp4", gradient_frames(1), time_base=Fraction(1, 25))
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert result.frames == 1
    assert result.duration_s == pytest.approx(0.04) and result.fps == pytest.approx(25.0)


def test_variable_frame_timing_is_kept_not_forced_to_a_rate(tmp_path: Path) -> None:
    pts = [0, 40, 80, 200, 240, 400, 410, 700]  # ms: gaps of 40, 120, 160, 10 and 290 ms
    src = make_clip(tmp_path / "vfr.mkv", gradient_frames(len(pts)), pts=pts, time_base=Fraction(1, 1000))
    restore_video(src, tmp_path / "out.mp4", engine=Invert())
    got = read_clip(tmp_path / "out.mp4")
    assert got["times"] == [Fraction(p, 1000) for p in pts]


def test_audio_packets_are_copied_bit_for_bit(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "a.mp4", gradient_frames(12), audio="aac", audio_seconds=0.5)
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert())
    got, want = read_clip(tmp_path / "out.mp4"), read_clip(src)
    assert result.audio == "copied"
    assert len(want["audio"]) > 5
    assert [p for p, _, _ in got["audio"]] == [p for p, _, _ in want["audio"]]
    assert [t for _, t, _ in got["audio"]] == [t for _, t, _ in want["audio"]]


def test_audio_mp4_cannot_hold_is_reencoded_to_aac_and_said(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "pcm.mkv", gradient_frames(12), audio="pcm_s16le", audio_seconds=0.5)
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert())
    got = read_clip(tmp_path / "out.mp4")
    assert result.audio == "re-encoded"
    assert ("audio", "aac") in got["streams"]
    assert any("pcm_s16le" in n and "AAC" in n for n in result.notes)


@pytest.mark.parametrize("rotation", [90, -90, 180])
def test_rotated_clip_is_restored_and_written_upright(tmp_path: Path, rotation: int) -> None:
    stored = gradient_frames(5, 64, 48)
    src = make_clip(tmp_path / "rot.mp4", stored, rotation=rotation)
    assert read_clip(src)["rotations"][0] % 360 == rotation % 360  # the clip really carries the display matrix
    engine = Invert()
    result = restore_video(src, tmp_path / "out.mp4", engine=engine)
    got = read_clip(tmp_path / "out.mp4")
    # How a player shows the input: ffmpeg's autorotate turns a frame whose display matrix reads +90°
    # with transpose=cclock (counter-clockwise, np.rot90's k=1) and one reading -90° (a phone held
    # upright) with transpose=clock (fftools get_rotation negates the angle).
    upright = [np.rot90(f, {90: 1, -90: 3, 180: 2}[rotation]) for f in stored]
    assert engine.seen[0] == upright[0].shape[:2]  # the engine saw upright frames
    assert got["rotations"][0] == 0 and got["size"] == (upright[0].shape[1], upright[0].shape[0])
    assert all(_close(o, 255 - u) for o, u in zip(got["frames"], upright))
    assert result.rotation == rotation % 360 and any("upright" in n for n in result.notes)


def test_colour_properties_reach_the_output(tmp_path: Path) -> None:
    bt709_full = (1, 1, 1, 2)  # primaries, transfer, matrix BT.709; full range
    src = make_clip(tmp_path / "c.mp4", gradient_frames(4), colour=bt709_full)
    assert read_clip(src)["colours"][0] == bt709_full
    restore_video(src, tmp_path / "out.mp4", engine=Invert())
    got, want = read_clip(tmp_path / "out.mp4"), read_clip(src)
    assert got["colours"][0] == bt709_full
    assert all(_close(o, 255 - i) for o, i in zip(got["frames"], want["frames"]))  # converted with those, not BT.601


def test_odd_frame_size_is_padded_by_one_pixel_and_said(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "odd.mkv", gradient_frames(4, 64, 48), crf=0)

    class Crop(Invert):  # an engine returning odd-sized frames (63×47): the writer must pad them
        def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
            return FrameOut(np.ascontiguousarray(rgb[:47, :63]), ())

    result = restore_video(src, tmp_path / "out.mp4", engine=Crop())
    got = read_clip(tmp_path / "out.mp4")
    assert got["size"] == (64, 48) and result.size == (63, 47)
    assert any("padded" in n for n in result.notes)
    f = got["frames"][0].astype(int)
    assert np.abs(f[:, 63] - f[:, 62]).mean() < 4  # the added column copies the last one


def test_start_and_end_restore_only_that_part(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(25), audio="aac", audio_seconds=1.0)
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert(), video=VideoOptions(start_s=0.4, end_s=0.8))
    got = read_clip(tmp_path / "out.mp4")
    assert result.frames == 10
    assert got["times"] == [Fraction(i, 25) for i in range(10)]  # the part starts at 0
    assert got["audio"] and max(t for _, t, _ in got["audio"]) < 0.45


def test_not_a_video_is_refused_and_nothing_written(tmp_path: Path) -> None:
    src = tmp_path / "notes.mp4"
    src.write_text("this is a text file with a video's name\n" * 20)
    with pytest.raises(InputError, match="not a video"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_audio_only_file_is_refused_as_having_no_video_stream(tmp_path: Path) -> None:
    src = tmp_path / "sound.mp4"
    with av.open(str(src), "w") as out:
        a = out.add_stream("aac", rate=16000)
        a.layout = "mono"
        for k in range(8):
            f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            f.sample_rate, f.pts = 16000, k * 1024
            for p in a.encode(f):
                out.mux(p)
        for p in a.encode():
            out.mux(p)
    with pytest.raises(InputError, match="no video stream"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_clip_with_zero_frames_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "empty.mkv"
    with av.open(str(src), "w") as out:  # a video track with no frame, beside audio (so the file is written)
        vs = out.add_stream("libx264", rate=25)
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        a = out.add_stream("aac", rate=16000)
        a.layout = "mono"
        for k in range(4):
            f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            f.sample_rate, f.pts = 16000, k * 1024
            for p in a.encode(f):
                out.mux(p)
        for p in [*vs.encode(), *a.encode()]:
            out.mux(p)
    assert src.stat().st_size > 0
    with pytest.raises(InputError, match="no frame|no picture"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_a_part_past_the_clips_end_is_refused_naming_the_part_in_seconds(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(5))
    with pytest.raises(InputError, match=r"the part between 2 s and 3\.5 s starts at or past the clip's end \(it is 0\.20 s long\)"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert(), video=VideoOptions(start_s=2, end_s=3.5))
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_file_damaged_from_its_start_is_refused(tmp_path: Path) -> None:
    good = make_clip(tmp_path / "good.mp4", gradient_frames(10)).read_bytes()
    src = tmp_path / "broken.mp4"
    src.write_bytes(good[:200])  # the signature survives, the rest is gone
    with pytest.raises(InputError, match="damaged|truncated"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_file_damaged_midway_keeps_the_frames_before_and_says_where(tmp_path: Path) -> None:
    frames = [np.random.default_rng(i).integers(0, 255, (48, 64, 3), np.uint8) for i in range(20)]  # big frames
    data = make_clip(tmp_path / "good.mkv", frames, crf=0).read_bytes()
    src = tmp_path / "cut.mkv"
    src.write_bytes(data[: len(data) // 2])  # Matroska: cues at the end, the first half still plays
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert result.damage is not None
    assert 3 <= result.frames < 20 and result.damage.frame == result.frames
    assert result.damage.time_s == pytest.approx(result.frames / 25, abs=1e-6)
    assert any(f"damaged from frame {result.frames}" in n for n in result.notes)
    assert len(read_clip(tmp_path / "out.mp4")["times"]) == result.frames
    from gpen_app.video_tab import video_markdown

    assert video_markdown(result).count("damaged from frame") == 1  # the app's panel says it once


def test_stop_midway_removes_the_partial_output(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(30))
    stop = threading.Event()

    def on_frame(record) -> None:
        if record.index == 4:
            stop.set()

    with pytest.raises(VideoStopped, match="removed"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert(), on_frame=on_frame, stop=stop)
    assert not (tmp_path / "out.mp4").exists() and not _leftovers(tmp_path)


def test_an_output_that_is_not_mp4_is_refused_before_any_work(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(3))
    with pytest.raises(InputError, match=r"out\.mp4"):
        restore_video(src, tmp_path / "out.avi", engine=Invert())


def test_frames_over_the_photo_pixel_limit_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.images.limits import InputLimits
    from gpen_core.video import limits

    monkeypatch.setattr(limits, "DEFAULT_LIMITS", InputLimits(max_pixels=3000))  # 64×48 = 3072 pixels: just over
    src = make_clip(tmp_path / "in.mp4", gradient_frames(3))
    with pytest.raises(InputError, match=r"64×48 .*limit is .*megapixels a frame.*Scale the video down"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_running_out_of_memory_midway_is_a_resource_error_and_nothing_is_left(tmp_path: Path) -> None:
    from gpen_core.errors import ResourceError

    class Starved(Invert):
        def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
            if len(self.seen) > 5:
                raise MemoryError("cannot allocate")
            return super().restore(rgb, detections)

    src = make_clip(tmp_path / "in.mp4", gradient_frames(10))
    with pytest.raises(ResourceError, match=r"out of memory at frame \d+ .*lighter mode"):
        restore_video(src, tmp_path / "out.mp4", engine=Starved())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_writing_over_the_input_is_refused(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(3))
    before = src.read_bytes()
    with pytest.raises(InputError, match="is the input itself"):
        restore_video(src, src, engine=Invert())
    assert src.read_bytes() == before and not _leftovers(tmp_path)


def test_the_video_progress_in_a_log_is_a_line_per_tenth_without_carriage_returns(monkeypatch, capsys) -> None:
    import io

    from gpen_core.video.command import VideoBar

    log = io.StringIO()  # not a terminal
    monkeypatch.setattr("sys.stderr", log)
    bar = VideoBar("clip.mp4")
    for i in range(1, 101):
        bar(i, 100)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    # the first frame, then one line per tenth of the clip
    assert [ln.split(",")[0] for ln in lines] == [f"clip.mp4: frame {n}/100" for n in (1, *range(10, 101, 10))]


@pytest.mark.parametrize("json_records", [False, True])
def test_a_clip_restored_in_segments_says_so_where_a_whole_clip_does(json_records: bool, capsys) -> None:
    """The summary on stdout as a photo's result line (on stderr when stdout holds --json records), notes on stderr."""
    from types import SimpleNamespace

    from gpen_core.result import Peaks
    from gpen_core.scaleout.cli import print_segmented

    r = SimpleNamespace(output=Path("out.mp4"), frames=250, duration_s=10.0, fps=25.0, mode="low", seconds_per_frame=0.168,
                        peaks=Peaks(900_000_000, 400_000_000, "vmhwm"), segments=3, segments_kept=1,
                        audio="copied", total_s=42.0, join_s=0.5, notes=("the second segment was redone",))
    print_segmented(Path("in.mp4"), r, json_records=json_records)
    out, err = capsys.readouterr()
    line = ("in.mp4 -> out.mp4: 250 frames (10.00 s, 25.00 fps), mode low, audio copied, 0.168 s a frame, peak RAM 900 MB; "
            "3 segments, 1 kept from an earlier run, 42.0 s (join 0.5 s)")
    assert (err if json_records else out).splitlines()[0] == line
    assert out == ("" if json_records else f"{line}\n")
    assert err.endswith("  note: the second segment was redone\n") and "note" not in out
