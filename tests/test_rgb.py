"""The one pixel contract (RGB uint8 H×W×3): one check, the same error at every boundary."""

from __future__ import annotations

import numpy as np
import pytest

from gpen_core.errors import InputError, PixelFormatError
from gpen_core.rgb import check_rgb

WRONG = {
    "float": np.zeros((4, 4, 3), np.float32),
    "grey": np.zeros((4, 4), np.uint8),
    "rgba": np.zeros((4, 4, 4), np.uint8),
    "list": [[[0, 0, 0]]],
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_anything_but_rgb_uint8_is_refused_with_what_and_the_fix(name: str) -> None:
    with pytest.raises(PixelFormatError) as info:
        check_rgb(WRONG[name], "the photo")
    msg = str(info.value)
    assert msg.startswith("The photo must be an RGB uint8 H×W×3 array, got ")
    assert "Convert it first" in msg
    # the edges map it to "bad input" (exit 2), and a library caller's `except ValueError` catches it
    assert isinstance(info.value, InputError) and isinstance(info.value, ValueError)
    assert info.value.exit_code == 2


def test_what_it_got_is_named() -> None:
    with pytest.raises(PixelFormatError, match=r"got float32 with shape \(4, 4, 3\)"):
        check_rgb(WRONG["float"])
    with pytest.raises(PixelFormatError, match="got list"):
        check_rgb(WRONG["list"])


def test_an_image_without_pixels_is_refused() -> None:
    with pytest.raises(PixelFormatError, match=r"is empty \(0×5 px\)"):
        check_rgb(np.zeros((5, 0, 3), np.uint8), "the image")


def test_a_good_array_comes_back_contiguous_and_uncopied_when_it_already_is() -> None:
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    assert check_rgb(rgb) is rgb
    flipped = rgb[:, ::-1]
    out = check_rgb(flipped)
    assert out.flags["C_CONTIGUOUS"] and np.array_equal(out, flipped)


def test_every_boundary_raises_the_same_error() -> None:
    """Encoding, the generator's tensors, the overlay, the upscaler and the facade's array
    input all refuse a float image with PixelFormatError naming what they were given."""
    from gpen_core.engine.pipeline import decode
    from gpen_core.images.encode import encode_image
    from gpen_core.networks.tensors import to_tensor
    from gpen_app.overlay import draw_detections
    from gpen_core.upscale.tiles import run_tiles

    bad = WRONG["float"]
    calls = {
        "the image to encode": lambda: encode_image(bad, "png"),
        "the face": lambda: to_tensor(bad),
        "the photo to draw on": lambda: draw_detections(bad, []),
        "the photo to upscale": lambda: run_tiles(bad, None, 16),  # checked before the network is touched
        "the image array": lambda: decode(bad),
    }
    for what, call in calls.items():
        with pytest.raises(PixelFormatError, match=what[1:]):
            call()
