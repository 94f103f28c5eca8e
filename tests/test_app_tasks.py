"""The Task choice in the app: the brush's mask, the API with a task, and Chromium with strokes drawn by a mouse.

Generators here are the small seeded networks of ../shared/reference/tasks (random weights):
their "colours" and "repairs" are noise; what is checked is the flow around them (which faces,
where pixels change, the measured panel). GPEN_SHOTS=dir keeps the screenshots (taken then, or when
the Chromium test fails: a full-page screenshot costs seconds on a busy machine).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from .conftest import shared_path


def test_strokes_in_the_editor_become_a_mask_at_the_photo_size(tmp_path: Path) -> None:
    from gpen_app.tasks import editor_damage, editor_value, generator_override

    photo = tmp_path / "p.png"
    Image.new("RGB", (200, 100), (90, 90, 90)).save(photo)
    layer = np.zeros((100, 200, 4), np.uint8)  # the editor hands over its layers as files (never decoded by Gradio)
    layer[20:40, 60:120] = (255, 255, 255, 255)
    Image.fromarray(layer, "RGBA").save(tmp_path / "layer.png")
    painted = {"background": str(photo), "layers": [str(tmp_path / "layer.png")], "composite": None}
    mask = editor_damage(painted, "inpaint")
    assert mask is not None and mask.shape == (100, 200)
    assert mask[20:40, 60:120].all() and mask.sum() == 255 * 20 * 60
    Image.fromarray(np.zeros((100, 200, 4), np.uint8), "RGBA").save(tmp_path / "empty.png")
    empty = {"background": None, "layers": [str(tmp_path / "empty.png")], "composite": None}
    assert editor_damage(empty, "inpaint") is None  # nothing painted: the engine looks for white in the photo
    assert editor_damage(None, "inpaint") is None
    assert editor_damage(painted, "colorize") is None  # strokes are damage for inpainting only
    assert editor_value("inpaint", str(photo))["background"] == str(photo)
    assert editor_value("colorize", str(photo)) is None
    assert generator_override("colorize", None) == "GPEN-Colorization-1024"
    assert generator_override("colorize", "my.pth") == "my.pth"
    assert generator_override("enhance", None) is None


@pytest.fixture(scope="module")
def task_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder with the reference task networks under the registry's names and the real detector."""
    import torch

    home = tmp_path_factory.mktemp("gpen_home_tasks")
    for ref, name in (("colorization", "GPEN-Colorization-1024"), ("inpainting", "GPEN-Inpainting-1024")):
        d = torch.load(shared_path("reference", "tasks", f"{ref}_tiny64_seeded.pt"), weights_only=True)
        torch.save({k: v.float() for k, v in d["state_dict_fp16"].items()}, home / f"{name}.pth")
    det = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (home / det.name).symlink_to(det)
    return home


@pytest.fixture()
def small_solvay(tmp_path: Path) -> Path:
    """Six faces of the Solvay photo (440×280), small enough for a quick request."""
    img = cv2.imread(str(shared_path("faces", "Solvay_conference_1927.png")))[120:400, 560:1000]
    path = tmp_path / "solvay_small.png"
    cv2.imwrite(str(path), img)
    return path


