"""Where things are on the screen, in Chromium: the Restore button without scrolling, the result in view.

At 1366×768 (a common laptop) the button must be reachable next to the photo and, after a
restore, the before/after and the measured panel must be on screen; on a phone (390×844)
the result must follow the button, not the weights panel and the examples. Positions are
read with ``getBoundingClientRect`` (relative to the viewport). GPEN_SHOTS=dir keeps the
screenshots to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .fixtures_models import low_narrow_home, low_narrow_session_home  # noqa: F401
from .test_browser import EXAMPLE, PLENTY, Shots, _open, _panel, page_url, settle  # noqa: F401

pytestmark = pytest.mark.browser


def _box(page, selector: str) -> dict[str, float]:
    """The element's rectangle in viewport pixels (top/bottom relative to what is on screen now)."""
    return page.locator(selector).first.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }")


def _restore(page) -> None:
    page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    page.locator("#restore-button").click()
    page.locator("#metrics").get_by_text("Peak RAM").wait_for(timeout=240_000)
    page.locator("a[href*='_gpen_low.jpg']").first.wait_for(state="attached", timeout=30_000)
    settle(page)  # the scroll after the result, and the images painting


def _prepare(browser, url: str, width: int, height: int):  # noqa: F811
    page = browser.new_page(viewport={"width": width, "height": height})
    _open(page, url)
    page.locator("#mode-radio label", has_text="low —").click()
    _panel(page, "low has all its files")
    page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
    return page


def test_laptop_restore_is_next_to_the_photo_and_the_result_is_in_view(browser, page_url: str, low_narrow_home: Path,  # noqa: F811
                                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    shots = Shots(tmp_path)
    page = _prepare(browser, page_url, 1366, 768)
    page.evaluate("window.scrollTo(0, 0)")  # as the page opens (choosing the mode scrolled to it)
    button = _box(page, "#restore-button")
    assert 0 <= button["top"] and button["bottom"] <= 768, button  # pressable without scrolling
    photo = _box(page, "#photo")
    assert button["top"] - photo["bottom"] < 60, (photo, button)  # right under the photo
    assert page.locator("[id='weights-box']").count() == 1  # one element per id
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # wherever the user has scrolled to
    page.locator("#restore-button").evaluate("e => e.scrollIntoView({block: 'end'})")
    _restore(page)
    slider = _box(page, "#slider")
    assert 0 <= slider["top"] and slider["bottom"] <= 768, slider
    peak = page.locator("#metrics").get_by_text(re.compile("Peak RAM")).first.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; }")
    assert 0 <= peak["top"] and peak["bottom"] <= 768, peak  # the measured panel's first figure is on screen
    shots.take(page, "layout_1366x768_restored", full=False)
    page.close()


def test_phone_result_follows_the_restore_button(browser, page_url: str, low_narrow_home: Path,  # noqa: F811
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    shots = Shots(tmp_path)
    page = _prepare(browser, page_url, 390, 844)
    page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    y0 = page.evaluate("window.scrollY")
    button, slider = _box(page, "#restore-button"), _box(page, "#slider")
    assert 0 <= slider["top"] - button["bottom"] < 60, (button, slider)  # nothing between the button and the result
    for other in ("#weights-box", "#mode-radio"):
        assert _box(page, other)["top"] > slider["bottom"], other  # the options and the weights panel come after
    page.locator("#restore-button").scroll_into_view_if_needed()
    _restore(page)
    slider = _box(page, "#slider")
    assert 0 <= slider["top"] and slider["bottom"] <= 844, (y0, slider)
    shots.take(page, "layout_390x844_restored", full=False)
    page.close()
