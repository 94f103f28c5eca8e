"""The Upscale radio in a real browser (Debian's Chromium through Playwright).

Before Restore the page shows the result size and the extra memory upscaling will take;
after it the result is exactly 2× the photo, the measured panel has the upscale stage
(seconds, tiles), and ``auto`` budgeted the same extra memory the page announced. Without
the upscaler file, Restore says which file is missing and how to get it (no stack trace).

Fixtures and helpers are test_browser.py's. The upscaler has the released widths (32
features, growth 32: what sets the tile size) but one block instead of 23 (depth sets the
time only), random weights, saved as ``realesrnet_x2.pth`` in the models folder (the
registry pins no sha256 for it: trust on first use, as with the real file). Without it,
choosing 2× says so beside the radio before Restore, and the Weights panel offers it.
GPEN_SHOTS=dir keeps the screenshots (``upscale_*.png``).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from gpen_core.upscale import tiles
from gpen_core.platform.meter import format_bytes
from gpen_core.modes import MODES

from .conftest import shared_path
from .test_browser import EXAMPLE, PLENTY, Shots, _open, _panel, _restore_and_read, page_url, settle  # noqa: F401

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def upscaler_x2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gpen_core.networks.upscaler import UpscalerConfig, random_upscaler, save_upscaler

    net = random_upscaler(UpscalerConfig(scale=2, num_block=1), seed=4)
    return save_upscaler(net, tmp_path_factory.mktemp("up") / "x2_1block.pth")


def _home(tmp: Path, name: str, generator: Path, upscaler: Path | None) -> Path:
    """A models folder with the low mode's files (a random 256 px generator, real detector), and the ×2 upscaler if given."""
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    home = tmp / name
    home.mkdir()
    (home / "GPEN-BFR-256.pth").symlink_to(generator)
    (home / detector.name).symlink_to(detector)
    if upscaler is not None:
        (home / "realesrnet_x2.pth").symlink_to(upscaler)
    return home


def _choose_2x(page) -> str:
    """Upload the example, pick 2×, and return the Upscale line once it shows the result size."""
    page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
    page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    page.locator("#upscale-radio label", has_text="2×").click()
    info = page.locator("#upscale-info")
    info.get_by_text("Upscale ×2").wait_for(timeout=60_000)
    return info.inner_text()


def test_upscale_2x_shows_the_cost_first_and_gives_twice_the_size(browser, page_url: str, tmp_path: Path, gen256_narrow: Path,
                                                                  upscaler_x2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    monkeypatch.setenv("GPEN_HOME", str(_home(tmp_path, "with_upscaler", gen256_narrow, upscaler_x2)))
    with Image.open(EXAMPLE) as im:
        w, h = im.size
    predicted = tiles.preview(w, h, 2, "auto")
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)

    # before Restore: the result size and the extra memory, labelled an estimate
    info = _choose_2x(page)
    assert f"result {2 * w}×{2 * h}" in info, info
    assert f"extra memory about {format_bytes(predicted.extra_bytes)}" in info and "estimate" in info, info
    assert "Peak RAM" not in page.locator("#metrics").inner_text()  # nothing ran yet
    shots.take(page, "upscale_2x_chosen")

    text = _restore_and_read(page)
    # the measured panel: the photo line names the factor and the tiles, the stages table has the upscale stage
    m = re.search(rf"{w}×{h}, upscaled ×2 to {2 * w}×{2 * h} \((\d+) tiles? of (\d+) px, (float32|bfloat16)\)", text)
    assert m, text
    want_bf16, _ = tiles.choose_bf16("cpu", MODES["low"])  # the dtype the upscaler ran in is the one the engine chose
    assert m.group(3) == ("bfloat16" if want_bf16 else "float32"), text
    assert int(m.group(1)) > 1, text  # the mode's tile budget split this photo
    stage = re.search(r"upscale background\s+(\d+\.\d\d)", text)
    assert stage and float(stage.group(1)) > 0, text
    # auto ran low (the only generator here) and counted the same extra memory the page announced
    assert re.search(r"Mode\s+low", text), text
    assert f"~{format_bytes(predicted.extra_bytes)} of it estimated for upscaling ×2" in text, text
    grid = tiles.plan_grid(h, w, 2, tiles.tile_for_budget(tiles.MODE_TILE_BUDGET["low"], 2))
    assert (int(m.group(1)), int(m.group(2))) == (grid.count, grid.tile), text
    assert "background upscaled ×2 by realesrnet_x2" in text, text

    # the downloadable result is exactly twice the photo
    link = page.locator("a[href*='_gpen_low']").first
    link.wait_for(state="attached", timeout=30_000)
    href = link.get_attribute("href")
    body = page.request.get(href if href.startswith("http") else page_url.rstrip("/") + "/" + href.lstrip("/")).body()
    with Image.open(io.BytesIO(body)) as result:
        assert result.size == (2 * w, 2 * h)
    settle(page)  # the slider and gallery painted
    # the slider shows the result at full size, and the before-view enlarged to match
    sizes = page.locator("#slider img").evaluate_all("els => els.map(e => [e.naturalWidth, e.naturalHeight])")
    assert sizes and all(s == [2 * w, 2 * h] for s in sizes), sizes
    shots.take(page, "upscale_2x_result")
    page.close()


