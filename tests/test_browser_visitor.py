"""What one visitor meets in Chromium: a video dropped on the photo tab is pointed to the Video tab, a Stop is
an outcome in a pop-up that closes by itself (not an "Error"), and closing the page stops the clip and
removes what it wrote. The clip's frames go through test_app_video_sessions' stand-in engine (a known time a
frame, no network). GPEN_SHOTS=dir keeps the screenshots to look at.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import app
from gpen_app import messages, page as page_texts

from .test_app_video_sessions import FRAMES, Slow, _folders, _wait, clip, engines, results  # noqa: F401
from .test_browser import Shots, _open, page_url  # noqa: F401

pytestmark = pytest.mark.browser


def test_a_video_on_the_photo_tab_is_pointed_to_the_video_tab(browser, page_url: str, clip: Path,  # noqa: F811
                                                              tmp_path: Path) -> None:
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.locator("#photo input[type=file]").first.set_input_files(str(clip))
    note = page.locator("#video-on-photo")
    note.wait_for(timeout=10_000)
    assert page_texts.VIDEO_ON_PHOTO_TAB in note.inner_text()
    assert page.get_by_text("Invalid file type").count() == 0  # Gradio's answer, which names no way out
    shots.take(page, "video_on_photo_tab", full=False)
    note.get_by_role("button", name="Open the Video tab").click()
    page.locator("#video-in").wait_for(state="visible", timeout=10_000)
    page.close()


def _start_clip(page, clip: Path, engines: list[Slow], upload: bool = True) -> Slow:  # noqa: F811
    if upload:
        page.get_by_role("tab", name="Video").click()
        page.locator("#video-in input[type=file]").set_input_files(str(clip))
        page.locator("#video-metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    started = len(engines)
    page.locator("#video-restore").click()
    _wait(lambda: len(engines) > started and engines[-1].restored >= 3)
    return engines[-1]


def test_stop_is_an_outcome_that_closes_and_leaving_stops_the_clip(browser, page_url: str, clip: Path,  # noqa: F811
                                                                  engines: list[Slow], tmp_path: Path,  # noqa: F811
                                                                  results: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(messages, "TOAST_BASE_S", 2.0)  # the pop-up's reading time, shortened for the test
    monkeypatch.setattr(messages, "TOAST_WORDS_PER_S", 1000.0)
    # 30 s of engine time a clip: a Stop that takes seconds to arrive on a loaded machine (a browser, a
    # server and another test worker on 2 cores) still lands well before the clip's end
    monkeypatch.setattr(Slow, "delay", 0.25)
    shots = Shots(tmp_path)
    before = _folders(results)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    engine = _start_clip(page, clip, engines)
    page.locator("#video-stop").click()
    toast = page.locator("[data-testid=toast-body]", has_text="nothing kept").first
    toast.wait_for(timeout=30_000)
    page.locator("#video-metrics").get_by_text("nothing kept").wait_for(timeout=30_000)
    assert engine.restored < FRAMES / 2
    assert "Error" not in toast.inner_text() and "error" not in (toast.get_attribute("class") or "")  # not a red error pop-up
    assert toast.locator(".toast-title").inner_text().strip() == "Stopped", toast.inner_text()  # not Gradio's "Info"
    assert " of 0 " not in page.locator("#video-slider").inner_text()  # no frame of a clip that is gone
    shots.take(page, "video_stopped", full=False)
    toast.wait_for(state="detached", timeout=15_000)  # it closes by itself
    assert _folders(results) == before
    # the visitor closes the page mid-clip: the clip stops within a few frames, and what it wrote is gone
    engine = _start_clip(page, clip, engines, upload=False)  # the same clip, still in the page
    page.close()
    left_at = engine.restored
    _wait(lambda: app.STATE.stops.running() == 0, timeout=20)
    time.sleep(0.3)
    assert engine.restored - left_at <= 25, (left_at, engine.restored)  # a few frames (250 ms each), not the 120
    assert _folders(results) == before


def test_a_file_that_is_no_video_is_named_as_uploaded_once_in_plain_words(browser, page_url: str,  # noqa: F811
                                                                           tmp_path: Path) -> None:
    shots = Shots(tmp_path)
    bad = tmp_path / "notes.mp4"
    bad.write_bytes(b"hello, this is text")
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.get_by_role("tab", name="Video").click()
    page.locator("#video-in input[type=file]").set_input_files(str(bad))
    panel = page.locator("#video-metrics")
    panel.get_by_text("notes.mp4 is not a video").wait_for(timeout=60_000)
    page.locator("#video-restore").click()
    toast = page.locator("[data-testid=toast-body]", has_text="notes.mp4 is not a video").first
    toast.wait_for(timeout=30_000)
    shots.take(page, "video_tab_not_a_video", full=False)
    for text in (panel.inner_text(), toast.inner_text()):
        assert str(app.TEMP_ROOT) not in text and "\\(" not in text and "*Nothing" not in text, text
    assert panel.inner_text().count("notes.mp4 is not a video") == 1 and panel.inner_text().count("Nothing was restored") <= 1
    page.close()


def test_an_unavailable_mode_keeps_the_previous_clip(browser, page_url: str, clip: Path, engines: list[Slow],  # noqa: F811
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's models folder is empty: auto runs (the stand-in engine), low is labelled unavailable."""
    monkeypatch.setattr(Slow, "delay", 0.0)  # the first clip only has to be there
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    _start_clip(page, clip, engines)
    panel = page.locator("#video-metrics")
    panel.get_by_text("Measured for this clip").wait_for(timeout=60_000)
    page.locator("#video-mode-radio label", has_text="low —").click()
    page.locator("#video-restore").click()
    toast = page.locator("[data-testid=toast-body]", has_text="low needs").first
    toast.wait_for(timeout=30_000)
    assert "on the Restore tab choose low and press “Download GPEN-BFR-256" in toast.inner_text(), toast.inner_text()
    shots.take(page, "video_unavailable_mode", full=False)
    assert "Measured for this clip" in panel.inner_text() and len(engines) == 1  # nothing ran, the result stays
    assert page.locator("#video-out video").count() == 1
    # a clip that fails once it runs keeps the last clip in the player too: the panel says which one it is
    from gpen_app import video_wiring
    from gpen_core.errors import InputError

    def refused(*args: object) -> None:
        raise InputError("The part asked starts after the clip's end.")

    monkeypatch.setattr(video_wiring._Handlers, "clip_part", refused)
    page.locator("#video-mode-radio label", has_text="auto —").click()
    page.locator("#video-restore").click()
    panel.get_by_text("Nothing was restored: the video shown is the previous result.").wait_for(timeout=30_000)
    assert page.locator("#video-out video").count() == 1 and len(engines) == 1
    page.close()


