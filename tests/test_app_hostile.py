"""Every hostile file of tests/hostile.py through the app's Restore handler, then a health check.

The decoder's own tests (tests/test_imageio.py) check the pixels; these check what the
*user* sees: a refused file is a ``gr.Error`` whose text carries the decoder's reason
and limit (never a stack trace); an accepted one comes back as a before/after pair of
the documented size, with every decoder note in the measured panel. After the whole
table the process must still restore a normal photo, without having grown.

End-to-end restores use the ``low`` mode (random GPEN-BFR-256, real mobilenet
detector; tests/fixtures_models.py). Most files are refused by the decoder before any
model runs; the 8000×6000 JPEG goes through low mode's 2048 px pre-shrink.
"""

from __future__ import annotations

import html
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import psutil
import pytest
from PIL import Image

import app
from gpen_app import panels as ui
from gpen_app.face_views import face_pairs
from gpen_core.modes import MODES
from gpen_core.restorer import RestoreOptions, get_restorer

from .conftest import ROOT, shared_path
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401
from .hostile import CASES, Case, Expectation, make_all

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
LOW_MAX_SIDE = MODES["low"].max_side
# What a whole table of hostile files may leave behind in a healthy process. The biggest
# accepted file decodes to 8000×6000 RGB (144 MB, twice: engine and the slider's "before");
# none of it may stay resident.
RSS_GROWTH_LIMIT = 500e6
# What a Python stack trace looks like in text: its header, a frame line, an exception repr.
TRACE = re.compile(r"Traceback|File \"[^\"]*\", line \d+|\b\w+(Error|Exception)\(")


class NoProgress:
    """Stands in for gr.Progress (the handler reports to it; nothing to check here)."""

    def __call__(self, fraction: float, desc: str | None = None, **_: object) -> None:
        pass


# Gradio calls handlers from a worker thread, not the main one; so do we (one for the module).
_WORKER = ThreadPoolExecutor(1, thread_name_prefix="handler")


def _restore(image: str, **kw: object) -> tuple[Any, ...]:
    args = dict(model="default", detector="default", alpha=1.0, threshold=0.9, max_faces=50, aligned=False) | kw
    return _WORKER.submit(app.restore, image, "low", progress=NoProgress(), **args).result()  # type: ignore[arg-type]


def _shown_text(message: str) -> str:
    """The error as the page renders it: the handler HTML-escapes and turns line breaks into <br>."""
    return html.unescape(message.replace("<br>", "\n"))


