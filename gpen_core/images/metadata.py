"""The photo's EXIF (date taken, camera) and DPI, carried from the upload (:func:`read`) to the result
(:func:`for_output`). Malformed EXIF is dropped, never fatal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

_N = TypeVar("_N", int, float)

_ORIENTATION = 0x0112
_EXIF_IFD = 0x8769
_PIXEL_X, _PIXEL_Y = 0xA002, 0xA003  # ExifImageWidth / ExifImageHeight in the Exif IFD
# The largest EXIF block kept: a JPEG APP1 segment holds at most 64 KB.
MAX_EXIF_BYTES = 65_000


@dataclass(frozen=True)
class Metadata:
    """What a file says beside its pixels: EXIF bytes ("Exif\\0\\0" + TIFF) and DPI (x, y), and at decode the EXIF
    orientation applied to the pixels."""

    exif: bytes | None = None
    dpi: tuple[float, float] | None = None
    note: str | None = None  # why the file's EXIF is not carried over, or its orientation not applied
    orientation: int = 1  # 1..8 (1: upright; 5-8 turn the picture by 90°)


def upright(size: tuple[_N, _N], orientation: int) -> tuple[_N, _N]:
    """``size`` (width and height, or DPI x and y) once EXIF ``orientation`` is applied: 5-8 turn by a quarter."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def read(im: Any) -> Metadata:
    """The EXIF orientation, EXIF and DPI of an opened Pillow image, the last two in the upright picture's terms
    (the orientation reset to 1; a quarter turn swaps the DPI's x and y). Malformed EXIF is a note, never fatal."""
    dpi = _dpi(im.info.get("dpi"))
    try:
        exif = im.getexif()
        orientation, note = _orientation(exif.get(_ORIENTATION, 1))
    except Exception:  # noqa: BLE001 - malformed EXIF must not sink a good image
        return Metadata(None, dpi, "EXIF data unreadable; orientation not applied")
    dpi = None if dpi is None else upright(dpi, orientation)
    if not len(exif):
        return Metadata(None, dpi, note, orientation)
    try:
        exif.get_ifd(_EXIF_IFD)  # loaded now, so it is written back with the rest
        if _ORIENTATION in exif:
            exif[_ORIENTATION] = 1
        raw = exif.tobytes()
    except Exception:  # noqa: BLE001 - the result has no EXIF, and says so
        return Metadata(None, dpi, note or "EXIF data unreadable: not carried into the result", orientation)
    if len(raw) > MAX_EXIF_BYTES:
        note = note or (f"EXIF data of {len(raw) // 1000} KB (over the {MAX_EXIF_BYTES // 1000} KB a JPEG holds) "
                        "not carried into the result")
        return Metadata(None, dpi, note, orientation)
    return Metadata(raw, dpi, note, orientation)


def _orientation(value: Any) -> tuple[int, str | None]:
    """An EXIF orientation tag's value as 1..8, and a note when it is none of those (then 1: not applied)."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        return 1, "EXIF orientation tag invalid; orientation not applied"
    return (value, None) if 1 <= value <= 8 else (1, f"EXIF orientation {value} invalid; not applied")


def _dpi(value: object) -> tuple[float, float] | None:
    try:
        x, y = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return None
    return (x, y) if x > 0 and y > 0 else None


def for_output(meta: Metadata, upright_size: tuple[int, int], out_size: tuple[int, int], *, photo: bool = True) -> Metadata:
    """``meta`` for a result of ``out_size`` (width, height) made from a photo of ``upright_size``: EXIF's pixel
    dimensions become the result's, DPI scales so the print size is kept. ``photo`` False (a sheet of face
    crops): EXIF only, a DPI would claim a print size."""
    exif = None if meta.exif is None else _with_size(meta.exif, out_size)
    dpi = None
    if photo and meta.dpi is not None and upright_size[0] > 0 and upright_size[1] > 0:
        sx, sy = out_size[0] / upright_size[0], out_size[1] / upright_size[1]
        dpi = (round(meta.dpi[0] * sx, 3), round(meta.dpi[1] * sy, 3))
    return Metadata(exif, dpi)


def _with_size(raw: bytes, size: tuple[int, int]) -> bytes | None:
    from PIL import Image

    try:
        exif = Image.Exif()
        exif.load(raw)
        sub = exif.get_ifd(_EXIF_IFD)
        if _PIXEL_X in sub or _PIXEL_Y in sub:
            sub[_PIXEL_X], sub[_PIXEL_Y] = int(size[0]), int(size[1])
        return exif.tobytes()
    except Exception:  # noqa: BLE001 - the block was read once already; if it no longer round-trips, drop it
        return None
