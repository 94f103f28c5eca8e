"""EXIF (date taken, camera) and DPI go from the upload into the result, orientation reset to 1."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpen_core.images import metadata
from gpen_core.images.decode import decode_image, encode_image

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401

TAKEN = "2001:02:03 04:05:06"
_EXIF_IFD, _DATE_TAKEN, _ORIENTATION, _MAKE = 0x8769, 0x9003, 0x0112, 0x010F


def _jpeg_with_exif(orientation: int = 6, dpi: tuple[int, int] = (300, 150), size: tuple[int, int] = (64, 48),
                    pixels: np.ndarray | None = None) -> bytes:
    ex = Image.Exif()
    ex[_ORIENTATION] = orientation
    ex[_MAKE] = "Canon"
    sub = ex.get_ifd(_EXIF_IFD)
    sub[_DATE_TAKEN] = TAKEN
    sub[0xA002], sub[0xA003] = size
    im = Image.fromarray(pixels) if pixels is not None else Image.new("RGB", size, (180, 120, 90))
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=ex, dpi=dpi, quality=95)
    return buf.getvalue()


def _read(data: bytes) -> tuple[Image.Exif, tuple[float, float] | None, tuple[int, int]]:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.getexif(), im.info.get("dpi"), im.size


def test_decode_keeps_exif_with_orientation_reset_and_dpi_of_the_upright_picture() -> None:
    d = decode_image(_jpeg_with_exif(orientation=6, dpi=(300, 150)))
    assert d.size == (48, 64)  # turned upright
    assert d.meta.exif is not None and d.meta.dpi == (150, 300)  # a quarter turn swaps x and y
    ex = Image.Exif()
    ex.load(d.meta.exif)
    assert ex[_ORIENTATION] == 1 and ex[_MAKE] == "Canon" and ex.get_ifd(_EXIF_IFD)[_DATE_TAKEN] == TAKEN


def test_a_photo_without_exif_or_dpi_carries_none() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buf, "PNG")
    d = decode_image(buf.getvalue())
    assert d.meta.exif is None and d.meta.dpi is None


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_encode_writes_exif_and_dpi(fmt: str) -> None:
    d = decode_image(_jpeg_with_exif(orientation=1, dpi=(300, 300)))
    meta = metadata.for_output(d.meta, d.upright_size, d.size)
    data = encode_image(d.rgb, fmt, exif=meta.exif, dpi=meta.dpi)  # type: ignore[arg-type]
    ex, dpi, _ = _read(data)
    assert ex.get_ifd(_EXIF_IFD)[_DATE_TAKEN] == TAKEN and ex[_ORIENTATION] == 1
    assert dpi is not None and abs(dpi[0] - 300) < 0.5 and abs(dpi[1] - 300) < 0.5


def test_png_chunks_come_before_the_image_data() -> None:
    from gpen_core.images.encode import encode_png

    raw = encode_png(np.zeros((8, 8, 3), np.uint8), exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00", dpi=(72, 72))
    assert raw.index(b"eXIf") < raw.index(b"IDAT") and raw.index(b"pHYs") < raw.index(b"IDAT")
    assert raw[raw.index(b"eXIf") + 4 : raw.index(b"eXIf") + 6] == b"MM"  # JPEG's "Exif\0\0" prefix dropped


def test_an_upscaled_result_keeps_the_print_size_and_its_exif_pixel_size() -> None:
    d = decode_image(_jpeg_with_exif(orientation=1, dpi=(300, 300), size=(64, 48)))
    meta = metadata.for_output(d.meta, (64, 48), (128, 96))
    assert meta.dpi == (600, 600)
    ex = Image.Exif()
    ex.load(meta.exif)
    assert (ex.get_ifd(_EXIF_IFD)[0xA002], ex.get_ifd(_EXIF_IFD)[0xA003]) == (128, 96)
    sheet = metadata.for_output(d.meta, (64, 48), (512, 256), photo=False)
    assert sheet.dpi is None and sheet.exif is not None  # a sheet of face crops has no print size


def test_malformed_exif_is_dropped_not_fatal() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buf, "JPEG", exif=b"Exif\x00\x00garbage-not-a-tiff-header")
    d = decode_image(buf.getvalue())
    assert d.rgb.shape == (30, 40, 3)


def test_a_restore_returns_the_photos_date_taken_and_dpi(low_mode_home: Path) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    with Image.open(ROOT / "examples" / "astronaut_low_resolution.jpg") as im:
        px = np.asarray(im.convert("RGB"))
    upload = _jpeg_with_exif(orientation=1, dpi=(300, 300), size=(px.shape[1], px.shape[0]), pixels=px)
    for fmt in ("jpeg", "png"):
        res = Restorer(models_dir=low_mode_home, device="cpu")(upload, RestoreOptions(mode="low", output_format=fmt))
        ex, dpi, size = _read(res.encoded)
        assert ex.get_ifd(_EXIF_IFD).get(_DATE_TAKEN) == TAKEN, fmt
        assert ex.get(_ORIENTATION) == 1 and ex.get(_MAKE) == "Canon"
        assert dpi is not None and abs(dpi[0] - 300) < 0.5, (fmt, dpi)
