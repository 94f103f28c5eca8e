"""The Video tab in Chromium: a short clip made from a real photo, restored in ``low`` in the page.

The shared server's length cap is said at upload (before anyone waits) and applied; the result plays in
the page's <video>, a frame's before/after shows in the slider, and the measured panel gives the clip's
figures. GPEN_SHOTS=dir keeps the screenshot to look at.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import app
from gpen_app.app_state import Policy

from .conftest import shared_path
from .fixtures_models import low_narrow_home, low_narrow_session_home  # noqa: F401
from .test_browser import PLENTY, Shots, _open, page_url, settle  # noqa: F401

pytestmark = pytest.mark.browser


def make_clip(path: Path, photo: Path, frames: int = 8, fps: int = 4, side: int = 192) -> Path:
    """An H.264 MP4 of ``frames`` frames of ``photo`` at ``side`` px, drifting a pixel a frame (a face that moves)."""
    import av

    rgb = np.asarray(Image.open(photo).convert("RGB").resize((side + frames, side + frames)))
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps, 1))
        stream.width, stream.height, stream.pix_fmt = side, side, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb[i:i + side, i:i + side]), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def test_a_clip_is_restored_in_the_page_with_the_cap_said_at_upload(browser, page_url: str, low_narrow_home: Path,  # noqa: F811
                                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, max_video_seconds=1.0))  # a Space's cap, made small
    clip = make_clip(tmp_path / "face_clip.mp4", shared_path("faces", "ffhq_00000_512.png"))  # 8 frames, 2 s
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.get_by_role("tab", name="Video").click()
    page.locator("#video-mode-radio label", has_text="low —").click()
    # what every mode does to a clip is said once, beside the modes, not in each mode's label
    assert page.locator("#video-mode-radio").inner_text().count("H.264") == 1, page.locator("#video-mode-radio").inner_text()
    page.locator("#video-in input[type=file]").set_input_files(str(clip))
    panel = page.locator("#video-metrics")
    panel.get_by_text("Ready to restore").wait_for(timeout=60_000)
    # said before anyone waits: the clip's length and the server's cap
    assert re.search(r"192×192 h264, 2\.0 s, 8 frames, no audio", panel.inner_text()), panel.inner_text()
    assert "restores the first 1 s only" in panel.inner_text()
    assert re.search(r"Estimate for 4 frames with one face in each", panel.inner_text())  # each mode's cost, before it runs
    assert re.search(r"low\s+0\.\d\d\s+about \d+ s", panel.inner_text()), panel.inner_text()
    # the faces a restore will number, offered before it runs
    page.locator("#video-options").get_by_text("Part of the clip").click()
    page.locator("#video-find-faces").click()
    page.locator("#video-tracks label", has_text="face 1: frames 1–4 (4 frames)").wait_for(timeout=60_000)
    assert "1 face followed in 4 frames" in page.locator("#video-found").inner_text()
    page.locator("#video-restore").click()
    panel.get_by_text("Measured for this clip").wait_for(timeout=60_000)
    text = panel.inner_text()
    assert re.search(r"Peak RAM\s+[\d.]+ (MB|GB)", text), text
    assert re.search(r"Frames\s+4 \(", text), text  # the cap: 1 s of a 4 fps clip
    assert "only the first 4 frames (1.00 s) were restored: this server's limit" in text  # where it cut, as decoded
    assert re.search(r"Audio\s+none in the input", text) and re.search(r"Mode\s+low", text), text
    # the result plays in the page: the browser decoded its first frame
    video = page.locator("#video-out video").first
    video.wait_for(state="attached", timeout=30_000)
    page.wait_for_function("() => { const v = document.querySelector('#video-out video'); return v && v.readyState >= 2 && v.videoWidth > 0; }",
                           timeout=30_000)
    assert video.evaluate("v => [v.videoWidth, v.videoHeight]") == [192, 192]
    page.locator("#video-slider img").first.wait_for(state="visible", timeout=30_000)
    assert page.locator("#video-slider img").count() >= 2  # the chosen frame, before and after
    settle(page)  # the frame pair painted
    # frames by number: every one reachable, its time said; the original over the same part plays beside it
    assert re.search(r"Frame \(1–4;", page.locator("#video-frame-at").inner_text())
    assert re.search(r"frame 2 of 4 \(0\.25 s\)", page.locator("#video-slider").inner_text()), page.locator("#video-slider").inner_text()
    page.wait_for_function("() => { const v = document.querySelector('#video-before video'); return v && v.readyState >= 2; }",
                           timeout=30_000)
    # the faces found on the frame, drawn over it, and the faces the clip followed offered for a rerun
    page.locator("#video-show-faces input").check()
    page.locator("#video-faces img").first.wait_for(state="visible", timeout=30_000)
    assert "1 restored" in page.locator("#video-faces").inner_text()
    page.locator("#video-tracks label", has_text="face 1: frames 1–4 (4 frames)").wait_for(timeout=10_000)
    assert page.locator("#video-tracks label").count() == 1
    shots.take(page, "video_tab_restored", full=True)
    # a part of the clip, the face check off: said back in the panel
    shown = page.locator("#video-before video").first.get_attribute("src")  # each restore writes into a folder of its own
    assert shown, page.locator("#video-before").inner_html()
    page.locator("#video-start input").fill("1")
    page.locator("#video-face-check input").uncheck()
    page.locator("#video-restore").click()
    # The last result stays on the page while the clip runs, so "Measured" says nothing yet: wait for this restore's
    # last update, its original over the new part, sent with the faces it offers (a box ticked before it lands is reset).
    page.wait_for_function("old => { const v = document.querySelector('#video-before video'); "
                           "return !!v && !!v.getAttribute('src') && v.getAttribute('src') !== old; }", arg=shown, timeout=300_000)
    assert re.search(r"Frames\s+4 \(", panel.inner_text())  # 1 s from 1 s on: frames 5–8 of the clip
    # a new upload starts afresh: no face choice of the last clip left to refuse the next restore
    page.locator("#video-tracks label").first.locator("input").uncheck()
    page.locator("#video-in button[aria-label='Clear']").first.click()
    page.locator("#video-in input[type=file]").set_input_files(str(clip))
    panel.get_by_text("Ready to restore").wait_for(timeout=60_000)
    assert page.locator("#video-tracks label").count() == 0 and page.locator("#video-found").inner_text().strip() == ""
    page.locator("#video-restore").click()
    panel.get_by_text("Measured for this clip").wait_for(timeout=60_000)
    page.close()


def test_on_a_phone_the_mode_comes_before_the_button_and_the_download_after_the_result(browser, page_url: str,  # noqa: F811
                                                                                        low_narrow_home: Path, tmp_path: Path) -> None:  # noqa: F811
    page = browser.new_page(viewport={"width": 390, "height": 844})
    _open(page, page_url)
    top = lambda sel: page.locator(sel).first.bounding_box()["y"]  # noqa: E731
    # the photo tab: the download sits right under the before/after, not below the whole panel
    assert top("#download") < top("#metrics"), (top("#download"), top("#metrics"))
    page.get_by_role("tab", name="Video").click()
    page.locator("#video-restore").wait_for()
    assert top("#video-mode-radio") < top("#video-restore") < top("#video-out")
    assert top("#video-options") < top("#video-restore")
    Shots(tmp_path).take(page, "video_tab_phone", full=True)
    page.close()
