"""Two faces side by side, the photo turned 90°, 180° and 270°: the same two faces every way.

The real RetinaFace mobilenet0.25 (../shared/weights) on two real faces (../shared/faces) pasted
side by side. The detector finds some faces lying sideways and not others: on the photo turned
270° the upright pass kept one sideways face and, having found one, never searched the turned
copies for the other.
"""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import shared_path

SIZE, MARGIN = 200, 40  # each face's square on the canvas, and the gaps


def _canvas() -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    from PIL import Image

    faces = [np.asarray(Image.open(shared_path("faces", f"ffhq_0000{i}_512.png")).convert("RGB").resize((SIZE, SIZE), Image.LANCZOS))
             for i in (1, 2)]
    c = np.full((SIZE + 2 * MARGIN, 2 * SIZE + 3 * MARGIN, 3), 200, np.uint8)
    squares = []
    for i, f in enumerate(faces):
        x = MARGIN + i * (SIZE + MARGIN)
        c[MARGIN : MARGIN + SIZE, x : x + SIZE] = f
        squares.append((x, MARGIN, x + SIZE, MARGIN + SIZE))
    return c, squares


def _back(box: tuple[float, float, float, float], k: int, w: int, h: int) -> tuple[float, ...]:
    """A box on np.rot90(canvas, k) (w×h the canvas) as a box on the canvas."""
    x0, y0, x1, y1 = box
    pts = np.array([[x0, y0], [x1, y1]], np.float64)
    for j in range(k, 0, -1):  # undo the j-th counter-clockwise quarter turn: (x', y') came from (W - y', x')
        width = w if (j - 1) % 2 == 0 else h  # the width of the copy before that turn
        pts = np.stack([width - pts[:, 1], pts[:, 0]], axis=1)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return (lo[0], lo[1], hi[0], hi[1])


@pytest.fixture(scope="module")
def detector():
    from gpen_core.faces.detect import FaceDetector

    return FaceDetector(shared_path("weights", "detection_mobilenet0.25_Final.pth"), "mobilenet0.25", "cpu")


def test_the_same_faces_on_every_turn_of_the_photo(detector) -> None:
    from gpen_core.faces.find import find_faces

    canvas, squares = _canvas()
    h, w = canvas.shape[:2]
    upright = None
    for k in range(4):
        found = find_faces(detector, np.ascontiguousarray(np.rot90(canvas, k)))
        assert len(found.faces) == 2, (k, found.notes, [r for _, r in found.rejected])
        boxes = sorted((_back(d.box, k, w, h) for d in found.faces), key=lambda b: b[0])
        for (x0, y0, x1, y1), (sx0, sy0, sx1, sy1) in zip(boxes, squares):  # one face in each pasted square
            assert sx0 <= (x0 + x1) / 2 <= sx1 and sy0 <= (y0 + y1) / 2 <= sy1
        if upright is None:
            upright = boxes
        else:  # the same boxes, mapped back, within a few pixels of the upright photo's
            assert np.abs(np.array(boxes) - np.array(upright)).max() <= 6.0, (k, boxes, upright)


def test_an_upright_picture_is_searched_turned_only_when_asked() -> None:
    """A clip's frame is upright (its display matrix turned it): with no face found, a photo searches the three
    turned copies, a frame does not (three passes a faceless frame) unless orientations asks, as for a photo."""
    from types import SimpleNamespace

    from gpen_core.faces.find import find_faces

    class Spy:
        def __init__(self) -> None:
            self.turns: list[int] = []

        def detect(self, rgb, *, turn: int = 0, **kw):
            self.turns.append(turn)
            return []

        def screen(self, rgb, dets, **kw):
            return SimpleNamespace(kept=list(dets), rejected=[])

    blank = np.full((64, 64, 3), 90, np.uint8)
    for kw, turns in (({}, [0, 1, 2, 3]), ({"upright": True}, [0]), ({"upright": True, "orientations": True}, [0, 1, 2, 3])):
        spy = Spy()
        found = find_faces(spy, blank, **kw)  # type: ignore[arg-type]
        assert spy.turns == turns and found.searched_turns == tuple(turns), kw