def _expected_processed_size(size: tuple[int, int], jpeg: bool = False) -> tuple[int, int]:
    """Low mode's documented pre-shrink: longest side to 2048 px, aspect kept (never enlarged).
    A big JPEG is first DCT-scaled at decode (1/2, 1/4, 1/8) while it keeps ≥ 90% of that side."""
    w, h = size
    if jpeg:
        for d in (8, 4, 2):
            if -(-max(w, h) // d) >= 0.9 * LOW_MAX_SIDE:
                w, h = -(-w // d), -(-h // d)
                break
    s = min(1.0, LOW_MAX_SIDE / max(w, h))
    return round(w * s), round(h * s)


@pytest.fixture(scope="module")
def warm_rss(low_mode_session_home: Path) -> int:
    """RSS after one normal restore (models loaded, code paths warm), before the first hostile file."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GPEN_HOME", str(low_mode_session_home))
    try:
        _restore(str(EXAMPLE))
    finally:
        mp.undo()
    return psutil.Process().memory_info().rss


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, warm_rss: int) -> dict[str, tuple[Path, Expectation]]:
    return make_all(tmp_path_factory.mktemp("hostile_app"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_file_through_the_restore_handler(case: Case, hostile: dict[str, tuple[Path, Expectation]], low_mode_home: Path) -> None:
    path, expect = hostile[case.name]
    if not expect.accepted:
        with pytest.raises(gr.Error) as info:
            _restore(str(path))
        err = info.value
        shown = _shown_text(err.message)
        assert err.title == "Cannot use this input", (err.title, shown)
        for s in expect.says:
            assert s.lower() in shown.lower(), f"{s!r} not in the message the user sees: {shown}"
        assert not TRACE.search(shown), f"trace-like text in: {shown}"
        return

    (before, after), download, md, gallery, record = _restore(str(path))
    processed = _expected_processed_size(expect.size, jpeg=path.suffix.lower() in (".jpg", ".jpeg"))
    if not _rotated(expect):  # see test_rotated_photo_reports_the_size_it_is_shown_at
        assert tuple(record["input_size"]) == expect.size
    assert tuple(record["processed_size"]) == processed
    # The slider's two sides line up, at the processed size (H×W×3 uint8).
    assert before.shape == after.shape == (processed[1], processed[0], 3) and after.dtype == np.uint8
    if processed != expect.size:
        # Said, in one or two steps (a JPEG may be shrunk at decode, then by the mode): the
        # notes take the photo from the file's size to the processed size, and the panel shows them.
        (w, h), (pw, ph) = expect.size, processed
        shrinks = [n for n in record["notes"] if re.search(r"\bshr[au]nk\b", n)]
        assert any(f"from {w}×{h} to" in n for n in shrinks) and any(f"to {pw}×{ph}" in n for n in shrinks), record["notes"]
        for n in shrinks:
            assert f"- {n}" in md
    for s in expect.says:
        assert any(s.lower() in n.lower() for n in record["notes"]), f"{s!r} not in notes {record['notes']}"
        assert s.lower() in md.lower(), f"{s!r} not in the panel"
    if record["faces"] == 0:  # none of these files holds a face: returned as decoded, and said so
        if processed == expect.size:
            assert np.array_equal(before, after)
        else:  # the slider shrinks "before" itself (Lanczos) to line up with the engine's shrink (area)
            assert np.abs(before.astype(np.int16) - after).mean() < 2.0
        assert "no face found" in md
    assert len(gallery) == record["faces"]
    with Image.open(download) as im:  # the downloadable is the processed photo, in low mode's JPEG
        assert im.format == "JPEG" and im.size == processed


def _rotated(expect: Expectation) -> bool:
    return any("exif orientation" in s.lower() for s in expect.says)


def test_rotated_photo_reports_the_size_it_is_shown_at(hostile: dict[str, tuple[Path, Expectation]], low_mode_home: Path) -> None:
    path, expect = hostile["exif_orientation_6"]
    *_, md, _, record = _restore(str(path))
    assert tuple(record["input_size"]) == expect.size
    assert "processed at" not in md


# ------------------------------------------------------ the two face cases


def _flat_png(folder: Path) -> Path:
    path = folder / "flat.png"
    Image.fromarray(np.full((300, 400, 3), 128, np.uint8)).save(path)
    return path


def test_photo_without_a_face_is_returned_unchanged_and_said(tmp_path: Path, low_mode_home: Path) -> None:
    path = _flat_png(tmp_path)
    res = get_restorer()(str(path), RestoreOptions(mode="low", model="GPEN-BFR-256"))
    assert res.faces == () and np.array_equal(res.image, np.asarray(Image.open(path)))
    assert any(n.startswith("no face found") and "lower detection threshold" in n for n in res.notes)

    (before, after), _, md, gallery, record = _restore(str(path))
    assert np.array_equal(before, after) and gallery == [] and record["faces"] == 0
    assert "- no face found: the photo is returned unchanged" in md and "| Faces | 0 |" in md


def test_more_faces_than_the_cap_says_so(low_mode_home: Path) -> None:
    solvay = shared_path("faces", "Solvay_conference_1927.png")
    res = get_restorer()(str(solvay), RestoreOptions(mode="low", model="GPEN-BFR-256", max_faces=3))
    assert len(res.faces) == 3
    [note] = [n for n in res.notes if n.startswith("found ")]
    found = int(re.match(r"found (\d+) faces; restored the 3 with the highest detection scores \(max faces = 3\)", note).group(1))  # type: ignore[union-attr]
    assert found > 3
    # As the official code: the kept faces are the best-scored ones.
    assert min(f.score for f in res.faces) >= 0.9

    # The panel the handler shows for this result (the handler itself is exercised above;
    # running detection on the group photo a second time would double this test's cost).
    assert f"- {note}" in ui.metrics_markdown(res) and "| Faces | 3 |" in ui.metrics_markdown(res)
    assert res.image.shape == (568, 1328, 3) and len(face_pairs(res)) == 3


# -------------------------------------------------------------- afterwards


def test_the_process_is_healthy_after_the_table(hostile: dict[str, tuple[Path, Expectation]], warm_rss: int, low_mode_home: Path) -> None:
    """Runs last in this file: a normal restore still works, and the table left nothing resident."""
    (before, after), _, md, gallery, record = _restore(str(EXAMPLE))
    assert record["faces"] >= 1 and len(gallery) == record["faces"] and not np.array_equal(before, after)
    assert not get_restorer().busy
    growth = psutil.Process().memory_info().rss - warm_rss
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 1e6:.0f} MB over the hostile table"
