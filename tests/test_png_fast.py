"""gpen_core.images.encode (PNG): banded, threaded PNG writing must give exactly the pixels it was given."""

from __future__ import annotations

import io
import struct
import zlib
import numpy as np
import pytest
from PIL import Image, ImageCms

from gpen_core.images import encode as png_fast
from gpen_core.images.encode import encode_image
from tests.conftest import shared_path

SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The file's chunks as (type, data), checking the signature and every CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        (crc,) = struct.unpack(">I", data[i + 8 + n : i + 12 + n])
        assert crc == zlib.crc32(kind + body), f"bad CRC on {kind!r}"
        out.append((kind, body))
        i += 12 + n
    assert i == len(data)
    return out


def scanlines(data: bytes) -> bytes:
    """The filtered scanlines: the IDAT chunks inflated as one zlib stream (Adler-32 checked)."""
    d = zlib.decompressobj()
    raw = d.decompress(b"".join(body for kind, body in chunks(data) if kind == b"IDAT"))
    assert d.eof and not d.unused_data
    return raw


def decoded_by_both(data: bytes, has_alpha: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pixels as Pillow and as OpenCV (libpng) decode them, both in RGB(A) order."""
    import cv2

    with Image.open(io.BytesIO(data)) as im:
        assert im.format == "PNG" and im.mode == ("RGBA" if has_alpha else "RGB")
        pil = np.asarray(im)
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert bgr is not None and bgr.shape == pil.shape
    order = [2, 1, 0, 3] if has_alpha else [2, 1, 0]
    return pil, bgr[..., order]


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (31, 45), (200, 3)])
@pytest.mark.parametrize("has_alpha", [False, True])
@pytest.mark.parametrize("band_bytes,workers", [(1, 3), (100, 2), (1 << 20, 1)])
def test_pixels_come_back_exactly(
    shape: tuple[int, int], has_alpha: bool, band_bytes: int, workers: int
) -> None:
    rng = np.random.default_rng(sum(shape) + band_bytes)
    # Noise with flat and ramped rows, so every candidate filter gets picked somewhere.
    rgb = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    rgb[::3] = 200
    rgb[1::5] = (np.arange(shape[1]) * 7 % 256).astype(np.uint8)[:, None]
    alpha = rng.integers(0, 256, shape, dtype=np.uint8) if has_alpha else None
    data = png_fast.encode_png(rgb, alpha, SRGB, band_bytes=band_bytes, workers=workers)
    want = rgb if alpha is None else np.dstack([rgb, alpha])
    for got in decoded_by_both(data, has_alpha):
        np.testing.assert_array_equal(got, want)
    kinds = [k for k, _ in chunks(data)]
    assert kinds[:2] == [b"IHDR", b"iCCP"] and kinds[-1] == b"IEND" and set(kinds[2:-1]) == {b"IDAT"}
    h, w = shape
    raw = scanlines(data)
    assert len(raw) == h * (1 + w * want.shape[2])
    assert set(raw[:: 1 + w * want.shape[2]]) <= {1, 2, 3}  # filter type bytes: Sub, Up, Average


def test_banding_and_threads_change_nothing_but_speed() -> None:
    """Filters are chosen per row from that row and the one above, so the filtered data is the
    same however the rows are banded; only the deflate blocks differ."""
    rng = np.random.default_rng(7)
    rgb = np.clip(np.linspace(0, 255, 97)[None, :, None] + rng.normal(0, 6, (150, 97, 3)), 0, 255).astype(np.uint8)
    one = png_fast.encode_png(rgb, band_bytes=1 << 30, workers=1)
    assert sum(k == b"IDAT" for k, _ in chunks(one)) == 2  # one band, then the Adler-32 trailer
    for band_bytes, workers in [(1, 4), (97 * 3 * 10, 2), (5000, 3)]:
        many = png_fast.encode_png(rgb, band_bytes=band_bytes, workers=workers)
        assert sum(k == b"IDAT" for k, _ in chunks(many)) > 2
        assert scanlines(many) == scanlines(one)


def test_the_filter_that_fits_each_row_is_picked() -> None:
    h, w = 6, 64
    rgb = np.empty((h, w, 3), np.uint8)
    rgb[:3] = (np.arange(w) * 3)[None, :, None]  # a horizontal ramp: Sub leaves 3s, Up leaves 0s below row 0
    rgb[3:] = (np.arange(3, h) * 30)[:, None, None] + (np.arange(w) % 2 * 100)[None, :, None]
    raw = scanlines(png_fast.encode_png(rgb))
    types = list(raw[:: 1 + w * 3])
    assert types[0] == 1  # first row: nothing above, Sub wins on a ramp
    assert types[1:3] == [2, 2]  # same row again: Up gives all zeros
    # Rows 4 and 5 repeat the stripes of the row above plus 30: Up leaves 30s, Sub ±100s,
    # Average -35s and 65s.
    assert types[4:] == [2, 2]


def test_adler32_combine_matches_zlib() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 65520, 65521, 65522, 200_000, len(data)):
        a, b = data[:cut], data[cut:]
        assert png_fast._adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(data)


def test_non_contiguous_inputs_and_icc() -> None:
    rng = np.random.default_rng(2)
    big = rng.integers(0, 256, (40, 60, 4), dtype=np.uint8)
    rgb, alpha = big[::2, ::-1, :3], big[::2, ::-1, 3]
    assert not rgb.flags.c_contiguous and not alpha.flags.c_contiguous
    data = png_fast.encode_png(rgb, alpha, SRGB, band_bytes=500, workers=2)
    with Image.open(io.BytesIO(data)) as im:
        assert im.info.get("icc_profile") == SRGB
        np.testing.assert_array_equal(np.asarray(im), np.dstack([rgb, alpha]))
    assert b"iCCP" not in png_fast.encode_png(rgb)


def test_icc_profile_is_readable_by_opencv_too() -> None:
    import cv2

    data = png_fast.encode_png(np.full((8, 8, 3), 9, np.uint8), None, SRGB)
    img, types, meta = cv2.imdecodeWithMetadata(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None and cv2.IMAGE_METADATA_ICCP in list(types)
    icc = meta[list(types).index(cv2.IMAGE_METADATA_ICCP)]
    assert np.asarray(icc).tobytes() == SRGB


def test_empty_image_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        png_fast.encode_png(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(ValueError, match="empty"):
        encode_image(np.zeros((5, 0, 3), np.uint8), "png")


def test_encode_image_writes_png_with_png_fast() -> None:
    rgb = np.random.default_rng(4).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    assert encode_image(rgb, "png", icc_profile=SRGB) == png_fast.encode_png(rgb, None, SRGB)


def test_photo_files_stay_near_pillows_size() -> None:
    """A real face, enlarged (smooth, where filter choice matters most) and with grain added:
    within 10 % of what Pillow's own writer made at the same zlib settings."""
    face = np.asarray(Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB").resize((1024, 1024)))
    grain = np.random.default_rng(5).normal(0, 3, face.shape)
    grainy = np.clip(face + grain, 0, 255).astype(np.uint8)
    for rgb in (face, grainy):
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, "PNG", compress_level=1, compress_type=3)
        ours = png_fast.encode_png(rgb, band_bytes=1 << 18, workers=2)
        assert len(ours) <= 1.10 * len(buf.getvalue()), (len(ours), len(buf.getvalue()))
        with Image.open(io.BytesIO(ours)) as im:
            np.testing.assert_array_equal(np.asarray(im), rgb)


def test_out_of_memory_in_a_worker_thread_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A band that fails to allocate on a pool thread still reaches encode_image's translation."""
    from gpen_core.errors import OutOfMemory

    def no_memory(rows: np.ndarray, bpp: int) -> np.ndarray:
        raise MemoryError()

    monkeypatch.setattr(png_fast, "usable_cores", lambda: 2)
    monkeypatch.setattr(png_fast, "_filter_band", no_memory)
    with pytest.raises(OutOfMemory, match="encode the 700×600 result as PNG"):
        encode_image(np.zeros((600, 700, 3), np.uint8), "png")  # 1.2 MiB: two bands, two threads
