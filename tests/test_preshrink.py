"""One pre-shrink rule: the shrink itself and every estimate made before it agree on the size."""

from __future__ import annotations

import numpy as np
import pytest

import gpen_core.modes as modes
from gpen_core.modes import MODES, preshrink_size

# 5000×3334 in a 2048 px mode: 3334 × 0.4096 = 1365.6, where truncating and rounding differ.
W, H = 5000, 3334


def test_the_rule_rounds_and_never_enlarges() -> None:
    assert preshrink_size(W, H, 2048) == (2048, 1366)
    assert preshrink_size(H, W, 2048) == (1366, 2048)
    assert preshrink_size(800, 600, 2048) == (800, 600)
    assert preshrink_size(W, H, None) == (W, H)
    assert preshrink_size(100_000, 1, 2048) == (2048, 1)  # never 0 px


def test_the_shrink_and_the_upscale_preview_give_the_same_size() -> None:
    from gpen_core.images.encode import shrink_to_max_side
    from gpen_core.upscale.tiles import preview

    low = MODES["low"]
    assert low.max_side == 2048
    shrunk, changed = shrink_to_max_side(np.zeros((H, W, 3), np.uint8), low.max_side)
    assert changed and shrunk.shape == (1366, 2048, 3)
    assert preview(W, H, 2, "low").out_size == (2 * 2048, 2 * 1366)


def test_every_place_that_sizes_the_shrunk_photo_asks_the_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import budget
    from gpen_core.images.encode import shrink_to_max_side
    from gpen_core.upscale.tiles import preview

    calls: list[tuple[int, int, int | None]] = []
    real = modes.preshrink_size

    def spy(width: int, height: int, max_side: int | None) -> tuple[int, int]:
        calls.append((width, height, max_side))
        return real(width, height, max_side)

    monkeypatch.setattr(modes, "preshrink_size", spy)
    low = MODES["low"]
    budget.estimate_peak(low, "cpu", (W, H))
    assert (W, H, 2048) in calls, "the budget sized the shrunk photo with its own rule"
    calls.clear()
    preview(W, H, 2, "low")
    assert (W, H, 2048) in calls, "the upscale preview sized the shrunk photo with its own rule"
    calls.clear()
    shrink_to_max_side(np.zeros((H, W, 3), np.uint8), 2048)
    assert (W, H, 2048) in calls, "the shrink used its own rule"


def test_a_photo_shrunk_at_decode_says_which_modes_limit_shrank_it(tmp_path) -> None:
    """A big JPEG in ``low`` is shrunk while decoding, and its note gave only the sizes ("shrunk at decode from
    4000×3000 to 2000×1500 (JPEG 1/2 scale)"), where a photo shrunk later says "low mode shrank the photo": the
    reason (the mode's limit) was said on one path only."""
    from PIL import Image

    from gpen_core.restorer import Restorer, RestoreOptions

    photo = tmp_path / "big.jpg"
    Image.new("RGB", (4000, 3000), (120, 90, 80)).save(photo, quality=80)
    res = Restorer(device="cpu", synthetic_weights=True)(photo, RestoreOptions(mode="low"))
    said = [n for n in res.notes if n.startswith("shrunk at decode from 4000×3000 to 2000×1500")]
    assert said and said[0].endswith(": low mode restores photos of at most 2048 px"), res.notes


def test_the_upload_preview_names_the_size_a_big_jpeg_is_restored_at(tmp_path) -> None:
    """A 4000×3000 JPEG decodes in low at its 1/2 DCT scale, 2000×1500, and stays so; the preview said "shrunk by
    low to 2048×1536", a size no result has."""
    from PIL import Image

    from gpen_app.restore_tab import preview, upscale_text
    from gpen_core.restorer import Restorer, RestoreOptions

    photo = tmp_path / "big.jpg"
    Image.new("RGB", (4000, 3000), (120, 90, 80)).save(photo, quality=80)
    res = Restorer(device="cpu", synthetic_weights=True)(photo, RestoreOptions(mode="low"))
    h, w = res.image.shape[:2]
    assert (w, h) == (2000, 1500)
    assert f"low to {w}×{h}" in preview(str(photo)).markdown, preview(str(photo)).markdown
    # The Upscale line sizes the same photo by the same rule: ×2 of what low restores, not of 2048×1536.
    assert f"result {2 * w}×{2 * h};" in upscale_text(str(photo), 2, "low", "cpu"), upscale_text(str(photo), 2, "low", "cpu")


def test_the_upscale_line_reads_the_photos_header_once(tmp_path, monkeypatch) -> None:
    """The Upscale line for a chosen mode opened the photo twice (its size, then its format for the DCT scale)."""
    from PIL import Image

    from gpen_app.restore_tab import upscale_text

    photo = tmp_path / "big.jpg"
    Image.new("RGB", (4000, 3000), (120, 90, 80)).save(photo, quality=80)
    opened, real = [], Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **kw: opened.append(a[0]) or real(*a, **kw))
    line = upscale_text(str(photo), 2, "low", "cpu")
    assert "result 4000×3000;" in line and len(opened) == 1, (line, opened)  # low decodes it at 1/2: 2000×1500, ×2
