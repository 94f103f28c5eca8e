"""The output side of the image boundary: RGB uint8 (+ alpha) → PNG / JPEG bytes, and shrinking (OpenCV is
imported only then)."""

from __future__ import annotations

import io
from typing import Literal

import numpy as np
from PIL import Image

from gpen_core.images import png as png_fast
from gpen_core.errors import OutOfMemory
from gpen_core.rgb import check_rgb


def encode_image(rgb: np.ndarray, fmt: Literal["png", "jpeg"], *, alpha: np.ndarray | None = None, quality: int = 95,
                 icc_profile: bytes | None = None, exif: bytes | None = None,
                 dpi: tuple[float, float] | None = None) -> bytes:
    """RGB uint8 H×W×3 (+ optional uint8 H×W alpha) → the bytes of a PNG or JPEG file.

    PNG keeps ``alpha`` (RGBA); JPEG writes the RGB as given (a caller passing alpha should say it was lost).
    ``quality``: JPEG only, 1..100 (chroma not subsampled, so skin and lips keep their colour edges).
    ``icc_profile``, ``exif`` (:func:`gpen_core.images.metadata.for_output`'s) and ``dpi`` (x, y): None writes none.
    """
    rgb = check_rgb(rgb, "the image to encode")
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"fmt must be 'png' or 'jpeg', got {fmt!r}")
    if alpha is not None and (
        not isinstance(alpha, np.ndarray) or alpha.dtype != np.uint8 or alpha.shape != rgb.shape[:2]
    ):
        desc = f"{alpha.dtype} {alpha.shape}" if isinstance(alpha, np.ndarray) else type(alpha).__name__
        raise ValueError(f"alpha must be uint8 H×W matching rgb {rgb.shape[:2]}, got {desc}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    try:
        if fmt == "png":  # not Pillow's writer: see gpen_core.images.png for why
            return png_fast.encode_png(rgb, alpha, icc_profile, exif=exif, dpi=dpi)
        extra: dict[str, object] = {"icc_profile": icc_profile} if icc_profile else {}
        if exif:
            extra["exif"] = exif
        if dpi:
            extra["dpi"] = (max(1, round(dpi[0])), max(1, round(dpi[1])))  # JFIF stores whole dots per inch
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(rgb), "RGB").save(buf, "JPEG", quality=quality, subsampling=0, **extra)
        return buf.getvalue()
    except MemoryError:
        h, w = rgb.shape[:2]
        raise OutOfMemory(
            f"Not enough memory to encode the {w}×{h} result as {fmt.upper()}. Use a lighter mode (it shrinks "
            "big photos) or a smaller photo, or try again when the machine is less busy."
        ) from None


def shrink_to_max_side(img: np.ndarray, max_side: int) -> tuple[np.ndarray, bool]:
    """(``img`` shrunk so its longest side is ``max_side`` by area averaging, True), or (``img``, False) when it
    is no longer; never enlarges. ``img``: uint8 H×W×3 (RGB) or H×W (an alpha: the same ``max_side`` keeps it
    aligned)."""
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side}")
    if img.ndim not in (2, 3):
        raise ValueError(f"expected H×W or H×W×C, got shape {img.shape}")
    from gpen_core.modes import preshrink_size

    h, w = img.shape[:2]
    if max(h, w) <= max_side:
        return img, False
    import cv2  # heavy; only needed when shrinking

    size = preshrink_size(w, h, max_side)
    # INTER_AREA averages the source pixels under each output pixel: no aliasing, no ringing.
    try:
        out = cv2.resize(np.ascontiguousarray(img), size, interpolation=cv2.INTER_AREA)
    except (MemoryError, cv2.error) as e:
        from gpen_core.platform.oom import is_oom

        if not is_oom(e):
            raise
        raise OutOfMemory(f"Not enough memory to shrink the {w}×{h} photo to {size[0]}×{size[1]}. Use a smaller photo, "
                          "or try again when the machine is less busy.") from None
    return np.ascontiguousarray(out), True
