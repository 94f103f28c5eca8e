"""The one pixel contract at every boundary, RGB uint8 H×W×3, checked by one function for every room."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpen_core.errors import PixelFormatError


def check_rgb(rgb: Any, what: str = "image") -> np.ndarray:
    """``rgb`` as a C-contiguous RGB uint8 H×W×3 array (no copy when it is one; OpenCV and the tensor conversions
    need positive strides); anything else raises PixelFormatError naming ``what``, what it got and the fix."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        desc = f"{rgb.dtype} with shape {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise PixelFormatError(
            f"{what[:1].upper()}{what[1:]} must be an RGB uint8 H×W×3 array, got {desc}. "
            "Convert it first (drop an alpha channel, expand grayscale to 3 channels, scale floats to 0-255)."
        )
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise PixelFormatError(f"{what[:1].upper()}{what[1:]} is empty ({rgb.shape[1]}×{rgb.shape[0]} px): it has no pixels to use.")
    return np.ascontiguousarray(rgb)
