"""The identity check in a real browser: the panel's column per face and the boxes coloured by it.

Debian's Chromium through Playwright (conftest's ``browser``; skipped without it); the app served in this
process with the ``low`` models folder (random-weight generator, real detector), the check asked for (auto
leaves ``low`` alone). GPEN_SHOTS=dir keeps the screenshot to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpen_core.faces import identity_model

from .conftest import shared_path
from .fixtures_models import low_narrow_home, low_narrow_session_home  # noqa: F401
from .test_browser import PLENTY, Shots, _open, _panel, _restore_and_read, page_url, settle  # noqa: F401

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not identity_model.available(), reason=f"needs dlib: {identity_model.PIP_COMMAND}")]


def test_panel_shows_a_row_per_face_and_the_boxes_follow_the_distance(browser, page_url: str, low_narrow_home: Path,
                                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    page.locator("#mode-radio label", has_text="low —").click()
    _panel(page, "low has all its files")
    page.get_by_text("Advanced", exact=True).click()
    page.locator("#identity-check label").filter(has_text=re.compile(r"^\s*on\s*$")).click()
    page.locator("input[type=file]").first.set_input_files(str(shared_path("faces", "ffhq_00001_512.png")))
    page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    text = _restore_and_read(page)
    # A random-weight generator: the one face is over the model's threshold, and the panel says what 0.6 is.
    assert re.search(r"Face\s+identity distance\s+pasted\s+1\s+\d\.\d\d", text), text
    widths = page.evaluate("() => [...document.querySelectorAll('#metrics table')].map(t => t.getBoundingClientRect().right"
                           " - document.querySelector('#metrics').getBoundingClientRect().right)")
    assert max(widths) <= 1, widths  # every table inside the panel, none clipped
    assert "(over 0.6)" in text and "not a promise about restorations" in text and "identity check" in text, text
    page.locator("#show-faces input[type=checkbox]").check()
    overlay = page.locator("#detected-faces")
    overlay.locator("img").first.wait_for(state="visible", timeout=60_000)
    assert "coloured by identity distance" in overlay.inner_text(), overlay.inner_text()
    settle(page)
    Shots(tmp_path).take(page, "identity_panel")
    page.close()
