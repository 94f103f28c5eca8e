"""A real browser (Debian's Chromium, driven by Playwright) uploads a photo and restores it.

Never runs ``playwright install``: it uses /usr/bin/chromium and skips without it.
Set GPEN_SCREENSHOT=path to also save the page there (the README screenshot).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import app

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401
from .test_app_client import free_port

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium; scripts/setup.sh --dev)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (requirements-dev.txt)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page_url() -> Iterator[str]:
    _, url, _ = app.demo.launch(server_port=free_port(), prevent_thread_lock=True, quiet=True, **app.launch_options())
    try:
        yield url
    finally:
        app.demo.close()


def test_upload_restore_and_read_the_measured_panel(browser, page_url: str, low_mode_home: Path, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.get_by_text("Memory mode").wait_for()
    # the weights panel is there from the start; pick the low mode and wait for it to say it is ready
    page.locator("#mode-radio label", has_text="low —").click()
    page.locator("#weights", has_text="low").get_by_text("All weights this mode needs").wait_for(timeout=60_000)

    page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
    page.locator("img[src*='astronaut_low_resolution']").first.wait_for(timeout=30_000)
    page.get_by_role("button", name="Restore", exact=True).click()

    metrics = page.locator("#metrics")
    metrics.get_by_text("Peak RAM").wait_for(timeout=120_000)
    text = metrics.inner_text()
    assert re.search(r"Peak RAM\s+[\d.]+ (MB|GB)", text), text
    assert re.search(r"Mode\s+low", text), text
    page.locator("a[href*='_gpen_low.jpg']").first.wait_for(state="attached", timeout=30_000)  # the download is offered
    page.wait_for_timeout(1000)  # let the slider and gallery images paint
    assert page.locator("img").count() >= 4  # before, after, and at least one face pair

    shot = tmp_path / "app.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("GPEN_SCREENSHOT"):
        target = Path(os.environ["GPEN_SCREENSHOT"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
    page.close()