def test_missing_upscaler_says_which_file_and_how_to_get_it(browser, page_url: str, tmp_path: Path, gen256_narrow: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The radio is offered whatever is on disk. Choosing 2× says at once, beside the radio, that
    realesrnet_x2.pth is missing and how to get it, and the Weights panel's Download button offers
    it; Restore, pressed anyway, then names the missing file and the fix."""
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    home = _home(tmp_path, "no_upscaler", gen256_narrow, None)
    monkeypatch.setenv("GPEN_HOME", str(home))
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    weights_button = page.locator("#download-weights")
    _panel(page, "Files for")  # the page-load panel, before 2× is chosen
    assert "upscaler" not in (weights_button.inner_text() if weights_button.is_visible() else "")

    # before Restore: the Upscale line names the file, where it goes and the fix
    with Image.open(EXAMPLE) as im:
        w, h = im.size
    info = _choose_2x(page)
    assert f"result {2 * w}×{2 * h}" in info, info  # the size line is still there
    assert "realesrnet_x2.pth is missing" in info and "python -m gpen_core download realesrnet_x2" in info, info
    assert str(home / "realesrnet_x2.pth") in info and "Download button" in info, info
    assert "Weights missing" not in page.locator("#metrics").inner_text()  # nothing was pressed yet
    # the Weights panel lists it under the Upscale choice, and its button fetches it
    panel = _panel(page, "For the Upscale choice")
    assert "realesrnet_x2.pth" in panel, panel
    page.locator("#download-weights", has_text=re.compile(r"×2 upscaler .* for quality and upscaling")).wait_for(timeout=30_000)
    page.locator("#upscale-info").scroll_into_view_if_needed()
    shots.take(page, "upscale_missing_info")
    # back to 1×: the warning goes, and the button no longer offers the upscaler
    page.locator("#upscale-radio label", has_text="1×").click()
    page.wait_for_function("() => !document.querySelector('#upscale-info').innerText.includes('missing')", timeout=30_000)
    page.wait_for_function("() => { const b = document.querySelector('#download-weights');"
                           " return !b || !b.innerText.includes('upscaler'); }", timeout=30_000)

    page.locator("#upscale-radio label", has_text="2×").click()
    page.locator("#upscale-info").get_by_text("realesrnet_x2.pth is missing", exact=False).wait_for(timeout=30_000)
    page.get_by_role("button", name="Restore", exact=True).click()
    metrics = page.locator("#metrics")
    metrics.get_by_text("⚠ Weights missing").wait_for(timeout=240_000)
    panel = metrics.inner_text()
    assert "realesrnet_x2.pth" in panel and "python -m gpen_core download realesrnet_x2" in panel, panel
    assert str(home) in panel, panel  # where to put it
    assert "Peak RAM" not in panel
    toast = page.locator("[data-testid=toast-body]", has_text="realesrnet_x2").first  # the pop-up too, headed by its kind
    toast.wait_for(timeout=10_000)
    assert toast.locator(".toast-title").inner_text().strip() == "Weights missing", toast.inner_text()
    page_text = page.locator("body").inner_text()
    assert "Traceback" not in page_text and 'File "' not in page_text
    shots.take(page, "upscale_missing_upscaler")
    page.close()
