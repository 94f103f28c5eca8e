"""Face boxes on the "before" photo: kept solid, rejected dashed (gpen_app.overlay)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpen_app.overlay import KEPT_COLOR, REJECTED_COLOR, boxes_record, draw_box, draw_detections, faces_overlay
from gpen_core.result import RejectedFace

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401


def _gray(h: int = 120, w: int = 160) -> np.ndarray:
    return np.full((h, w, 3), 100, np.uint8)


def _is(px: np.ndarray, color: tuple[int, int, int]) -> np.ndarray:
    return np.all(px == np.asarray(color, np.uint8), axis=-1)


def test_a_solid_box_colours_every_edge_pixel_and_nothing_else() -> None:
    img = _gray()
    out = draw_detections(img, [(20, 10, 80, 70)], width=2)
    assert np.array_equal(img, _gray())  # the input is not drawn on
    edges = {"top": out[10:12, 20:80], "bottom": out[68:70, 20:80], "left": out[10:70, 20:22], "right": out[10:70, 78:80]}
    for name, px in edges.items():
        assert _is(px, KEPT_COLOR).all(), name
    changed = np.any(out != img, axis=-1)
    inside = np.zeros_like(changed)
    inside[10:70, 20:80] = True
    inside[12:68, 22:78] = False  # the frame only: the face inside is untouched
    assert np.array_equal(changed, inside)


def test_a_dashed_box_has_gaps_on_every_edge() -> None:
    img = _gray()
    out = draw_detections(img, [], [(20, 10, 140, 100)], width=2)  # 120 px: 21 dashes/gaps of ~5.7 px
    for name, line in {"top": out[10, 20:140], "bottom": out[99, 20:140], "left": out[10:100, 20], "right": out[10:100, 139]}.items():
        red = _is(line, REJECTED_COLOR)
        assert red.any() and (~red).any(), name
        assert 0.35 < red.mean() < 0.65, name  # about half dash, half gap
        assert np.array_equal(line[~red], np.full(((~red).sum(), 3), 100, np.uint8)), name  # gaps show the photo
        assert red[:5].all() and red[-5:].all() and not red[6:11].any(), name  # dashes at both corners, a gap between
    assert not np.any(out[12:98, 22:138] != 100)


def test_boxes_are_scaled_clipped_and_kept_drawn_over_rejected() -> None:
    img = _gray(60, 80)
    # Boxes in a photo twice this size; the rejected one overlaps the kept one and leaves the image.
    out = draw_detections(img, [(40, 20, 100, 80)], [(40, 20, 400, 300)], scale=(0.5, 0.5), width=1)
    assert _is(out[10, 20:50], KEPT_COLOR).all()  # kept on top where they share an edge
    assert _is(out[10:40, 20], KEPT_COLOR).all()
    assert _is(out[10, 50:], REJECTED_COLOR).any() and not _is(out[10, 50:], KEPT_COLOR).any()
    with pytest.raises(ValueError, match="RGB uint8"):
        draw_detections(img.astype(np.float32), [])
    tiny = _gray(10, 10)
    draw_box(tiny, (3, 3, 4, 4), KEPT_COLOR, width=5)  # a 1 px box: drawn, no error
    assert _is(tiny[3, 3], KEPT_COLOR)
    draw_box(tiny, (50, 50, 60, 60), KEPT_COLOR, width=2)  # outside: nothing
    assert _is(tiny, KEPT_COLOR).sum() == 1


def _result(mode: str = "balanced", detector: str = "mobilenet0.25") -> SimpleNamespace:
    return SimpleNamespace(
        before=_gray(200, 400),
        faces=(SimpleNamespace(box=(10.0, 20.0, 110.0, 140.0)),),
        rejected=(RejectedFace((200.0, 40.0, 320.0, 180.0), 0.92, "its landmarks do not form a face"),),
        processed_size=(400, 200),
        upscale=None,
    ), {"mode": mode, "detector": detector}


def test_the_record_and_the_picture_from_a_result() -> None:
    result, rec = _result()
    boxes = boxes_record(result)
    assert boxes == {
        "image_size": [400, 200],
        "kept": [[10.0, 20.0, 110.0, 140.0]],
        "rejected": [{"box": [200.0, 40.0, 320.0, 180.0], "score": 0.92, "reason": "its landmarks do not form a face"}],
    }
    record = {**rec, "boxes": boxes}
    # The slider's "before" at half size, RGBA as a browser round trip may give it.
    before = np.dstack([_gray(100, 200), np.full((100, 200), 255, np.uint8)])
    img, caption = faces_overlay(before, record)
    assert img is not None and img.shape == (100, 200, 3)
    assert _is(img[10, 5:55], KEPT_COLOR).all()  # kept box (10, 20)-(110, 140) halved
    assert _is(img[20, 100:160], REJECTED_COLOR).any() and not _is(img[20, 100:160], REJECTED_COLOR).all()
    assert caption.startswith("Detected faces: 1 kept (solid green), 1 rejected (dashed red: its landmarks do not form a face). ")
    assert "Repair damaged faces" in caption  # a rejected damaged face has a way on: the inpaint task
    big, _ = faces_overlay(np.zeros((1000, 2000, 3), np.uint8), record, max_side=500)
    assert big is not None and big.shape == (250, 500, 3)  # shrunk for display, boxes follow


def test_no_picture_where_the_slider_does_not_show_the_photo() -> None:
    result, rec = _result()
    boxes = boxes_record(result)
    assert faces_overlay(None, None) == (None, "Detected faces: restore a photo to see them.")
    img, caption = faces_overlay(_gray(), {**rec, "mode": "faces-only", "boxes": boxes})
    assert img is None and "faces-only shows face crops" in caption
    img, caption = faces_overlay(_gray(), {**rec, "detector": "none", "boxes": boxes})
    assert img is None and "no detection ran" in caption


def test_a_restore_records_the_rejected_candidates_in_before_pixels(low_mode_home: Path) -> None:
    """hopper at threshold 0.5: mobilenet0.25 also scores a patch of the cap; the screen refuses it."""
    from PIL import Image

    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    rgb = np.asarray(Image.open(ROOT / "examples" / "hopper_heavy_jpeg.jpg").convert("RGB"))
    res = Restorer()(rgb, RestoreOptions(mode="low", threshold=0.5))
    assert len(res.faces) == 1 and len(res.rejected) == 1, res.notes
    [r] = res.rejected
    assert r.reason == "it was not found again at a standard face size" and 0.5 <= r.score < 1
    assert f"1 detection rejected by the face check: {r.reason} (turn the check off to keep them)" in res.notes
    h, w = res.before.shape[:2]
    assert 0 <= r.box[0] < r.box[2] <= w and 0 <= r.box[1] < r.box[3] <= h
    record = {"mode": res.mode.name, "detector": res.detector, "boxes": boxes_record(res)}
    assert record["boxes"]["image_size"] == [w, h] and len(record["boxes"]["rejected"]) == 1
    img, caption = faces_overlay(res.before, record)
    assert img is not None and "1 kept" in caption and "1 rejected" in caption
    assert _is(img, REJECTED_COLOR).any() and _is(img, KEPT_COLOR).any()


def test_faces_only_draws_its_boxes_on_the_uploaded_photo() -> None:
    """faces-only's slider shows crops; "Show detected faces" draws on the photo the app passes (not an empty box)."""
    result, rec = _result()
    record = {**rec, "mode": "faces-only", "boxes": boxes_record(result)}
    crops = _gray(64, 128)  # the slider's crop sheet: not the photo's shape
    img, caption = faces_overlay(crops, record, photo=_gray(100, 200))
    assert img is not None and img.shape == (100, 200, 3)
    assert _is(img[10, 5:55], KEPT_COLOR).all()  # the kept box (10, 20)-(110, 140), halved
    assert caption.startswith("Detected faces: 1 kept")
