"""A real browser (Debian's Chromium, driven by Playwright) on the app: the weights story, errors, uploads.

Never runs ``playwright install``: it uses /usr/bin/chromium and skips without it (conftest's ``browser``,
one Chromium for consecutive browser tests).
Set GPEN_SCREENSHOT=path to also save the README's first picture there (the detected
faces and the measured panel of a group photo), and
GPEN_SHOTS=dir to keep every screenshot this test takes (one per checked view).

The server runs in this process, so each weights combination is a models folder the
test builds and points ``GPEN_HOME`` at before reloading the page; free memory is fixed
with ``GPEN_FREE_RAM_BYTES`` so the story does not depend on what else runs here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import app
from gpen_core.weights import lookup as weights

from .conftest import ROOT, shared_path
from .fixtures_models import low_mode_session_home, low_narrow_home, low_narrow_session_home  # noqa: F401
from .hostile import png16_bytes


pytestmark = pytest.mark.browser

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
PAIR = ROOT / "examples" / "pair_faded_print.jpg"
PLENTY = str(32 * 10**9)


@pytest.fixture(scope="module")
def page_url(server_url: str) -> str:
    """The app served for this module (tests/fixtures_app.py): each test opens its own page (its own session),
    and what a test changes for the server (``GPEN_HOME``, free memory, patched engine calls) it changes per request."""
    return server_url


@pytest.fixture(scope="module")
def gen512_narrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 512 px GPEN with random weights, an eighth of GPEN-BFR-512's width: what auto chooses, and that its restore
    runs, depend on a 512 px generator being there, not on its width (the session's gen512 is 280 MB to load)."""
    from gpen_core.networks.arch import GPENConfig

    from .factories import write_checkpoint

    cfg = GPENConfig(512, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-narrow-512.pth", cfg, seed=2)


class Shots:
    """Screenshots of the views checked, kept under GPEN_SHOTS when set (to look at them)."""

    def __init__(self, tmp: Path) -> None:
        self.dir = Path(os.environ["GPEN_SHOTS"]) if os.environ.get("GPEN_SHOTS") else tmp
        self.dir.mkdir(parents=True, exist_ok=True)

    def take(self, page, name: str, full: bool = True) -> Path:
        path = self.dir / f"{name}.png"
        page.screenshot(path=str(path), full_page=full)
        assert path.stat().st_size > 5_000
        return path


# Every image in view loaded (lazy ones out of view never load), and the scroll position and the page's
# height unchanged for 15 checks 20 ms apart (3 s at most): the result has been scrolled to and painted.
# Resolves to the milliseconds it waited.
_SETTLED = """async () => {
  const t0 = performance.now(), tick = () => new Promise(r => setTimeout(r, 20));
  const loaded = im => { const r = im.getBoundingClientRect();
                         return im.complete || r.bottom <= 0 || r.top >= window.innerHeight; };
  let last = '', same = 0;
  for (let i = 0; i < 150 && same < 15; i++) {
    await tick();
    const now = window.scrollY + ',' + document.documentElement.scrollHeight;
    same = [...document.images].every(loaded) && now === last ? same + 1 : 0;
    last = now;
  }
  return performance.now() - t0;
}"""


def settle(page) -> float:
    """Wait until the page is still (images loaded, no scrolling, no growing) instead of a fixed pause; the ms waited."""
    return page.evaluate(_SETTLED)


# How long a page may take to show the app on a loaded machine (a CI machine once passed Playwright's 30 s); the
# wait ends as soon as the app is there, so the normal case is no slower.
READY_MS = 90_000


def _open(page, url: str) -> None:
    """Load the app and wait until it is ready; past :data:`READY_MS`, fail with what the page showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.goto(url, timeout=READY_MS)
        page.get_by_text("Memory mode", exact=True).wait_for(timeout=READY_MS)
        # The page's load events have answered (the weights panel is filled): a click from now on is not raced by them.
        page.wait_for_function("() => { const e = document.querySelector('#weights'); return !!e && e.innerText.trim().length > 0; }",
                               timeout=120_000)
    except PlaywrightTimeout as exc:
        shown = page.evaluate("() => document.body ? document.body.innerText : ''")
        pytest.fail(f"{url} was not ready ({exc.message.splitlines()[0]}); the page showed: {shown.strip()[:1500]!r}")


def _panel(page, expect: str) -> str:
    weights_box = page.locator("#weights")
    weights_box.get_by_text(re.compile(expect)).first.wait_for(timeout=120_000)
    return weights_box.inner_text()


def _models(tmp: Path, name: str, files: dict[str, Path | bytes]) -> Path:
    """A models folder holding ``files`` (registry file name -> a file to link, or bytes to write)."""
    home = tmp / name
    home.mkdir()
    for filename, src in files.items():
        if isinstance(src, Path):
            (home / filename).symlink_to(src)
        else:
            (home / filename).write_bytes(src)
    return home


def _restore_and_read(page, timeout: int = 240_000) -> str:
    page.get_by_role("button", name="Restore", exact=True).click()
    metrics = page.locator("#metrics")
    metrics.get_by_text("Peak RAM").wait_for(timeout=timeout)
    return metrics.inner_text()


def test_one_story_for_every_weights_combination(browser, page_url: str, tmp_path: Path, gen256: Path, gen512_narrow: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Panel, Download button, Hardware check recommendation and the result agree, for each set of files."""
    mobilenet = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    shots = Shots(tmp_path)
    fake = b"stand-in bytes: verified by first use (no published sha256), never loaded"
    # "everything": a stand-in ResNet-50 counts as verified only if its pinned size/sha256 are lifted
    resnet = weights.REGISTRY["retinaface-resnet50"]
    combos: list[tuple[str, dict[str, Path | bytes], str, str | None, str | None]] = [
        # name, files, panel sentence, button text (None: hidden), auto's mode in a restore (None: no restore)
        ("nothing", {}, "Nothing can run yet; download GPEN-BFR-256 (~76 MB) and MobileNet detector (1.8 MB) to enable low, "
         "or GPEN-BFR-512 (~284 MB) and MobileNet detector (1.8 MB) to enable balanced and faces-only, "
         "or GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB) to enable quality",
         "Download GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB) for quality", None),
        ("256 only", {"GPEN-BFR-256.pth": gen256}, "Nothing can run yet; download MobileNet detector (1.8 MB) to enable low",
         "Download GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB) for quality", None),
        ("512 only", {"GPEN-BFR-512.pth": fake}, "Nothing can run yet; download MobileNet detector (1.8 MB) to enable balanced "
         "and faces-only, or ResNet-50 detector (109 MB) to enable quality",
         "Download ResNet-50 detector (109 MB) for quality", None),
        ("512 + mobilenet", {"GPEN-BFR-512.pth": gen512_narrow, mobilenet.name: mobilenet},
         "Auto will use balanced; download ResNet-50 detector (109 MB) to enable quality",
         "Download ResNet-50 detector (109 MB) for quality", "balanced"),
        ("corrupt detector", {"GPEN-BFR-512.pth": fake, mobilenet.name: mobilenet, resnet.filename: b"truncated"},
         "Auto will use balanced; download ResNet-50 detector (corrupt, 109 MB) to enable quality",
         "Download ResNet-50 detector (corrupt, 109 MB) for quality", None),
        ("everything", {"GPEN-BFR-256.pth": gen256, "GPEN-BFR-512.pth": fake, mobilenet.name: mobilenet,
                        resnet.filename: fake, "parsing_parsenet.pth": fake},
         "Auto will use quality, the best mode that fits this machine; all its files are here", None, None),
    ]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    for name, files, sentence, button, runs in combos:
        with monkeypatch.context() as m:
            if name == "everything":
                m.setitem(weights.REGISTRY, resnet.name, type(resnet)(**{**resnet.__dict__, "sha256": None, "size_bytes": None}))
                parsenet = weights.REGISTRY["parsenet"]
                m.setitem(weights.REGISTRY, "parsenet", type(parsenet)(**{**parsenet.__dict__, "sha256": None, "size_bytes": None}))
            m.setenv("GPEN_HOME", str(_models(tmp_path, name.replace(" ", "_").replace("+", "and"), files)))
            _open(page, page_url)
            panel = _panel(page, re.escape(sentence[:40]))
            assert sentence in panel.replace("\n", " "), (name, panel)
            btn = page.locator("#download-weights")
            assert not page.locator("#stop-download").is_visible(), name  # nothing to stop: no download runs
            if button is None:
                assert not btn.is_visible(), name
            else:
                assert btn.is_visible() and btn.inner_text().strip() == button, (name, btn.inner_text())
                assert btn.evaluate("e => e.tagName") == "BUTTON"
            if name == "corrupt detector":
                assert "corrupt" in panel.lower()
                page.get_by_text("All checkpoints").click()
                overview = page.locator("#all-weights")
                overview.get_by_text("retinaface-resnet50").wait_for()
                assert re.search(r"retinaface-resnet50 · detector · detection_Resnet50_Final.pth .* corrupt", overview.inner_text())
            shots.take(page, f"weights_{name.replace(' ', '_').replace('+', 'and')}")
            # the Hardware check tab recommends the same thing
            page.get_by_role("tab", name="Hardware check").click()
            report = page.locator("#profile-report")
            report.get_by_text("Recommendation").wait_for(timeout=60_000)
            assert sentence[1:] in report.inner_text().replace("\n", " "), (name, report.inner_text())
            page.get_by_role("tab", name="Restore").click()
            if runs:
                page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
                page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
                text = _restore_and_read(page)
                assert re.search(rf"Mode\s+{runs}", text), text
                assert f"auto chose {runs}" in text, text
                shots.take(page, f"result_{runs}")
    page.close()


def test_upload_restore_and_errors(browser, page_url: str, low_narrow_home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    page.locator("#mode-radio label", has_text="low —").click()
    _panel(page, "low has all its files")

    # distinct example thumbnails
    thumbs = page.locator("img[src*='examples'], .gallery img, [data-testid='examples'] img")
    srcs = {thumbs.nth(i).get_attribute("src") for i in range(thumbs.count())}
    assert len(srcs) >= 4, srcs

    # a hostile upload: our decoder's message in the panel, right away
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    page.locator("input[type=file]").first.set_input_files(str(empty))
    page.locator("#metrics").get_by_text("Cannot use this input").wait_for(timeout=60_000)
    assert "empty" in page.locator("#metrics").inner_text()
    shots.take(page, "upload_empty")
    # over our 25 MB limit: our message with the file's size, in the panel (not only Gradio's toast)
    big = tmp_path / "big.png"
    Image.new("RGB", (3000, 3000)).save(big, compress_level=0)  # 27 MB stored, not compressed: written at once
    page.locator("input[type=file]").first.set_input_files(str(big))
    page.locator("#metrics").get_by_text(f"The file is {big.stat().st_size / 1e6:.1f} MB; the limit is 25 MB").wait_for(timeout=120_000)
    shots.take(page, "upload_over_size")
    # a 16-bit greyscale face: previewed by our decoder, not clipped to white
    grey = np.asarray(Image.open(EXAMPLE).convert("L"))
    face16 = tmp_path / "face16.png"
    face16.write_bytes(png16_bytes(grey.astype(np.uint16) * 257))
    page.locator("button[aria-label='Clear'], button[title='Clear']").first.click() if page.locator(
        "button[aria-label='Clear'], button[title='Clear']").count() else None
    page.locator("input[type=file]").first.set_input_files(str(face16))
    metrics = page.locator("#metrics")
    metrics.get_by_text("Ready to restore").wait_for(timeout=60_000)
    assert "16-bit" in metrics.inner_text()
    shots.take(page, "upload_16bit_preview")

    # the photo, restored
    page.locator("input[type=file]").first.set_input_files(str(EXAMPLE))
    metrics.get_by_text("Ready to restore").wait_for(timeout=60_000)
    text = _restore_and_read(page)
    assert re.search(r"Peak RAM\s+[\d.]+ (MB|GB)", text), text
    assert re.search(r"Mode\s+low", text), text
    page.locator("a[href*='_gpen_low.jpg']").first.wait_for(state="attached", timeout=30_000)
    settle(page)  # the slider and gallery images painted
    assert page.locator("img").count() >= 4  # before, after, and at least one face pair
    # the gallery shows every row: no inner scroll box cutting it off
    gallery = page.locator("#faces")
    assert gallery.evaluate("e => [...e.querySelectorAll('*')].every(c => c.scrollHeight <= c.clientHeight + 2 || "
                            "getComputedStyle(c).overflowY === 'visible')")
    shots.take(page, "restored_low")

    # the chosen mode's files gone: refused before the result is touched, naming the button as the page shows it
    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "no_weights"))
    (tmp_path / "no_weights").mkdir()
    page.get_by_role("button", name="Restore", exact=True).click()
    toast = page.get_by_text(re.compile(r"low needs .* not in the models folder yet")).first
    toast.wait_for(timeout=60_000)
    button = page.locator("#download-weights")
    button.wait_for(state="visible", timeout=30_000)
    assert f"press “{button.inner_text().strip()}” in the weights panel" in toast.inner_text(), (toast.inner_text(), button.inner_text())
    assert "Peak RAM" in metrics.inner_text() and page.locator("a[href*='_gpen_low.jpg']").count() >= 1  # the result kept
    shots.take(page, "unavailable_mode_keeps_the_result")
    # an error in the restore itself: the previous result is cleared and the panel names the problem
    page.locator("#mode-radio label", has_text="auto —").click()
    page.get_by_role("button", name="Restore", exact=True).click()
    metrics.get_by_text("⚠ Weights missing").wait_for(timeout=60_000)
    assert page.locator("[data-testid=toast-body]", has_text="low needs").count() == 0  # the press closed the refusal
    assert "Peak RAM" not in metrics.inner_text() and "previous result was cleared" in metrics.inner_text()
    assert page.locator("a[href*='_gpen_low.jpg']").count() == 0  # the old download is gone
    toast = page.locator("[data-testid=toast-body]", has_text="python -m gpen_core download").first
    toast.wait_for(timeout=10_000)
    assert toast.locator(".toast-title").inner_text().strip() == "Weights missing", toast.inner_text()  # its kind heads it
    code = page.locator("code", has_text="python -m gpen_core download").first
    assert code.count() == 1  # the command renders as code, not in `backticks`
    shots.take(page, "error_weights_missing")
    page.close()


