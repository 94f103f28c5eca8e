"""A 16-bit greyscale photo decodes within ``low``'s means: converted in strips, shrunk before it becomes RGB."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpen_core.images.decode import decode_image

from .conftest import ROOT


def _grey16(w: int, h: int) -> np.ndarray:
    """(x·7 + y·3) mod 65536, built in uint16 (its wrapping is the modulo): int64 grids of a 7000 px
    square cost 4.5 s of CPU for the same values."""
    x, y = np.arange(w, dtype=np.uint16) * np.uint16(7), np.arange(h, dtype=np.uint16) * np.uint16(3)
    return x[None, :] + y[:, None]


def test_strip_conversion_gives_the_exact_8_bit_values() -> None:
    a = _grey16(3000, 1600)  # 4.8 MP: above the strip threshold, so several strips
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    out = decode_image(buf.getvalue())
    want = ((a.astype(np.uint64) * 255 + 32767) // 65535).astype(np.uint8)  # v/257 rounded
    assert out.rgb.shape == (1600, 3000, 3)
    assert np.array_equal(out.rgb[..., 0], want) and np.array_equal(out.rgb[..., 2], want)
    assert "16-bit PNG scaled to 8 bit" in out.notes


def test_greyscale_is_shrunk_to_the_callers_side_before_rgb() -> None:
    a = np.tile(np.linspace(0, 255, 3000).astype(np.uint8), (1000, 1))
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    out = decode_image(buf.getvalue(), reduce_to=1500)
    assert out.rgb.shape == (500, 1500, 3) and out.original_size == (3000, 1000)
    assert "shrunk at decode from 3000×1000 to 1500×500 (greyscale, before expanding it to RGB)" in out.notes
    assert abs(int(out.rgb[250, 750, 0]) - 128) <= 2  # the middle of the ramp stays mid-grey


CHILD = """
import json, sys
from gpen_core.images.decode import decode_image
from gpen_core.platform.meter import PeakMeter
with PeakMeter(None) as m:
    out = decode_image(sys.argv[1], reduce_to=2048)
print("RESULT " + json.dumps({"above": m.peaks.rss_bytes - m.peaks.baseline_rss_bytes, "method": m.peaks.method,
                              "shape": list(out.rgb.shape)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the meter's exact peak (VmHWM) needs Linux")
def test_a_7000px_16bit_greyscale_png_decodes_in_lows_means(tmp_path: Path) -> None:
    """A 7000×7000 16-bit grey PNG. Decoding it cost 12 bytes per pixel (591 MB measured
    with benchmarks/decode_peak.py at commit bc5933a); for low it must stay near Pillow's own 2-byte buffer plus the
    8-bit copy, well under 4 bytes per pixel (196 MB), in a fresh process measured by the engine's meter."""
    path = tmp_path / "grey16.png"
    Image.fromarray(_grey16(7000, 7000)).save(path)
    p = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, p.stderr[-3000:]
    got = json.loads(line[len("RESULT "):])
    assert got["shape"] == [2048, 2048, 3]
    assert got["method"] == "vmhwm"
    assert got["above"] < 4 * 7000 * 7000, f"decoding took {got['above'] / 1e6:.0f} MB above baseline"


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def test_an_rgb_png_is_shrunk_while_read_out_to_the_same_picture() -> None:
    """Shrunk in strips for the caller's side, the picture is OpenCV's area shrink of the whole
    image (the caller's own shrink): off by at most 1 where float sums meet a rounding tie."""
    from gpen_core.images.decode import shrink_to_max_side

    rng = np.random.default_rng(5)
    for shape, side in (((1100, 1501, 3), 1024), ((1300, 500, 3), 640), ((800, 1600, 3), 800)):  # the last: 2× exact
        data = _png(rng.integers(0, 256, shape, np.uint8))
        out = decode_image(data, reduce_to=side)
        want, _ = shrink_to_max_side(decode_image(data).rgb, side)
        assert out.rgb.shape == want.shape and out.original_size == (shape[1], shape[0])
        diff = np.abs(out.rgb.astype(int) - want.astype(int))
        assert diff.max() <= 1 and np.count_nonzero(diff) < diff.size // 10_000, (shape, diff.max(), np.count_nonzero(diff))
        note = f"shrunk at decode from {shape[1]}×{shape[0]} to {want.shape[1]}×{want.shape[0]} (while reading it out of the decoder)"
        assert note in out.notes


def test_a_16_bit_rgb_png_shrunk_at_decode_still_says_it_was_scaled_to_8_bit(tmp_path: Path) -> None:
    import cv2

    a = np.random.default_rng(1).integers(0, 65536, (600, 900, 3), np.uint16)
    cv2.imwrite(str(tmp_path / "deep.png"), a)
    out = decode_image(tmp_path / "deep.png", reduce_to=450)
    assert out.rgb.shape == (300, 450, 3)
    assert "16-bit PNG scaled to 8 bit" in out.notes and any("while reading it out" in n for n in out.notes)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the meter's exact peak (VmHWM) needs Linux")
def test_a_7000px_rgb_png_decodes_for_low_without_a_full_size_copy(tmp_path: Path) -> None:
    """A 7000×7000 8-bit RGB PNG for low: Pillow's own 4-byte buffer (196 MB) plus the small
    result, no 3-byte full-size array beside it (349 MB measured with that copy, 247 MB without,
    benchmarks/decode_peak.py --kinds rgb8, at commit bc5933a). The bound, 6 bytes per pixel, sits between the two."""
    xy = np.arange(7000).astype(np.uint8)  # (x + y) mod 256, added in uint8
    a = xy[None, :] + xy[:, None]
    path = tmp_path / "rgb8.png"
    Image.fromarray(np.stack([a, a[::-1], a.T], -1)).save(path)
    del a
    p = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, p.stderr[-3000:]
    got = json.loads(line[len("RESULT "):])
    assert got["shape"] == [2048, 2048, 3] and got["method"] == "vmhwm"
    assert got["above"] < 6 * 7000 * 7000, f"decoding took {got['above'] / 1e6:.0f} MB above baseline"