@pytest.fixture()
def served(server_url: str, task_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The module's server, its requests in this test reading the task networks' folder with plenty of memory free."""
    monkeypatch.setenv("GPEN_HOME", str(task_home))
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(32 * 10**9))
    return server_url


def test_gradio_client_colorizes_and_inpaints_with_a_mask_layer(served: str, small_solvay: Path, tmp_path: Path) -> None:
    from gradio_client import Client, handle_file

    client = Client(served, verbose=False)
    base = ("auto", "default", "default", 1.0, 0.9, 50, False, "default", 1)
    _, download, md, gallery, record = client.predict(handle_file(str(small_solvay)), *base, "colorize", None, api_name="/restore")
    assert record["task"] == "colorize" and record["faces"] >= 4 and record["peaks"]["rss_bytes"] > 0
    assert "left the rest of the photo grey" in md and "Peak RAM" in md  # the panel the page shows (Chromium's test stops short)
    out = np.asarray(Image.open(download).convert("RGB")).astype(int)
    assert (out.max(axis=2) - out.min(axis=2)).max() > 10  # colour appeared (on the faces)

    layer = np.zeros((280, 440, 4), np.uint8)
    cv2.line(layer, (142, 128), (182, 176), (255, 255, 255, 255), 10)  # across one face only
    layer_path = tmp_path / "layer.png"
    Image.fromarray(layer, "RGBA").save(layer_path)
    editor = {"background": handle_file(str(small_solvay)), "layers": [handle_file(str(layer_path))], "composite": None}
    _, download, md, gallery, record = client.predict(handle_file(str(small_solvay)), *base, "inpaint", editor, api_name="/restore")
    assert record["task"] == "inpaint" and record["faces"] == 1, json.dumps(record)[:500]
    assert "inpainted 1 of" in md


@pytest.mark.browser
def test_chromium_inpaints_strokes_drawn_with_the_mouse_then_colorize_hides_the_brush(
        browser, served: str, small_solvay: Path, tmp_path: Path) -> None:
    asked = bool(os.environ.get("GPEN_SHOTS"))
    shots = Path(os.environ["GPEN_SHOTS"]) if asked else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1100})

    def shot(name: str) -> None:
        if asked:
            page.screenshot(path=str(shots / name), full_page=True)

    try:
        page.goto(served)
        page.get_by_text("Memory mode", exact=True).wait_for()
        page.locator("input[type=file]").first.set_input_files(str(small_solvay))
        page.locator("#metrics").get_by_text("Ready to restore").wait_for(timeout=60_000)
        assert not page.locator("#damage-editor").is_visible()
        page.locator("#task-radio label", has_text="Repair damaged").click()
        page.locator("#damage-editor").wait_for()
        page.locator("#weights").get_by_text("GPEN-Inpainting-1024").first.wait_for(timeout=60_000)
        # The photo is in the editor's canvas once the editor has zoomed to fit it (from its empty canvas's 45 %
        # to about 95 % here): the 440x280 photo then spans most of the canvas's width or height.
        page.wait_for_function("""() => {
          const c = document.querySelector('#damage-editor canvas'), z = document.querySelector('#damage-editor .zoom-number');
          if (!c || !z) return false;
          const zoom = parseFloat(z.innerText) / 100, r = c.getBoundingClientRect();
          return zoom * 440 >= 0.8 * r.width || zoom * 280 >= 0.8 * r.height;
        }""", timeout=60_000)
        page.locator("#damage-editor button[aria-label='Brush']").click()
        box = page.locator("#damage-editor canvas").first.bounding_box()
        zoom = float(page.locator("#damage-editor .zoom-number").inner_text().strip().rstrip("%")) / 100
        left, top = box["x"] + (box["width"] - 440 * zoom) / 2, box["y"] + (box["height"] - 280 * zoom) / 2
        # One move per point: the brush draws the segment between two pointer events itself, and each event
        # costs Chromium's software canvas ~0.7 s on a busy machine (8 steps a move took 20 s).
        for stroke in ([(142, 128), (165, 150), (182, 176)], [(250, 150), (290, 140)]):  # across two faces
            page.mouse.move(left + stroke[0][0] * zoom, top + stroke[0][1] * zoom)
            page.mouse.down()
            for x, y in stroke[1:]:
                page.mouse.move(left + x * zoom, top + y * zoom)
            page.mouse.up()
        page.wait_for_timeout(1000)
        shot("inpaint_strokes.png")
        page.get_by_role("button", name="Restore", exact=True).click()
        metrics = page.locator("#metrics")
        metrics.get_by_text("Peak RAM").wait_for(timeout=300_000)
        text = metrics.inner_text()
        assert "inpainted 2 of" in text and "the mask given" in text, text
        shot("inpaint_result.png")

        # Colorize hides the brush (for inpainting only); its restore and panel are the API test's, the same call.
        page.locator("#task-radio label", has_text="Colorize faces").click()
        page.locator("#damage-editor").wait_for(state="hidden", timeout=30_000)
        shot("colorize_chosen.png")
    except BaseException:
        with contextlib.suppress(Exception):  # what the page showed when it failed, for a human to look at
            page.screenshot(path=str(shots / "failed.png"), full_page=True)
            print(f"the page at the failure: {shots / 'failed.png'}")
        raise
    finally:
        page.close()