def test_group_photo_shows_every_detected_face_and_the_measured_panel(browser, page_url: str, tmp_path: Path,
                                                                        request: pytest.FixtureRequest,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first picture: a real group photo, the boxes of the real detector, the measured peaks.

    The generator here has random weights (the released ones cannot be downloaded on a
    test machine), so the picture shows what is real: the detection (the real RetinaFace
    MobileNet-0.25), the false-face screen and the measured panel; not the restored faces.
    The picture's peaks are GPEN-BFR-256's architecture's; the checks hold for any 256 px
    generator, so without GPEN_SCREENSHOT the narrow one restores the 29 faces (~4x faster).
    """
    picture = bool(os.environ.get("GPEN_SCREENSHOT"))
    home = request.getfixturevalue("low_mode_session_home" if picture else "low_narrow_session_home")
    monkeypatch.setenv("GPEN_HOME", str(home))
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", PLENTY)
    solvay = shared_path("faces", "Solvay_conference_1927.png")
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    page.locator("#mode-radio label", has_text="low —").click()
    _panel(page, "low has all its files")
    page.locator("input[type=file]").first.set_input_files(str(solvay))
    page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
    text = _restore_and_read(page)
    assert re.search(r"Peak RAM\s+[\d.]+ (MB|GB)", text), text
    assert re.search(r"Mode\s+low", text), text
    page.locator("#show-faces input[type=checkbox]").check()
    overlay = page.locator("#detected-faces")
    overlay.locator("img").first.wait_for(state="visible", timeout=60_000)
    # the official GPEN run finds 29 faces in this photo; every one passes the screen
    assert "Detected faces: 29 kept" in overlay.inner_text(), overlay.inner_text()
    settle(page)  # the overlay image painted
    shots.take(page, "group_photo_detected_faces")
    if picture:
        # The measured panel's peaks with the download beside them, over the faces drawn on the photo: the two
        # regions in the page's order, each shot in page coordinates (the stage times and notes between them left out).
        import io

        parts = [Image.open(io.BytesIO(page.screenshot(clip=_page_clip(page, sel), full_page=True)))
                 for sel in (("#metrics table", "#download"), ("#show-faces", "#detected-faces"))]
        sheet = Image.new("RGB", (max(p.width for p in parts), sum(p.height for p in parts)), "white")
        sheet.paste(parts[0], (0, 0))
        sheet.paste(parts[1], (0, parts[0].height))
        target = Path(os.environ["GPEN_SCREENSHOT"])
        target.parent.mkdir(parents=True, exist_ok=True)
        sheet.save(target)
    page.close()


def _page_clip(page, selectors: tuple[str, ...], pad: int = 8) -> dict[str, float]:
    """The rectangle around the first element of each selector, in page (not viewport) pixels."""
    boxes = [page.locator(s).first.evaluate("e => { const r = e.getBoundingClientRect(); "
                                            "return [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY]; }")
             for s in selectors]
    x0, y0 = min(b[0] for b in boxes) - pad, min(b[1] for b in boxes) - pad
    return {"x": x0, "y": y0, "width": max(b[2] for b in boxes) + pad - x0, "height": max(b[3] for b in boxes) + pad - y0}


def test_hardware_check_says_how_long_and_shows_progress(browser, page_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from gpen_core.hwcheck import runner

    from .test_profile import CONFIGS, SMALL

    # The real check, made small (one mode, tiny generators and images, in this process). So small that
    # it can finish in under a second (measured 0.7 s in the full suite), so its first step waits until
    # the page has shown its progress line: what is checked is that the line reaches the page.
    shown, real = threading.Event(), runner.run_profile

    def small_check(*args, progress, **kwargs):
        def report(fraction, desc):
            progress(fraction, desc)
            shown.wait(60)
        return real(*args, progress=report, modes=["low"], workloads=SMALL, model_configs=CONFIGS, isolate=False, **kwargs)

    monkeypatch.setattr(runner, "run_profile", small_check)
    shots = Shots(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    page.get_by_role("tab", name="Hardware check").click()
    report = page.locator("#profile-report")
    report.get_by_text("It takes 8 to 15 minutes").wait_for(timeout=60_000)  # no earlier check here: the estimate
    page.locator("#check-button").click()
    try:
        page.get_by_text(re.compile(r"\d+ s so far")).first.wait_for(timeout=60_000)
        shots.take(page, "hardware_check_running", full=False)
    except Exception as exc:  # what the page showed instead: the next failure says why, not only "timeout"
        shots.take(page, "hardware_check_no_progress")
        raise AssertionError(f"no progress line within 60 s; the tab read: {report.inner_text()[:1500]!r}; "
                             f"the page: {page.locator('body').inner_text()[-1500:]!r}") from exc
    finally:
        shown.set()
    try:
        report.get_by_text("Memory alone").wait_for(timeout=300_000)
    finally:
        shots.take(page, "hardware_check_after")
    assert "Recommendation:" in report.inner_text()
    shots.take(page, "hardware_check_done")
    _open(page, page_url)  # the next page load announces the measured duration
    page.get_by_role("tab", name="Hardware check").click()
    page.locator("#profile-report").get_by_text(re.compile(r"It takes about \d+ s here")).wait_for(timeout=60_000)
    page.close()


def test_the_identity_blend_slider_takes_part_only_with_a_limit(browser, page_url: str) -> None:
    """A blend slider left at 0.3 with the Identity limit back at 0 made every Restore fail (a blend without a limit is
    refused): the slider is greyed at 0 until a limit is typed, and goes back to 0, greyed, with the limit."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _open(page, page_url)
    page.get_by_text("Advanced", exact=True).click()
    blend = page.locator("#identity-alpha input[type=number]")
    limit = page.locator("#identity-limit input")
    assert blend.is_disabled()
    limit.fill("0.5")
    limit.press("Enter")
    page.wait_for_function("() => !document.querySelector('#identity-alpha input[type=number]').disabled", timeout=30_000)
    blend.fill("0.3")
    blend.press("Enter")
    limit.fill("0")
    limit.press("Enter")
    page.wait_for_function("() => document.querySelector('#identity-alpha input[type=number]').disabled", timeout=30_000)
    assert float(blend.input_value()) == 0.0
    page.close()
