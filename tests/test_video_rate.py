"""A clip's time left from this run's own frames (a fake clock): not the networks' loading, not the frames a
resumed run kept from before; and the CLI's progress line on a resume."""

from __future__ import annotations

import io

import pytest

from gpen_core.video.rate import FrameRate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_estimate_leaves_out_the_loading() -> None:
    clock = Clock()
    rate = FrameRate(clock)
    clock.now = 30.0  # the networks loaded, then the first frame came out
    assert rate(1, 275).left_s is None  # nothing measured yet: no estimate rather than a wrong one
    clock.now = 32.0
    r = rate(2, 275)
    assert r.seconds_per_frame == pytest.approx(2.0) and r.left_s == pytest.approx(273 * 2.0)  # not 273 × 16 s


def test_after_a_resume_only_this_runs_frames_count() -> None:
    clock = Clock()
    rate = FrameRate(clock)
    assert rate(160, 200).left_s is None  # the frames kept from before, reported at once
    clock.now = 4.0
    r = rate(162, 200)
    assert r.seconds_per_frame == pytest.approx(2.0) and r.left_s == pytest.approx(76.0)


def test_the_cli_line_after_a_resume_says_this_runs_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.video.command import VideoBar

    log = io.StringIO()  # not a terminal: a line per tenth
    monkeypatch.setattr("sys.stderr", log)
    bar = VideoBar("clip.mp4")
    clock = Clock()
    bar.rate = FrameRate(clock)
    bar(160, 200)  # kept from before
    clock.now = 20.0
    bar(180, 200)  # 20 frames in 20 s
    first, second = log.getvalue().splitlines()
    assert first == "clip.mp4: frame 160/200"  # no speed yet, rather than 160 frames in no time
    assert second == "clip.mp4: frame 180/200,  1.00 fps, about 20 s left"  # worded as the app's and the check's


def test_a_trimmed_clips_progress_has_a_total(tmp_path) -> None:
    from gpen_core.video.engine_seam import FrameOut
    from gpen_core.video.stream import VideoOptions, restore_video

    from .videoclips import gradient_frames, make_clip

    class Unchanged:
        def detect(self, rgb):
            return []

        def restore(self, rgb, detections):
            return FrameOut(rgb, ())

    src = make_clip(tmp_path / "in.mp4", gradient_frames(20))  # 25 fps: 0.8 s
    seen: list[tuple[int, int]] = []
    r = restore_video(src, tmp_path / "out.mp4", video=VideoOptions(start_s=0.2, end_s=0.6), engine=Unchanged(),
                      progress=lambda done, total: seen.append((done, total)))
    assert r.frames == 10 and seen[-1] == (10, 10) and {t for _, t in seen} == {10}


def test_the_terminal_line_is_redrawn_over_a_longer_one_without_leftovers(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.video.command import VideoBar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Tty()
    monkeypatch.setattr("sys.stderr", term)
    bar = VideoBar("clip.mp4")
    clock = Clock()
    bar.rate = FrameRate(clock)
    for now, done in ((0.0, 1), (200.0, 101), (1000.0, 990)):  # 100 frames in 200 s: 30 min left; then 10 s
        clock.now, bar.last = now, float("-inf")  # past the redraw's 0.2 s throttle
        bar(done, 1000)
    drawn = term.getvalue().split("\r")[1:]
    assert drawn[1].endswith("about 30 min left") and drawn[2].startswith("clip.mp4: frame 990/1000")
    assert len(drawn[2]) == len(drawn[1]), drawn  # padded over the longer line it replaces
