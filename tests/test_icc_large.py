"""Colour profiles past Pillow's 1 MB text-chunk limit are read (up to 16 MB) without changing Pillow for anyone else."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from gpen_core.errors import InputError
from gpen_core.images.decode import MAX_ICC_READ_BYTES, decode_image

from .hostile import big_icc


def _png_with_icc(icc: bytes) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 100, 50)).save(buf, "PNG", icc_profile=icc)
    return buf.getvalue()


def test_a_png_with_a_2mb_profile_is_decoded_and_converted() -> None:
    data = _png_with_icc(big_icc(2_000_000))
    with pytest.raises(ValueError, match="MAX_TEXT_CHUNK"):  # what Pillow alone does with it
        Image.open(io.BytesIO(data))
    before = PngImagePlugin.MAX_TEXT_CHUNK
    out = decode_image(data)
    assert PngImagePlugin.MAX_TEXT_CHUNK == before  # the process-wide limit is left as it was
    assert out.rgb.shape == (48, 64, 3)
    assert np.abs(out.rgb[10, 10].astype(int) - (200, 100, 50)).max() <= 3  # an sRGB profile: colours unchanged
    assert any("colour profile (2 MB" in n for n in out.notes), out.notes
    assert any("converted to sRGB" in n for n in out.notes), out.notes


def test_a_profile_over_the_stated_limit_is_refused_in_our_words() -> None:
    data = _png_with_icc(big_icc(MAX_ICC_READ_BYTES + 1_000_000))
    with pytest.raises(InputError, match="colour profile is over 16 MB"):
        decode_image(data)