def test_an_example_clicked_fills_the_photo(browser, page_url: str) -> None:  # noqa: F811
    """The Examples (a Dataset whose click sets the photo as a plain value, test_app_client) show their thumbnails,
    and a click puts that photo in the Photo box."""
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    thumbs = page.locator("[data-testid='examples'] img, .gallery img")
    assert thumbs.count() >= 4
    assert page.locator("#photo img").count() == 0
    thumbs.first.click()
    page.locator("#photo img").first.wait_for(timeout=30_000)
    assert "astronaut" in (page.locator("#photo img").first.get_attribute("src") or "")
    page.close()


def test_an_upload_over_a_visitors_share_pops_up_in_plain_words(browser, page_url: str,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared server refuses a visitor's upload past their hourly share with when they can upload again; Gradio's
    page put "HTTP 429: " before those words. This page's visitor (127.0.0.1) has a 1 kB share: any photo is over it."""
    from gpen_app.app_state import Policy

    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, visitor_upload_bytes=1000))
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.locator("#photo input[type=file]").set_input_files(str(next(app.EXAMPLES_DIR.glob("*.jpg"))))
    text = page.locator("[data-testid=toast-text]", has_text="each visitor may upload").first
    text.wait_for(timeout=30_000)
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=toast-text]')].every(e => !/HTTP/.test(e.innerText))",
                           timeout=3_000)  # the prefix goes as the pop-up appears; left there, this times out
    assert text.inner_text().startswith("This upload is "), text.inner_text()
    page.close()


