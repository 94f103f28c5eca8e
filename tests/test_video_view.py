"""The Video tab's frame viewer and options as plain values: frames by number with their own times, the part
of the clip asked (and a shared server's cap), faces drawn on a frame, the original over the same span, the
face choice, and no stale ETA from the last clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_app import video_tab, video_view  # noqa: E402
from gpen_app.overlay import KEPT_COLOR, REJECTED_COLOR  # noqa: E402

from .videoclips import gradient_frames, make_clip, read_clip  # noqa: E402


def test_every_frame_is_reachable_by_number_at_its_own_time(tmp_path: Path) -> None:
    # frames stamped from 0.84 s on (a clip cut from a longer one), as the 0.852–9.994 s
    src = make_clip(tmp_path / "in.mp4", gradient_frames(10), pts=list(range(21, 31)))
    times = video_view.frame_times(str(src))
    assert times[0] == pytest.approx(0.84) and times[-1] == pytest.approx(1.2) and len(times) == 10
    spec = video_view.slider_spec(times)
    assert (spec["minimum"], spec["maximum"], spec["step"]) == (1, 10, 1)  # whole numbers, the last frame included
    assert video_view.frame_time(times, 10) == pytest.approx(1.2) and video_view.frame_time(times, 1) == pytest.approx(0.84)
    assert video_view.pair_label(times, 10) == "Before / after of frame 10 of 10 (1.20 s)"
    last = video_tab.frame_at(str(src), video_view.frame_time(times, 10))
    assert last is not None and abs(int(last[..., 0].mean()) - (9 * 37) % 256) < 6  # the last frame itself


def _clip(duration: float | None) -> video_tab.ClipNote:
    return video_tab.ClipNote("", duration, True)


def test_the_part_asked_and_the_servers_cap() -> None:
    assert video_tab.span(_clip(10.0), None, None, None) == video_tab.Span(None, None, False)
    assert video_tab.span(_clip(10.0), 2.5, 4.0, None) == video_tab.Span(2.5, 4.0, False)
    assert video_tab.span(_clip(10.0), 0, None, None) == video_tab.Span(None, None, False)  # 0: the start
    assert video_tab.span(_clip(100.0), 30.0, None, 60.0) == video_tab.Span(30.0, 90.0, True)  # at most the cap
    assert video_tab.span(_clip(100.0), 30.0, 50.0, 60.0) == video_tab.Span(30.0, 50.0, False)
    # an end past the clip's: restored to its end, and said (the panel's Frames row alone showed the shorter part)
    assert video_tab.span(_clip(1.0), 0.5, 5.0, None).notes == ("end 5 s is past the clip's end (1.00 s): restored to the clip's end",)
    with pytest.raises(InputError, match="after the clip's end"):
        video_tab.span(_clip(10.0), 12.0, None, None)
    with pytest.raises(InputError, match="must be after start"):
        video_tab.span(_clip(10.0), 5.0, 3.0, None)


def test_faces_on_a_frame_restored_left_out_and_rejected() -> None:
    rgb = np.full((120, 200, 3), 100, np.uint8)
    faces = video_view.FrameFaces(((0, (10, 10, 60, 60)), (1, (80, 10, 130, 60))), ((140, 70, 190, 110),))
    drawn, caption = video_view.draw_faces(rgb, faces, {1})
    assert tuple(drawn[35, 10]) == KEPT_COLOR  # face 1's left edge: restored
    assert tuple(drawn[35, 80]) == video_view.LEFT_ALONE_COLOR  # face 2: unticked, left as it was
    assert tuple(drawn[71, 140]) == REJECTED_COLOR  # the face check's refusal
    assert "1 restored" in caption and "1 left as they were by your choice" in caption and "1 rejected by the face check" in caption
    assert video_view.track_choices([faces, faces]) == [("face 1: frames 1–2 (2 frames)", 0), ("face 2: frames 1–2 (2 frames)", 1)]
    assert video_view.found_text([faces, video_view.FrameFaces((), ())]) == (
        "2 faces followed in 2 frames; the face check rejected 1 detection in 1 frame (turn Face check off to restore them).")


def test_a_frame_without_faces_says_none_found_rather_than_0_restored_in_green() -> None:
    # a face that left the frame: the caption read "0 restored (solid green, numbered as in the face choice)"
    _, caption = video_view.draw_faces(np.full((60, 80, 3), 100, np.uint8), video_view.FrameFaces((), ()))
    assert caption == "none found (the frame is as it came)."


def test_the_original_over_the_restored_span_plays_beside_it(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(20), audio="aac", audio_seconds=0.8)
    assert video_view.original_span(str(src), tmp_path / "o.mp4", None, None, 18) == str(src)  # whole: the upload
    out = video_view.original_span(str(src), tmp_path / "o.mp4", 0.2, 0.6, 18)
    clip = read_clip(Path(out))
    assert len(clip["frames"]) == 10 and video_view.frame_times(out)[0] == pytest.approx(0.0)
    assert abs(int(clip["frames"][0][..., 0].mean()) - (5 * 37) % 256) < 6  # frame 5 of the original opens it


def test_only_the_offered_faces_unticked_are_left_as_they_were() -> None:
    from gpen_app.video_wiring import _left_out

    known = [("face 1", 0), ("face 2", 1)]
    assert _left_out([], []) == frozenset() and _left_out([0, 1], known) == frozenset()
    assert _left_out([1], known) == frozenset({0})  # face 3, never offered, is not in it: it is restored
    with pytest.raises(InputError, match="No face is ticked"):
        _left_out([], known)
    assert _left_out([], known, refuse=False) == frozenset({0, 1})  # the frame viewer greys them, refusing nothing
    # a face the list never offered is drawn restored beside the unticked one
    faces = video_view.FrameFaces(((0, (10, 10, 60, 60)), (2, (80, 10, 130, 60))), ())
    drawn, caption = video_view.draw_faces(np.full((120, 200, 3), 100, np.uint8), faces, _left_out([1], known))
    assert tuple(drawn[35, 10]) == video_view.LEFT_ALONE_COLOR and tuple(drawn[35, 80]) == KEPT_COLOR
    assert caption.startswith("1 restored") and "1 left as they were by your choice" in caption


def test_a_run_starts_without_the_last_clips_time() -> None:
    import gradio as gr

    from gpen_app.queue_seam import forget_run_time

    with gr.Blocks() as demo:
        button = gr.Button()
        event = button.click(lambda: None)
        forget = forget_run_time(event)
    demo._queue.process_time_per_fn[event.fn].add(600.0)  # a 10-minute clip before
    forget()
    assert event.fn not in demo._queue.process_time_per_fn


def test_the_video_tab_forgets_each_runs_time() -> None:
    import app

    deps = app.demo.config["dependencies"]
    restore = next(d for d in deps if d.get("api_name") == "restore_video")
    after = [d for d in deps if restore["id"] in (d.get("trigger_after"),) and not d.get("trigger_only_on_success")
             and not d.get("trigger_only_on_failure")]
    assert after, "no handler runs after every clip"


def test_an_end_of_0_is_the_clips_end_as_the_field_shows_it_empty() -> None:
    assert video_tab.span(_clip(10.0), 0, 0, None) == video_tab.Span(None, None, False)
    with pytest.raises(InputError, match="0 or more"):
        video_tab.span(_clip(10.0), -1, None, None)


def test_with_no_clip_the_viewer_names_no_frame_of_a_clip_that_is_gone() -> None:
    """After a Stop the viewer read "Before / after of frame 1 of 0 (0.00 s)"; after a new upload the slider kept the
    last clip's "Frame (1–12; …)" and the before/after its frame's caption."""
    from gpen_app.video_wiring import _Handlers

    assert video_view.pair_label([], 1) == "Before / after of that frame"
    out = _Handlers(None, None, Path("."), None).note(None)  # the Video box cleared: the last clip's viewer goes
    pair, slider = out[3], out[5]
    assert pair["value"] is None and pair["label"] == "Before / after of that frame"
    assert slider["label"] == "Frame" and slider["interactive"] is False and slider["value"] == 1
