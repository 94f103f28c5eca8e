"""The Video tab's words (gpen_app.video_tab) and the shared server's length cap (app_state)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from gpen_app import video_tab
from gpen_app.app_state import Policy, parse_server_args
from gpen_core.result import Peaks


def _clip(path: Path, frames: int = 6, fps: int = 3, side: int = 64) -> Path:
    import av

    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=Fraction(fps, 1))
        s.width, s.height, s.pix_fmt = side, side, "yuv420p"
        for i in range(frames):
            rgb = np.full((side, side, 3), 20 * i, np.uint8)
            out.mux(s.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        out.mux(s.encode())
    return path


def test_the_cap_is_said_at_upload_on_a_shared_server_only(tmp_path: Path) -> None:
    clip = _clip(tmp_path / "c.mp4")  # 6 frames at 3 fps: 2 s
    local = video_tab.clip_note(str(clip), Policy(shared=False, max_video_seconds=1).video_cap_s)
    assert local.usable and local.cap is None and "restores the first" not in local.markdown
    assert "64×64 h264, 2.0 s, 6 frames, no audio" in local.markdown
    shared = video_tab.clip_note(str(clip), Policy(shared=True, max_video_seconds=1).video_cap_s)
    assert video_tab.span(shared, None, None, 1.0).end_s == 1.0 and "restores the first 1 s only" in shared.markdown
    # ... and names the command that restores the whole clip in segments a rerun resumes
    assert "`python -m gpen_core restore c.mp4 -o c_restored.mp4 --segments`" in shared.markdown
    assert "--segments" not in local.markdown  # a short clip on a local run: nothing to add
    long_enough = video_tab.clip_note(str(clip), Policy(shared=True, max_video_seconds=5).video_cap_s)
    assert video_tab.span(long_enough, None, None, 5.0).end_s is None  # a clip under the cap is restored whole
    assert "restores the first" not in long_enough.markdown


def test_the_upload_names_the_audio_it_found_not_a_count_of_streams(tmp_path: Path) -> None:
    # it said "1 audio stream(s)": not whether the sound is a kind an MP4 takes as it is
    from tests.videoclips import gradient_frames, make_clip

    clip = make_clip(tmp_path / "a.mp4", gradient_frames(3), audio="aac", audio_seconds=0.1)
    assert "3 frames, aac audio. Press" in video_tab.clip_note(str(clip), None).markdown


def test_the_upload_gives_a_turned_clips_size_as_it_shows_and_is_written(tmp_path: Path) -> None:
    # a phone's portrait clip is stored landscape with a rotation tag: the upload said "64×48", the result 48×64
    from tests.videoclips import gradient_frames, make_clip

    clip = make_clip(tmp_path / "r.mp4", gradient_frames(2), rotation=90)
    assert "48×64 h264 (stored 64×48, shown turned 90°), " in video_tab.clip_note(str(clip), None).markdown


def test_a_one_frame_clip_is_said_as_1_frame_at_upload_and_by_find_faces(tmp_path: Path) -> None:
    from gpen_app import video_view
    from tests.videoclips import gradient_frames, make_clip

    one = make_clip(tmp_path / "one.mp4", gradient_frames(1))
    assert ", 1 frame, no audio." in video_tab.clip_note(str(one), None).markdown  # it said "1 frames"
    assert video_view.found_text([video_view.FrameFaces(((0, (10, 10, 40, 40)),), ())]) == "1 face followed in 1 frame."


def test_a_file_that_is_no_video_is_refused_at_upload(tmp_path: Path) -> None:
    bad = tmp_path / "notes.mp4"
    bad.write_bytes(b"hello, this is text")
    note = video_tab.clip_note(str(bad), None)
    assert not note.usable and "not a video" in note.markdown


def test_the_cap_flag_and_its_default() -> None:
    assert parse_server_args([]).policy.video_cap_s is None  # local: no cap
    assert parse_server_args(["--share"]).policy.video_cap_s == 60.0
    assert parse_server_args(["--share", "--max-video-seconds", "0"]).policy.video_cap_s is None
    assert parse_server_args(["--host", "0.0.0.0", "--max-video-seconds", "30"]).policy.video_cap_s == 30.0


def test_progress_counts_frames_and_the_time_left() -> None:
    from gpen_core.video.rate import Rate

    assert video_tab.progress_text(12, 48, Rate(2.0, 72.0)) == "frame 12 of 48, about 70 s left"
    assert video_tab.progress_text(12, 0, Rate(2.0, None)) == "frame 12 (2.0 s a frame)"
    assert video_tab.progress_text(1, 48, Rate(None, None)) == "frame 1 of 48, timing the next frames"  # no guess yet
    assert "loading the networks" in video_tab.progress_text(0, 0, None)
    assert video_tab.progress_fraction(12, 48) == 0.25 and video_tab.progress_fraction(3, 0) is None


def test_the_clip_panel_says_what_was_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.faces import identity_model
    from gpen_core.video.result import VideoResult

    r = VideoResult(output="o.mp4", frames=48, fps=24.0, duration_s=2.0, size=(640, 360), mode="low", mode_reason="",
                    audio="re-encoded", crf=18, seconds_per_frame=0.5, total_s=24.0, faces_per_frame_max=2,
                    peaks=Peaks(900_000_000, 400_000_000, "vmhwm"), rotation=90, lookahead_frames=3, notes=(),
                    planned_bytes=700_000_000)
    md = video_tab.video_markdown(r)
    assert "| Peak RAM | **900 MB** (baseline 400 MB before the clip, +500 MB) |" in md
    assert "| Memory plan | +700 MB above the clip's start: what low was chosen or checked by" in md
    assert "Memory plan" not in video_tab.video_markdown(replace(r, planned_bytes=None))  # a GPU: no row
    assert "| Frames | 48 (2.00 s at 24.00 fps on average), 640×360 |" in md
    assert "| Audio | re-encoded to AAC" in md and "turned upright from 90°" in md and "| Mode | low |" in md
    # Not checked: the one reason that held, not a list of possible ones (the tab's switch on is auto's rule).
    assert "| Identity | not checked: low mode leaves it out" in md
    # the visitor's own switch off is the reason, in low too (it said "low mode leaves it out")
    assert "| Identity | not checked: the Identity check switch is off |" in video_tab.video_markdown(r, identity_on=False)
    monkeypatch.setattr(identity_model, "available", lambda: False)
    balanced = replace(r, mode="balanced")
    assert "| Identity | not checked: dlib is not installed here. Fix: `pip install" in video_tab.video_markdown(balanced)
    monkeypatch.setattr(identity_model, "available", lambda: True)
    assert "| Identity | not checked: the Identity check switch is off |" in video_tab.video_markdown(balanced)


def test_frame_pair_reads_the_same_time_from_both_files(tmp_path: Path) -> None:
    clip = _clip(tmp_path / "c.mp4")
    pair = video_tab.frame_pair(str(clip), str(clip), 1.0)  # frame 3 (grey 60)
    assert pair is not None and pair[0].shape == (64, 64, 3)
    assert abs(float(pair[0].mean()) - 60) < 4 and np.array_equal(pair[0], pair[1])


@pytest.mark.parametrize("source, name", [(None, "video_gpen_low.mp4"), ("/x/My clip (1).mov", "My_clip_1_gpen_low.mp4")])
def test_the_output_is_an_mp4_named_after_the_upload_as_photos_are(source: str | None, name: str) -> None:
    assert video_tab.output_name(source, "low") == name


@pytest.mark.parametrize("labels", ["loaded", "before load"])
def test_the_video_tab_offers_only_modes_that_paste_the_faces_back(labels: str) -> None:
    from gpen_app import mode_labels

    choices = mode_labels.mode_choices("cpu", video=True) if labels == "loaded" else mode_labels.hints(video=True)
    kept = [value for _, value in choices]
    assert "faces-only" not in kept and {"auto", "low", "balanced", "quality"} <= set(kept)
    assert "faces-only" in [value for _, value in mode_labels.mode_choices("cpu")]  # photos keep it


@pytest.mark.parametrize("labels", ["loaded", "before load"])
def test_video_mode_labels_speak_of_clips_not_photos(labels: str) -> None:
    from gpen_app import mode_labels

    choices = mode_labels.mode_choices("cpu", video=True) if labels == "loaded" else mode_labels.hints(video=True)
    text = " ".join(label for label, _ in choices)
    for photo_word in ("photo", "JPEG", "PNG", "lossless"):
        assert photo_word not in text, text
    assert "frames over 2048 px shrunk" in text and "once for the whole clip" in text
    # what every mode does to a clip is said once, as the radio's info, not repeated in each mode's label
    assert "H.264" not in text and "H.264 MP4" in mode_labels.VIDEO_OUTPUT
    assert "per photo" in mode_labels.mode_choices("cpu")[0][0]  # the photo tab keeps its own words


def test_the_panel_says_other_work_shared_the_peak_in_plain_words() -> None:
    from gpen_core.video.result import VideoResult

    shared = "thread 'Thread-1 (run)' of this process worked alongside it (81 ms CPU, 1659 MB of page faults)"
    r = VideoResult(output="o.mp4", frames=4, fps=4.0, duration_s=1.0, size=(64, 64), mode="low", mode_reason="",
                    audio="none", crf=18, seconds_per_frame=0.5, total_s=2.0, faces_per_frame_max=1,
                    peaks=Peaks(900_000_000, 400_000_000, "vmhwm", shared=shared), rotation=0, lookahead_frames=3, notes=())
    md = video_tab.video_markdown(r)
    assert "Thread-1" not in md and "page faults" not in md and "other work in this app ran during the clip" in md
    assert r.to_json()["peaks"]["shared"] == shared  # the meter's own words stay in the record


def test_each_modes_cost_is_estimated_before_the_clip_starts(tmp_path: Path) -> None:
    clip = _clip(tmp_path / "c.mp4", frames=6, fps=3)
    assert video_tab.clip_note(str(clip), None).frames == 6
    assert video_tab.clip_note(str(clip), 1.0).frames == 3  # a shared server's cap: 1 s at 3 fps
    measured = {"balanced": (0.5, "measured on this machine (2026-12-01)")}
    rows = video_tab.estimates(["low", "balanced", "quality"], "cpu", lambda m, d: measured.get(m))
    assert [(r.mode, r.seconds_per_face) for r in rows] == [("low", 0.13), ("balanced", 0.5), ("quality", 1.57)]
    md = video_tab.estimate_markdown(600, rows)
    assert md.startswith("**Estimate** for 600 frames with one face in each")
    assert "| balanced | 0.50 | about 5 min | measured on this machine (2026-12-01) |" in md
    assert "| quality | 1.57 | about 16 min | built-in: the project's CPU" in md
    assert video_tab.estimate_markdown(0, rows) == ""  # frames unknown: no made-up figure


def test_autos_reason_is_said_once_in_the_panel() -> None:
    from gpen_core.video.result import VideoResult

    why = "auto chose low for 640×360 frames: fits (needs ~0.4 GB of 2.0 GB free (built-in estimate))"
    r = VideoResult(output="o.mp4", frames=4, fps=4.0, duration_s=1.0, size=(640, 360), mode="low", mode_reason=why,
                    audio="none", crf=18, seconds_per_frame=0.5, total_s=2.0, faces_per_frame_max=1,
                    peaks=Peaks(900_000_000, 400_000_000, "vmhwm"), rotation=0, lookahead_frames=3, notes=(why, "x"))
    md = video_tab.video_markdown(r)
    assert md.count(why) == 1 and "| Mode | low (why: the first note) |" in md