def test_a_refused_upload_leaves_no_earlier_photo_in_the_panel(browser, page_url: str,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused upload empties the Photo box; the before/after and the panel still showed the earlier photo with
    "Ready to restore", a Restore away from an "Upload a photo first" refusal. They follow the box, as on a clear."""
    from gpen_app.app_state import Policy

    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    photos = sorted(app.EXAMPLES_DIR.glob("*.jpg"))
    page.locator("#photo input[type=file]").set_input_files(str(photos[0]))
    metrics = page.locator("#metrics")
    metrics.get_by_text("Ready to restore").wait_for(timeout=30_000)
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, visitor_upload_bytes=1000))  # the next one is refused
    page.locator("#photo input[type=file]").set_input_files(str(photos[1]))
    page.locator("[data-testid=toast-text]", has_text="each visitor may upload").first.wait_for(timeout=30_000)
    metrics.get_by_text(page_texts.PLACEHOLDER.strip("*")).wait_for(timeout=10_000)
    assert "Ready to restore" not in metrics.inner_text() and page.locator("#photo img").count() == 0
    assert page.locator("#slider img").count() == 0, "the before/after still shows the earlier photo"
    page.close()


def test_a_restore_stopped_while_it_waits_ends_at_once_as_a_stopped_one(browser, page_url: str, tmp_path: Path,  # noqa: F811
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two visitors' pages: A's restore holds the engine (a stand-in), B's waits behind it and B presses Stop. B's
    page says Stopped (a pop-up that closes by itself, and the panel) while A's still runs; A's then ends as usual.
    The Stop is an outcome, as a clip's is: a grey Info headed "Stopped", not a red error."""
    import threading

    from gpen_app import weights_view

    from .test_stop_full_queue import EXAMPLE, _result

    monkeypatch.setattr(messages, "TOAST_BASE_S", 5.0)  # up long enough for its screenshot
    monkeypatch.setattr(messages, "TOAST_WORDS_PER_S", 1000.0)
    monkeypatch.setattr(weights_view, "check_mode_ready", lambda *a, **k: None)  # no weights here: the engine is stood in for
    calls, release = [], threading.Event()

    def run_engine(image: str, options: object, progress: object, mask: object = None) -> object:
        calls.append(image)
        if len(calls) == 1:
            release.wait(30)
        return _result()

    monkeypatch.setattr(app, "run_engine", run_engine)
    pages = []
    try:
        for _ in range(2):
            page = browser.new_page(viewport={"width": 1366, "height": 900})
            pages.append(page)
            _open(page, page_url)
            page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
            page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
        a, b = pages
        a.locator("#restore-button").click()
        _wait(lambda: len(calls) == 1)
        b.locator("#restore-button").click()
        _wait(lambda: len(app.demo._queue) == 1)  # B's waits behind A's
        b.locator("#restore-stop").click()
        toast = b.locator("[data-testid=toast-body]", has_text="while it waited in the queue").first
        toast.wait_for(timeout=10_000)
        b.locator("#metrics").get_by_text("Stopped").wait_for(timeout=10_000)
        b.wait_for_timeout(800)  # the pop-up's fade-in over
        Shots(tmp_path).take(b, "photo_stopped_while_waiting", full=False)
        toast.screenshot(path=str(Shots(tmp_path).dir / "photo_stopped_pop_up.png"))  # the pop-up alone, to look at
        assert "Press Restore to start again" in b.locator("#metrics").inner_text()
        assert "Error" not in toast.inner_text() and "error" not in (toast.get_attribute("class") or "")  # not a red error pop-up
        assert toast.locator(".toast-title").inner_text().strip() == "Stopped", toast.inner_text()  # not Gradio's "Info"
        assert toast.locator("[data-testid=toast-text]").inner_text().startswith("The restore ended at your Stop"), toast.inner_text()
        assert len(calls) == 1 and not release.is_set()  # B's never reached the engine, A's still runs
        toast.wait_for(state="detached", timeout=15_000)  # it closes by itself
        assert not b.locator("#restore-stop").is_visible()
        release.set()
        a.locator("#metrics").get_by_text("GPEN-BFR-256").first.wait_for(timeout=30_000)  # A's result, as usual
    finally:
        release.set()
        for page in pages:
            page.close()


def test_a_refusal_is_headed_by_its_kind_and_takes_the_stop_button_with_it(browser, page_url: str,  # noqa: F811
                                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio heads every refusal "Error", whatever title the server sends: the page puts our kind of problem there,
    the message without it, unless the pop-up holds messages of different kinds. A refused restore leaves no Stop
    button (Gradio's page runs no ``.then`` after an error). The module's models folder is empty: low is unavailable."""
    monkeypatch.setattr(messages, "TOAST_BASE_S", 60.0)  # both refusals still up when the second arrives
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.locator("#restore-button").click()
    toast = page.locator("[data-testid=toast-body]").first
    toast.get_by_text("Upload a photo first").wait_for(timeout=30_000)
    heading, texts = toast.locator(".toast-title"), toast.locator("[data-testid=toast-text]")
    assert heading.inner_text().strip() == "Cannot use this input", toast.inner_text()
    assert texts.inner_text().strip() == "Upload a photo first (or paste one from the clipboard).", toast.inner_text()
    page.locator("#restore-stop").wait_for(state="hidden", timeout=10_000)  # nothing runs: nothing to stop
    # a fresh page had no result to clear: the panel says so (it said "the previous result was cleared")
    metrics = page.locator("#metrics")
    metrics.get_by_text("Nothing was restored.").wait_for(timeout=10_000)
    assert "previous result" not in metrics.inner_text(), metrics.inner_text()
    Shots(tmp_path).take(page, "refusal_heading", full=False)
    # a refusal of another kind joins the pop-up: Gradio's heading, each message with its own kind
    page.locator("#mode-radio label", has_text="low —").click()
    page.locator("#restore-button").click()
    toast.get_by_text("low needs").wait_for(timeout=30_000)
    assert heading.inner_text().split() == ["Error", "(2)"], toast.inner_text()
    assert [t.split(". ")[0] for t in texts.all_inner_texts()] == ["Cannot use this input", "Weights missing"], toast.inner_text()
    # another tab chosen: the photo tab's pop-ups go (they named its photo and its button), and the reverse
    page.get_by_role("tab", name="Video").click()
    toast.wait_for(state="detached", timeout=10_000)
    page.locator("#video-mode-radio label", has_text="low —").click()
    page.locator("#video-restore").click()
    clip_toast = page.locator("[data-testid=toast-body]", has_text="low needs").first
    clip_toast.wait_for(timeout=30_000)
    page.get_by_role("tab", name="Restore").click()
    clip_toast.wait_for(state="detached", timeout=10_000)
    page.close()


def test_restore_pressed_while_find_faces_runs_restores_every_face(browser, page_url: str, clip: Path,  # noqa: F811
                                                                   engines: list[Slow], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Find faces ticks every face it lists. A Restore pressed while it ran read the new list with no box ticked yet
    and was refused "No face is ticked"; it restores every face. The list still counts: untick its face, refused."""
    from gpen_app import video_view

    def one_face(*args, **kwargs):
        time.sleep(0.3)  # as long as a short clip's first seconds take to detect
        return [video_view.FrameFaces(((0, (8.0, 8.0, 40.0, 40.0)),), ())]

    monkeypatch.setattr(video_view, "find_faces", one_face)
    monkeypatch.setattr(Slow, "delay", 0.0)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    _open(page, page_url)
    page.get_by_role("tab", name="Video").click()
    page.locator("#video-in input[type=file]").set_input_files(str(clip))
    panel = page.locator("#video-metrics")
    panel.get_by_text("Ready to restore").wait_for(timeout=60_000)
    page.locator("#video-options").get_by_text("Part of the clip").click()
    page.locator("#video-find-faces").click()
    page.locator("#video-restore").click()
    panel.get_by_text("Measured for this clip").wait_for(timeout=60_000)
    assert len(engines) == 1 and page.locator("[data-testid=toast-body]").count() == 0, page.locator("body").inner_text()[-600:]
    page.locator("#video-find-faces").click()
    box = page.locator("#video-tracks label", has_text="face 1").locator("input")
    box.wait_for(timeout=30_000)
    time.sleep(1.0)  # the list of faces offered follows the boxes in a step of its own
    box.uncheck()
    page.locator("#video-restore").click()
    page.locator("[data-testid=toast-body]", has_text="No face is ticked").wait_for(timeout=30_000)
    assert len(engines) == 1
    page.close()
