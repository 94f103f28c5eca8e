"""What a clip may cost, by what decodes rather than what its header says (gpen_core.video.limits), and what
the output cannot keep, said before any frame is restored: lying durations, frame floods, frames bigger than
declared, size changes, timestamps going back, extra video streams, HDR, audio an MP4 cannot take."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_app import video_tab  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.limits import ClipCap  # noqa: E402
from gpen_core.video.stream import VideoOptions, restore_video  # noqa: E402

from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: E402,F401
from .hostileclips import hdr10_clip, jpeg, mjpeg_clip, patch_mp4_durations, pcm_clip, two_video_streams  # noqa: E402
from .videoclips import gradient_frames, make_clip, read_clip  # noqa: E402

SERVER = "this server's limit (--max-video-seconds)"
BIG = 7072  # 7072² = 50.01 MP: just over the photo limit (50 MP)


class Invert:
    """Stands in for the engine: no faces, each frame inverted; counts the frames it was given."""

    device = "cpu"

    def __init__(self) -> None:
        self.seen = 0

    def detect(self, rgb: np.ndarray) -> list:
        self.seen += 1
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        return FrameOut(255 - rgb, ())


def _nothing_written(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith(".mp4") and p.name.startswith(("out", ".out"))]


def test_a_header_that_says_one_tick_is_capped_by_the_frames_decoded_time(tmp_path: Path) -> None:
    src = patch_mp4_durations(make_clip(tmp_path / "tick.mp4", gradient_frames(50), time_base=Fraction(1, 25)))  # 2 s
    note = video_tab.clip_note(str(src), 1.0)
    assert note.cap == ClipCap(1.0, 60, SERVER) and "at most 1 s and 60 frames" in note.markdown  # said at upload
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert(), video=VideoOptions(cap=note.cap))
    assert result.frames == 25 and len(read_clip(tmp_path / "out.mp4")["times"]) == 25  # 1 s of 25 fps, decoded
    assert f"only the first 25 frames (1.00 s) were restored: {SERVER} allows 1 s and 60 frames" in " ".join(result.notes)
    assert result.damage is None  # the cap's cut is no damage


def test_a_flood_of_frames_in_a_second_stops_at_the_caps_frames_and_the_progress_has_a_total(tmp_path: Path) -> None:
    # 600 frames within 60 ms: the 1 s cap by time alone lets them all through.
    src = make_clip(tmp_path / "flood.mp4", gradient_frames(600, 32, 32), pts=list(range(600)), time_base=Fraction(1, 10000))
    note = video_tab.clip_note(str(src), 1.0)
    assert "restores the first 1 s only, at most 60 frames" in note.markdown  # said at upload
    seen: list[tuple[int, int]] = []
    engine = Invert()
    result = restore_video(src, tmp_path / "out.mp4", engine=engine, video=VideoOptions(cap=note.cap),
                           progress=lambda done, total: seen.append((done, total)))
    assert result.frames == 60 and engine.seen <= 60 + 3  # the look-ahead's few, no more
    assert seen[-1] == (60, 60) and all(total == 60 for _, total in seen)
    assert any("only the first 60 frames" in n for n in result.notes)


def test_a_frame_over_the_photo_limit_is_refused_before_its_pixels_are_converted(tmp_path: Path) -> None:
    src = mjpeg_clip(tmp_path / "bomb.mkv", (64, 64), [jpeg(64, 64), jpeg(BIG, BIG)])
    engine = Invert()
    with pytest.raises(InputError, match=rf"frame 1 decodes at {BIG}×{BIG} .*limit is 50 megapixels.*header claims 64×64"):
        restore_video(src, tmp_path / "out.mp4", engine=engine)
    assert engine.seen <= 1 and _nothing_written(tmp_path)
    with pytest.raises(InputError, match="megapixels"):  # the page's preview frame: the same limit
        video_tab.frame_at(str(src), 0.04)


def test_a_clip_that_changes_size_mid_way_is_refused_and_a_wrong_header_is_said(tmp_path: Path) -> None:
    src = mjpeg_clip(tmp_path / "grow.mkv", (64, 64), [jpeg(64, 64)] * 5 + [jpeg(96, 96)] * 5)
    with pytest.raises(InputError, match="frame 5 is 96×96 where the frames before it are 64×64"):
        restore_video(src, tmp_path / "out.mp4", engine=Invert())
    assert _nothing_written(tmp_path)


def test_timestamps_that_go_back_fail_at_that_frame_naming_the_cause(tmp_path: Path) -> None:
    src = mjpeg_clip(tmp_path / "back.mkv", (64, 64), [jpeg(64, 64, 10 * i) for i in range(40)],
                     pts=[0, 1, 2, 5, 4] + list(range(6, 41)))
    engine = Invert()
    with pytest.raises(InputError, match=r"frame 4's timestamp \(0\.16 s\) is not after the frame before it \(0\.2 s\)") as e:
        restore_video(src, tmp_path / "out.mp4", engine=engine)
    assert "writable" not in str(e.value) and engine.seen <= 4  # found as read, not after every frame


def test_a_header_over_the_limit_is_refused_on_the_segments_path_and_by_the_preview(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.images.limits import InputLimits
    from gpen_core.options import RestoreOptions
    from gpen_core.video.resumable import LocalRunner, restore_in_segments

    # A 16000² clip costs a minute to make; the same rule on a 64×48 clip under a 3000-pixel limit costs nothing.
    monkeypatch.setattr("gpen_core.video.limits.DEFAULT_LIMITS", InputLimits(max_pixels=3000))
    src = make_clip(tmp_path / "huge.mp4", gradient_frames(3))
    with pytest.raises(InputError, match="its frames are 64×48 .*megapixels a frame, as for photos"):
        restore_in_segments(src, tmp_path / "out.mp4", LocalRunner(None, RestoreOptions(), 18, engine=Invert()), "t")
    assert not any(tmp_path.glob(".out.mp4*"))  # refused before a work folder
    with pytest.raises(InputError, match="64×48"):
        video_tab.frame_at(str(src), 0.0)


def test_a_segmented_run_says_the_engines_notes_as_one_pass_does(tmp_path: Path) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.video.resumable import LocalRunner, restore_in_segments

    class Shrinks(Invert):
        notes = ["low mode shrinks frames over 2048 px: 4000×3000 restored and written at 2048×1536"]

    src = make_clip(tmp_path / "in.mp4", gradient_frames(6))
    one = restore_video(src, tmp_path / "one.mp4", engine=Shrinks())
    seg = restore_in_segments(src, tmp_path / "seg.mp4", LocalRunner(None, RestoreOptions(), 18, engine=Shrinks()), "t")
    assert Shrinks.notes[0] in one.notes and Shrinks.notes[0] in seg.notes


def test_two_video_streams_and_hdr_are_said_and_the_output_is_tagged_as_written(tmp_path: Path) -> None:
    two = restore_video(two_video_streams(tmp_path / "two.mkv", gradient_frames(4)), tmp_path / "out.mp4", engine=Invert())
    assert any("2 video streams: only the first (stream 0) was restored; the other was dropped" in n for n in two.notes)
    hdr = restore_video(hdr10_clip(tmp_path / "hdr.mp4", gradient_frames(4)), tmp_path / "hdr-out.mp4", engine=Invert())
    assert any("10-bit HDR (BT.2020, PQ (SMPTE 2084)): written as 8-bit H.264 with the same HDR tags" in n for n in hdr.notes)
    with av.open(str(tmp_path / "hdr-out.mp4")) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.pix_fmt, cc.color_trc, cc.color_primaries) == ("yuv420p", 16, 9)  # 8 bits, and said so


@pytest.mark.parametrize("channels, rate, why", [(16, 48000, "16 channels"), (1, 192000, "192 kHz")])
def test_audio_an_mp4_cannot_take_is_refused_before_any_frame_and_no_audio_drops_it(
        tmp_path: Path, channels: int, rate: int, why: str) -> None:
    src = pcm_clip(tmp_path / "pcm.mkv", gradient_frames(6), channels, rate)
    engine = Invert()
    with pytest.raises(InputError, match=f"audio stream 1 \\(pcm_s16le\\) has {why}.*--no-audio") as e:
        restore_video(src, tmp_path / "out.mp4", engine=engine)
    assert engine.seen == 0 and "writable" not in str(e.value)
    result = restore_video(src, tmp_path / "out.mp4", engine=Invert(), video=VideoOptions(audio=False))
    assert result.audio == "none" and read_clip(tmp_path / "out.mp4")["streams"] == [("video", "h264")]
    assert any("the sound was dropped, as asked (--no-audio)" in n for n in result.notes)


def test_a_header_that_differs_from_the_decoded_frames_is_said() -> None:
    from types import SimpleNamespace

    from gpen_core.video.limits import FrameGuard

    guard = FrameGuard("clip.mp4", (64, 64))
    for i in range(3):
        guard.check(SimpleNamespace(width=80, height=60), i, Fraction(1, 25))
    assert guard.notes == ["the file's header says 64×64 but its frames decode at 80×60: restored and written at 80×60"]


def test_no_audio_is_a_restore_flag() -> None:
    from gpen_core.cli import _parser

    assert _parser().parse_args(["restore", "clip.mp4", "-o", "o.mp4", "--no-audio"]).no_audio is True
    assert _parser().parse_args(["restore", "clip.mp4", "-o", "o.mp4"]).no_audio is False


def test_a_header_over_the_limit_is_refused_without_decoding_a_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Opening a clip decodes its first frames (FFmpeg's stream-info probe): 364 MiB for one 12000² H.264 frame.
    from gpen_core.images.limits import InputLimits

    monkeypatch.setattr("gpen_core.video.limits.DEFAULT_LIMITS", InputLimits(max_pixels=3000))
    src = make_clip(tmp_path / "big.mp4", gradient_frames(3))  # 64×48 = 3072 pixels
    opened: list[dict] = []
    real_open = av.open
    monkeypatch.setattr(av, "open", lambda *a, **k: opened.append(k.get("options") or {}) or real_open(*a, **k))
    note = video_tab.clip_note(str(src), None)
    assert not note.usable and "64×48" in note.markdown
    assert opened == [{"skip_frame": "all"}]  # refused by the headers alone: no open that decodes


def test_a_segmented_runs_summary_and_json_carry_the_same_fields_as_a_one_pass_runs(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gpen_core.options import RestoreOptions
    from gpen_core.video.resumable import LocalRunner, restore_in_segments

    from gpen_core.result import NetworkRuntime

    class Low(Invert):
        mode, reason = SimpleNamespace(name="low"), "the frames fit low mode's budget"
        runtimes = (NetworkRuntime("generator", "GPEN-BFR-256", "openvino", "measured faster here"),)
        planned_bytes = 123_000_000

    src = make_clip(tmp_path / "in.mp4", gradient_frames(12), rotation=90, audio="aac", audio_seconds=0.5, gop=4)
    one = restore_video(src, tmp_path / "one.mp4", engine=Low()).to_json()
    seg = restore_in_segments(src, tmp_path / "seg.mp4", LocalRunner(None, RestoreOptions(), 18, engine=Low()), "t",
                              segment_seconds=0.2).to_json()
    assert set(one) <= set(seg) and seg["segments"] >= 2
    same = ("frames", "fps", "duration", "size", "mode", "mode_reason", "audio", "crf", "rotation", "lookahead_frames",
            "damage", "runtimes", "planned_bytes")
    assert {k: seg[k] for k in same} == {k: one[k] for k in same}
    assert (one["size"], one["rotation"], one["mode"], one["planned_bytes"]) == ([48, 64], 90, "low", 123_000_000)
    assert one["runtimes"] == [{"network": "generator", "name": "GPEN-BFR-256", "runtime": "openvino",
                                "reason": "measured faster here"}]
    assert seg["peaks"]["rss_bytes"] > 0 and seg["peaks"]["method"] in ("vmhwm", "sampling")


def test_cli_exits_2_naming_a_frame_over_the_limit_and_writes_nothing(
        tmp_path: Path, low_mode_home: Path, one_thread: None, capsys: pytest.CaptureFixture) -> None:
    from gpen_core.cli import main

    src = mjpeg_clip(tmp_path / "bomb.mkv", (64, 64), [jpeg(64, 64), jpeg(BIG, BIG)])
    code = main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low"])
    err = capsys.readouterr().err
    assert code == 2 and f"decodes at {BIG}×{BIG}" in err and "Traceback" not in err
    assert _nothing_written(tmp_path)


def test_cli_no_audio_restores_a_clip_whose_audio_an_mp4_cannot_take_on_both_paths(
        tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    from gpen_core.cli import main
    from gpen_core.video.engine_seam import FrameEngine

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    src = pcm_clip(tmp_path / "pcm.mkv", gradient_frames(6), 16, 48000)
    refused = main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low"])
    assert refused == 2 and "16 channels" in capsys.readouterr().err
    for name, extra in (("one.mp4", []), ("seg.mp4", ["--segments"])):
        code = main(["restore", str(src), "-o", str(tmp_path / name), "--mode", "low", "--no-audio", *extra])
        out, err = capsys.readouterr()
        assert code == 0 and "note: the sound was dropped, as asked (--no-audio)" in err, err
        assert "over the clip's start; the mode's plan +" in out, out  # the real frame session's plan, both paths
        assert read_clip(tmp_path / name)["streams"] == [("video", "h264")]


# Variable frame timing (ms): gaps of 33 and 200 ms, 12 frames in 0.73 s that the header calls 25 fps (18 frames)
VFR_MS = [0, 33, 66, 266, 299, 332, 365, 565, 598, 631, 664, 697]


@pytest.mark.parametrize("pts", [None, VFR_MS], ids=["constant", "variable"])
def test_a_clip_whose_header_has_no_frame_count_gets_one_estimate_on_the_panel_the_cli_and_the_progress(
        tmp_path: Path, pts: list[int] | None) -> None:
    from gpen_core.cli_words import clip_frames

    # Matroska declares a duration, not a count; its rate is the muxer's (25 fps), whatever the frames' timing
    timing = {"pts": pts, "time_base": Fraction(1, 1000)} if pts else {}
    src = make_clip(tmp_path / "no_count.mkv", gradient_frames(12), **timing)
    seen: list[int] = []
    restore_video(src, tmp_path / "out.mp4", engine=Invert(), progress=lambda done, total: seen.append(total))
    note = video_tab.clip_note(str(src), None)
    assert note.frames == clip_frames(src)[0] == 12  # its packets counted: not 0.737 s × 25 fps = 18
    assert set(seen) == {12}
    assert "about 12 frames (counted from its packets; not declared)" in note.markdown  # labelled: decoding decides


@pytest.mark.parametrize(("free_ram", "then"), [(64 << 30, ": needs ~"), (50 << 20, ", the lightest mode: even it may need")])
def test_autos_choice_for_a_clip_is_said_once_with_the_frame_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   free_ram: int, then: str) -> None:
    # the clip's first note read "auto chose balanced for 480×360 frames: auto chose balanced: needs ..."
    from gpen_core.engine import budget, frames
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.options import RestoreOptions

    monkeypatch.setattr(budget, "free_memory", lambda device: budget.Free(free_ram, None))
    with frames.open_session(ModelCache(tmp_path, synthetic_weights=True), "cpu", RestoreOptions(), (480, 360)) as session:
        note = session.notes[0]
        assert note.startswith(f"auto chose {session.mode.name} for 480×360 frames{then}"), note
        assert note.count("auto chose") == 1, note
