"""Hardened image decoding and encoding: the only place that reads user files.

Contract at the boundary: :func:`decode_image` returns RGB uint8 H×W×3 (C-contiguous,
upright, alpha composited on white) plus the alpha channel separately; :func:`encode_image`
takes the same arrays back. Every refusal is an :class:`~gpen_core.errors.InputError`
whose message names the limit and how to fix the file; every normalisation is a plain
sentence in ``DecodedImage.notes``.

Order of checks, cheapest first, so a hostile file costs milliseconds and kilobytes:
file size (``stat`` / ``len``, before reading) → format from Pillow's header parse,
restricted to the allow-list → declared pixel count, aspect ratio and smallest side
(still before any pixel is decoded) → decode → normalise.

Pillow's global ``ImageFile.LOAD_TRUNCATED_IMAGES`` is never touched: truncated files
are refused, not silently padded with grey (and decoding refuses to run if some other
module turned it on). Nothing heavy at import: OpenCV is imported only to shrink.
"""

from __future__ import annotations

import io
import math
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from .errors import InputError, OutOfMemory

__all__ = [
    "DEFAULT_LIMITS",
    "DecodedImage",
    "InputLimits",
    "decode_image",
    "encode_image",
    "shrink_to_max_side",
]

# Our format names are Pillow's plugin names. Pillow's JPEG plugin returns an "MPO" image
# for the multi-picture JPEGs many phones and cameras write (main image + previews/depth);
# users see a .jpg, so it is a JPEG to us.
_PILLOW_NAMES: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")
_OUR_NAME = {"MPO": "JPEG"}


@dataclass(frozen=True)
class InputLimits:
    """What an uploaded image may be. Checked before its pixels are decoded."""

    # Bytes on disk. A 48 MP phone JPEG is ~10-20 MB; 25 MB leaves room for a PNG
    # screenshot while bounding how long a hostile upload can keep a decoder busy.
    max_file_bytes: int = 25_000_000
    # Declared width × height. 50 MP admits 48 MP phone sensors (8000×6000) and refuses
    # decompression bombs (a 50 000 × 50 000 PNG declares 2500 MP in a few hundred bytes).
    # Decoded, 50 MP RGB is 150 MB plus Pillow's 4-byte-per-pixel buffer. Kept below
    # Pillow's own MAX_IMAGE_PIXELS (~89 MP) so Pillow's bomb warning never fires for an
    # image we accept: everything above ours is refused with our message instead.
    max_pixels: int = 50_000_000
    # Longest side / shortest side. Faces need two dimensions; a 1×20 000 strip is a
    # banner or an attack, and it makes detector pyramids degenerate.
    max_aspect: float = 20.0
    # Shortest side in pixels. RetinaFace's smallest anchor is 16 px, so nothing smaller
    # can hold a detectable face; a 16×16 image is accepted (and simply has no face).
    min_side: int = 16
    # Allowed containers. GIF is in because animated GIF/WebP uploads are common (the
    # first frame is used and the notes say so). SVG, PDF, HEIC, ICO, PSD... are out:
    # either Pillow cannot decode them or their parsers are needless attack surface.
    formats: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")

    def __post_init__(self) -> None:
        unknown = set(self.formats) - set(_PILLOW_NAMES)
        if unknown:
            raise ValueError(f"unknown formats {sorted(unknown)}; choose from {sorted(_PILLOW_NAMES)}")
        if self.max_file_bytes < 1 or self.max_pixels < 1 or self.min_side < 1 or self.max_aspect < 1:
            raise ValueError(f"limits must be positive (aspect ≥ 1), got {self}")


DEFAULT_LIMITS = InputLimits()


@dataclass(frozen=True, eq=False)
class DecodedImage:
    """A decoded, upright, 8-bit image ready for the engine.

    ``rgb``: RGB uint8 H×W×3, C-contiguous; transparent areas already composited on white.
    ``alpha``: uint8 H×W (255 = opaque) when the file had real transparency, else None
    (a fully opaque alpha channel is dropped). Kept so the result can be written back
    with its transparency (:func:`encode_image` with ``alpha=``).
    ``format``: our name of the container ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF").
    ``original_size``: (width, height) as stored in the file, before EXIF rotation and
    before any shrink at decode.
    ``notes``: one plain sentence per normalisation applied, in the order applied.
    ``icc_profile``: the file's embedded RGB colour profile (None when absent or not RGB);
    pixels are left in that colour space, so pass it to :func:`encode_image` to keep the
    colours the same in colour-managed viewers. Only a valid profile of at most 256 KB is
    kept: a larger one is converted to sRGB (the pixels with it) and an invalid one dropped,
    with a note, so every result opens in Pillow and OpenCV.
    """

    rgb: np.ndarray
    alpha: np.ndarray | None
    format: str
    original_size: tuple[int, int]
    notes: tuple[str, ...] = ()
    icc_profile: bytes | None = field(default=None, repr=False)
    # The EXIF orientation applied to ``rgb`` (1: none; 5-8 turn the picture by 90°).
    orientation: int = 1

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of ``rgb``."""
        return int(self.rgb.shape[1]), int(self.rgb.shape[0])

    @property
    def upright_size(self) -> tuple[int, int]:
        """(width, height) of the photo as viewers show it: ``original_size`` after EXIF rotation."""
        w, h = self.original_size
        return (h, w) if self.orientation in (5, 6, 7, 8) else (w, h)


# ---------------------------------------------------------------------------------------
# Messages


def _mb(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB" if n % 1_000_000 else f"{n // 1_000_000} MB"
    return f"{n / 1e3:.1f} KB" if n >= 1000 else f"{n} bytes"


def _ratio(r: float) -> str:
    return f"{r:.1f}".rstrip("0").rstrip(".")


def _mp(n: int) -> str:
    return f"{n / 1e6:.1f} megapixels" if n % 1_000_000 else f"{n // 1_000_000} megapixels"


def _display(fmt: str) -> str:
    return "WebP" if fmt == "WEBP" else fmt


def _formats_text(limits: InputLimits) -> str:
    return ", ".join(_display(f) for f in limits.formats)


def _png_declared_size(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        return (w, h) if w and h else None
    return None


def _too_many_pixels(pixels: int, limits: InputLimits, size: tuple[int, int] | None) -> InputError:
    what = f"is {size[0]}×{size[1]} ({_mp(pixels)})" if size else f"declares {_mp(pixels)}"
    if size:
        s = math.sqrt(limits.max_pixels / pixels)
        fix = f"resize it to at most {max(1, int(size[0] * s))}×{max(1, int(size[1] * s))}"
    else:
        fix = f"resize it to at most {_mp(limits.max_pixels)}"
    return InputError(
        f"The image {what}; the limit is {_mp(limits.max_pixels)} "
        f"(larger images are refused to protect the server's memory). {fix[0].upper()}{fix[1:]} and try again."
    )


# Magic numbers of files people upload by mistake, so the refusal can name what it got.
# Only the first few KB are looked at; nothing here parses the file.
def _sniff(head: bytes) -> str | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if head.startswith((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")):
        return "TIFF"
    if head.startswith(b"BM") and int.from_bytes(head[14:18], "little") in (12, 40, 52, 56, 64, 108, 124):
        return "BMP"  # "BM" + a known DIB header size, so text starting "BM" is not a bitmap
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"):
            return "HEIC"
        if brand in (b"avif", b"avis"):
            return "AVIF"
        return "video or ISO media"
    for magic, name in (
        (b"\x00\x00\x01\x00", "ICO"),
        (b"\x00\x00\x02\x00", "CUR"),
        (b"8BPS", "PSD (Photoshop)"),
        (b"%PDF", "PDF"),
        (b"%!PS", "PostScript/EPS"),
        (b"\xc5\xd0\xd3\xc6", "EPS"),
        (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
        (b"\xff\x4f\xff\x51", "JPEG 2000"),
        (b"\xff\x0a", "JPEG XL"),
        (b"\x00\x00\x00\x0cJXL ", "JPEG XL"),
        (b"PK\x03\x04", "ZIP archive"),
        (b"\x1f\x8b", "gzip archive"),
    ):
        if head.startswith(magic):
            return name
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    lowered = text[:4096].lower()
    if b"<svg" in lowered and (lowered.startswith((b"<?xml", b"<svg", b"<!--", b"<!doctype svg"))):
        return "SVG"
    if lowered.startswith((b"<!doctype html", b"<html")):
        return "HTML"
    try:
        decoded = head.decode("utf-8")
    except UnicodeDecodeError:
        # A multi-byte character cut at the end of the sniffed prefix is still text.
        try:
            decoded = head[:-4].decode("utf-8")
        except UnicodeDecodeError:
            return None
    if decoded and all(c.isprintable() or c in "\r\n\t\f" for c in decoded):
        return "text"
    return None


def _unidentified(head: bytes, limits: InputLimits) -> InputError:
    kind = _sniff(head)
    supported = f"Supported formats: {_formats_text(limits)}."
    if kind in _PILLOW_NAMES and kind in limits.formats:
        return InputError(
            f"The file starts like a {kind} but its header cannot be read; it is probably truncated "
            f"or corrupt. Re-export it and try again."
        )
    if kind in _PILLOW_NAMES:
        return InputError(f"{kind} files are not accepted here. {supported} Convert it to PNG or JPEG and try again.")
    if kind == "HEIC":
        return InputError(
            "HEIC/HEIF photos (the iPhone default) are not supported. "
            f"{supported} Export it as JPEG (on iPhone: Settings → Camera → Formats → Most Compatible) "
            "and try again."
        )
    if kind == "text":
        return InputError(
            f"The file is not an image: it contains text. {supported} Choose an image file and try again."
        )
    if kind is not None:
        return InputError(f"{kind} files are not supported. {supported} Convert it to PNG or JPEG and try again.")
    return InputError(
        f"The file is not a recognised image (it starts with bytes {head[:8].hex(' ')}). "
        f"{supported} Choose an image file and try again."
    )


# ---------------------------------------------------------------------------------------
# Decoding


_SNIFF_BYTES = 4096  # enough to find "<svg" after an XML prolog and a comment


def _open_source(source: bytes | str | os.PathLike[str], limits: InputLimits) -> io.BufferedIOBase:
    """A readable binary file for ``source``, after the size check (which reads nothing)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        n = memoryview(source).nbytes
        if n > limits.max_file_bytes:
            raise _too_big(n, limits)
        return io.BytesIO(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be bytes or a path, got {type(source).__name__}")
    path = os.fspath(source)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"The file {path!r} does not exist. Check the path and try again.") from None
    except OSError as e:
        raise InputError(f"The file {path!r} cannot be opened ({e.strerror}). Check the path and try again.") from None
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device reports size 0 and then streams forever; a folder is a mistake.
        raise InputError(f"{path!r} is not a regular file. Choose an image file and try again.")
    if st.st_size > limits.max_file_bytes:
        raise _too_big(st.st_size, limits)
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by decode_image's with-block
    except OSError as e:
        raise InputError(f"The file {path!r} cannot be opened ({e.strerror}). Check the path and try again.") from None


def _too_big(n: int, limits: InputLimits) -> InputError:
    return InputError(
        f"The file is {_mb(n)}; the limit is {_mb(limits.max_file_bytes)}. "
        "Save it as a JPEG (quality 90 is plenty) or resize it, and try again."
    )


def _check_geometry(size: tuple[int, int], limits: InputLimits) -> None:
    w, h = size
    pixels = w * h
    if pixels > limits.max_pixels:
        raise _too_many_pixels(pixels, limits, size)
    long, short = max(w, h), max(1, min(w, h))
    if long / short > limits.max_aspect:
        raise InputError(
            f"The image is {w}×{h} (aspect ratio {_ratio(long / short)}:1); "
            f"the limit is {_ratio(limits.max_aspect)}:1. Crop it closer to the people in it and try again."
        )
    if min(w, h) < limits.min_side:
        raise InputError(
            f"The image is {w}×{h} pixels; its shortest side must be at least {limits.min_side} pixels "
            "for a face to be found. Use a larger image and try again."
        )


def _read_orientation(im: Image.Image) -> tuple[int, str | None]:
    """EXIF orientation (1..8, 1 = upright) and a note when the EXIF could not be read."""
    try:
        value = im.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - malformed EXIF must not sink a good image
        return 1, "EXIF data unreadable; orientation not applied"
    try:
        value = int(value)
    except (TypeError, ValueError):
        return 1, "EXIF orientation tag invalid; orientation not applied"
    return (value, None) if 1 <= value <= 8 else (1, f"EXIF orientation {value} invalid; not applied")


# EXIF orientation → array transform that makes the image upright, on H×W[×C] arrays.
# Same table as ImageOps.exif_transpose (2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM,
# 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90); tests check it against Pillow.
_ORIENT: dict[int, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    2: ("mirrored", lambda a: a[:, ::-1]),
    3: ("rotated", lambda a: a[::-1, ::-1]),
    4: ("flipped", lambda a: a[::-1]),
    5: ("rotated and mirrored", lambda a: a.swapaxes(0, 1)),
    6: ("rotated", lambda a: np.rot90(a, -1)),
    7: ("rotated and mirrored", lambda a: a[::-1, ::-1].swapaxes(0, 1)),
    8: ("rotated", lambda a: np.rot90(a, 1)),
}


def _is_16bit(im: Image.Image) -> bool:
    """True when the pending decode reads 16-bit samples (Pillow names rawmodes like 'RGB;16B')."""
    if im.mode.startswith("I;16"):
        return True
    for tile in getattr(im, "tile", None) or ():
        args = tile[3] if len(tile) > 3 else None
        raw = args[0] if isinstance(args, tuple) and args else args
        if isinstance(raw, str) and ";16" in raw:
            return True
    return False


# Frames are counted only for the note, so counting is capped: Pillow's own n_frames walks
# every GIF block in Python (seconds for a 25 MB file of 1-pixel frames) and every TIFF
# page with a quadratic loop-check (minutes for 100 000 tiny pages).
_MAX_COUNTED_FRAMES = 1000


def _count_gif_frames(fp: io.BufferedIOBase, cap: int) -> int:
    """Image descriptors in a GIF, stopping at ``cap`` (block walk; reads no pixel data)."""
    start = fp.tell()
    try:
        fp.seek(10)
        flags = fp.read(3)[:1]
        if flags and flags[0] & 0x80:
            fp.seek(3 * (2 << (flags[0] & 7)), io.SEEK_CUR)  # global colour table
        frames = blocks = 0
        while frames < cap and blocks < 50 * cap:  # extensions between frames are capped too
            blocks += 1
            intro = fp.read(1)
            if intro == b"!":
                fp.read(1)  # extension label
            elif intro == b",":
                desc = fp.read(9)
                if len(desc) < 9:
                    break
                if desc[8] & 0x80:
                    fp.seek(3 * (2 << (desc[8] & 7)), io.SEEK_CUR)  # local colour table
                fp.read(1)  # LZW minimum code size
                frames += 1
            else:
                break  # trailer, end of file or garbage: Pillow stops here too
            while (size := fp.read(1)) and size[0]:
                fp.seek(size[0], io.SEEK_CUR)  # data sub-blocks
        return frames
    finally:
        fp.seek(start)


def _count_frames(im: Image.Image, fp: io.BufferedIOBase, fmt: str, cap: int) -> int:
    if fmt == "GIF":
        return _count_gif_frames(fp, cap)
    if fmt == "TIFF":
        n = 1
        try:
            while n < cap:
                im.seek(n)  # reads the next page's directory, no pixels
                n += 1
        except EOFError:
            pass
        im.seek(0)
        return n
    return int(getattr(im, "n_frames", 1))  # WebP and APNG: read from a header chunk


def _first_frame_note(im: Image.Image, fp: io.BufferedIOBase, fmt: str) -> str | None:
    if fmt == "JPEG" or not getattr(im, "is_animated", False):
        return None  # JPEG: MPO's extra frames are previews/depth maps, not content
    n = _count_frames(im, fp, fmt, _MAX_COUNTED_FRAMES)
    if n <= 1:
        return None
    of = f"{n}" if n < _MAX_COUNTED_FRAMES else f"{_MAX_COUNTED_FRAMES} or more"
    if fmt == "TIFF":
        return f"multi-page TIFF: first page of {of} used"
    return f"animated {_display(fmt)}: first frame of {of} used"


def _scale_16_to_8(a: np.ndarray) -> np.ndarray:
    """uint16 0..65535 → uint8 0..255 by rounding v/257 (65535 → 255, 32768 → 128)."""
    return ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


_STRIP_PIXELS = 4_000_000  # above this, copy out of Pillow in strips


def _asarray(im: Image.Image) -> np.ndarray:
    """A loaded Pillow image as an owned, writable numpy array.

    ``np.asarray(im)`` goes through ``im.tobytes()``, which joins encoded chunks: for a
    48 MP photo that is two transient 144 MB copies on top of Pillow's own 192 MB buffer.
    Copying horizontal strips into a preallocated array keeps the transient to one strip.
    """
    w, h = im.size
    if w * h <= _STRIP_PIXELS:
        return np.array(im)
    first = np.asarray(im.crop((0, 0, w, 1)))
    out = np.empty((h, *first.shape[1:]), first.dtype)
    rows = max(1, _STRIP_PIXELS // 8 // w)
    for y in range(0, h, rows):
        out[y : y + rows] = np.asarray(im.crop((0, y, w, min(h, y + rows))))
    return out


def _to_arrays(im: Image.Image, fmt: str, deep: bool, notes: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Loaded Pillow image → (uint8 H×W or H×W×3, uint8 alpha or None). Pillow work only."""
    mode = im.mode
    if deep and mode != "I":  # "I" finds its own bit depth from the values
        notes.append(f"16-bit {fmt} scaled to 8 bit")
    if mode == "RGB":
        return _asarray(im), None
    if mode == "RGBA":
        a = _asarray(im)
        return a[..., :3], a[..., 3]
    if mode == "L":
        notes.append("grayscale image expanded to RGB")
        return _asarray(im), None
    if mode == "LA":
        a = _asarray(im)
        notes.append("grayscale image expanded to RGB")
        return a[..., 0], a[..., 1]
    if mode == "1":
        notes.append("1-bit black-and-white image expanded to RGB")
        return _asarray(im.convert("L")), None
    if mode in ("P", "PA"):
        transparent = mode == "PA" or im.has_transparency_data
        notes.append("palette image converted to RGB")
        return _to_arrays(im.convert("RGBA" if transparent else "RGB"), fmt, False, notes)
    if mode.startswith("I;16"):
        notes.append("grayscale image expanded to RGB")
        return _scale_16_to_8(_asarray(im).astype(np.uint16)), None
    if mode == "I":
        return _int32_to_8bit(im, fmt, notes), None
    if mode == "F":
        return _float_to_8bit(_asarray(im), fmt, notes), None
    if mode == "CMYK":
        # Pillow's JPEG reader already undoes Adobe's inverted CMYK (APP14 marker).
        notes.append("CMYK converted to RGB (without its colour profile, so colours may shift slightly)")
        return _asarray(im.convert("RGB")), None
    if mode in ("RGBa", "La"):  # premultiplied alpha
        return _to_arrays(im.convert("RGBA"), fmt, False, notes)
    notes.append(f"colour mode {mode} converted to RGB")
    return _asarray(im.convert("RGB")), None


def _int32_to_8bit(im: Image.Image, fmt: str, notes: list[str]) -> np.ndarray:
    a = _asarray(im)
    bits = None
    tags = getattr(im, "tag_v2", None)
    if tags is not None:
        bps = tags.get(258)
        bits = int(bps[0] if isinstance(bps, tuple) else bps) if bps else None
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0 and hi <= 255 and bits != 16:
        notes.append(f"32-bit integer {fmt} holding 8-bit values used as 8 bit; grayscale expanded to RGB")
        return a.astype(np.uint8)
    if lo >= 0 and hi <= 65535:
        notes.append(f"16-bit {fmt} scaled to 8 bit; grayscale expanded to RGB")
        return _scale_16_to_8(a.astype(np.uint16))
    notes.append(f"32-bit integer {fmt} rescaled from its range [{lo}, {hi}] to 8 bit; grayscale expanded to RGB")
    return _rescale(a.astype(np.float64), lo, hi)


def _float_to_8bit(a: np.ndarray, fmt: str, notes: list[str]) -> np.ndarray:
    """Float samples → uint8: [0, 1] scaled by 255 (as 16-bit is scaled), [0, 255] rounded,
    anything else stretched from its own range. One range for all channels (keeps the colour balance)."""
    a = np.nan_to_num(a.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    lo, hi = float(a.min()), float(a.max())
    gray = "; grayscale expanded to RGB" if a.ndim == 2 else ""
    if lo >= 0.0 and hi <= 1.0:
        notes.append(f"floating-point {fmt} in [0, 1] scaled to 8 bit{gray}")
        return np.round(a * 255.0).astype(np.uint8)
    if lo >= 0.0 and hi <= 255.0:
        notes.append(f"floating-point {fmt} in [0, 255] rounded to 8 bit{gray}")
        return np.round(a).astype(np.uint8)
    notes.append(f"floating-point {fmt} rescaled from its range [{lo:g}, {hi:g}] to 8 bit{gray}")
    return _rescale(a, lo, hi)


def _rescale(a: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if hi <= lo:
        return np.zeros(a.shape, np.uint8)
    return np.round((a - lo) * (255.0 / (hi - lo))).astype(np.uint8)


def _composite_on_white(rgb: np.ndarray, alpha: np.ndarray) -> None:
    """In place: rgb = rgb·α + white·(1-α), rounded, in integers, a strip at a time.

    uint16 holds 255·255 + 255·255; strips bound the uint16 temporaries to a few MB.
    """
    rows = max(1, _STRIP_PIXELS // 8 // max(1, rgb.shape[1]))
    for y in range(0, rgb.shape[0], rows):
        a = alpha[y : y + rows, :, None].astype(np.uint16)
        c = rgb[y : y + rows].astype(np.uint16)
        rgb[y : y + rows] = (c * a + 255 * (255 - a) + 127) // 255


def _rgb_icc(im: Image.Image) -> bytes | None:
    icc = im.info.get("icc_profile")
    # Bytes 16..19 of an ICC header name its colour space; only an RGB profile describes
    # our RGB output (a CMYK or grey profile embedded in an RGB file is invalid).
    if isinstance(icc, bytes) and len(icc) >= 128 and icc[16:20] == b"RGB ":
        return icc
    return None


# Largest colour profile copied into the result as it is. Real RGB profiles are 0.5-60 KB
# (sRGB, Display P3, Adobe RGB); Pillow refuses to read a PNG whose profile inflates past
# 1 MB (PngImagePlugin.MAX_TEXT_CHUNK), so a bigger one is converted away, not copied.
_MAX_ICC_BYTES = 256_000


def _settle_icc(icc: bytes | None, base: np.ndarray, notes: list[str]) -> bytes | None:
    """The profile to write into the result: ``icc`` when it is valid and small, else None.

    A valid profile too large to copy: ``base`` (uint8 H×W×3) is converted from it to sRGB
    in place, so the colours stay right without it. An invalid one is dropped. The notes
    say which; ImageCms (Pillow's LittleCMS) is used when Pillow has it.
    """
    if icc is None:
        return None
    try:
        from PIL import ImageCms
    except ImportError:  # Pillow built without LittleCMS: nothing can check or convert it
        if len(icc) <= _MAX_ICC_BYTES:
            return icc
        notes.append(f"embedded colour profile ({_mb(len(icc))}) too large to copy and cannot be converted here: dropped")
        return None
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        name = (ImageCms.getProfileDescription(profile) or "").strip()
    except Exception as e:  # noqa: BLE001 - LittleCMS rejects malformed profiles with OSError/PyCMSError
        notes.append(f"embedded colour profile is invalid ({str(e).strip() or type(e).__name__}): dropped, colours read as sRGB")
        return None
    if len(icc) <= _MAX_ICC_BYTES:
        return icc
    label = f"{_mb(len(icc))}, {name!r}" if name else _mb(len(icc))
    if base.ndim != 3 or base.shape[2] != 3:
        notes.append(f"embedded colour profile ({label}) too large to copy into the result: dropped")
        return None
    try:
        transform = ImageCms.buildTransform(profile, ImageCms.createProfile("sRGB"), "RGB", "RGB")
        rows = max(1, _STRIP_PIXELS // 8 // max(1, base.shape[1]))
        for y in range(0, base.shape[0], rows):
            strip = Image.fromarray(np.ascontiguousarray(base[y : y + rows]), "RGB")
            base[y : y + rows] = np.asarray(ImageCms.applyTransform(strip, transform))
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a profile LittleCMS can read but not use
        notes.append(
            f"embedded colour profile ({label}) too large to copy and not usable for conversion "
            f"({str(e).strip() or type(e).__name__}): dropped, colours read as sRGB"
        )
        return None
    notes.append(f"embedded colour profile ({label}) too large to copy into the result: colours converted to sRGB")
    return None


def _pillow_failure(fmt: str, e: BaseException) -> InputError:
    detail = str(e).strip() or type(e).__name__
    return InputError(f"The {fmt} file is truncated or corrupt ({detail}); re-export it and try again.")


def decode_image(
    source: bytes | str | os.PathLike[str],
    limits: InputLimits = DEFAULT_LIMITS,
    *,
    reduce_to: int | None = None,
) -> DecodedImage:
    """Read an uploaded image safely: RGB uint8 H×W×3, upright, with its alpha kept apart.

    ``source`` is the file's bytes or a path. ``reduce_to``: when the caller will shrink
    the image to this longest side anyway, a large JPEG is decoded at 1/2, 1/4 or 1/8
    scale (libjpeg's DCT scaling via Pillow's ``draft``: less time and memory) such that
    its longest side stays ≥ ``_DRAFT_KEEP`` × ``reduce_to`` (so a 4000 px photo for a
    2048 px target decodes at 2000 px, not at 12 MP); other formats decode at full size
    and the caller shrinks them (:func:`shrink_to_max_side`). The notes say when this
    happened.

    Raises :class:`InputError` for anything wrong with the file (too big, not an allowed
    format, too many pixels, bad aspect ratio, too small, truncated, corrupt), with a
    message saying how to fix it; :class:`~gpen_core.errors.OutOfMemory` (a ``ResourceError``) if the machine runs out of
    memory decoding an image within the limits. No other exception escapes for bad files.
    """
    if reduce_to is not None and reduce_to < 1:
        raise ValueError(f"reduce_to must be a positive longest side in pixels, got {reduce_to}")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # A process-wide switch that makes Pillow pad truncated files with grey instead of
        # failing. Some modelscope CV modules turn it on when imported; refusing loudly is
        # the only way to notice, since we must not flip a global other code relies on.
        raise RuntimeError(
            "PIL.ImageFile.LOAD_TRUNCATED_IMAGES was turned on elsewhere in this process, so truncated "
            "uploads would be accepted silently. Do not import the module that sets it (some modelscope "
            "CV pipelines do), or set it back to False."
        )
    with _open_source(source, limits) as fp:
        head = fp.read(_SNIFF_BYTES)
        if not head:
            raise InputError("The file is empty (0 bytes). Upload it again; the transfer may have failed.")
        fp.seek(0)
        try:
            im = Image.open(fp, formats=limits.formats)
        except Image.DecompressionBombError as e:
            # Pillow's own guard fired first (above ~179 MP). Say it in our words, with the
            # declared size when the header is simple enough to read here (PNG's IHDR).
            size = _png_declared_size(head)
            m = re.search(r"\((\d+) pixels\)", str(e))
            pixels = size[0] * size[1] if size else int(m.group(1)) if m else limits.max_pixels + 1
            raise _too_many_pixels(pixels, limits, size) from None
        except UnidentifiedImageError:
            if _sniff(head) == "TIFF" and "TIFF" in limits.formats:
                # Pillow has no mode for float RGB(A) TIFFs (scientific and HDR exports).
                return _decode_other_tiff(fp, head, limits)
            raise _unidentified(head, limits) from None
        except MemoryError:
            raise OutOfMemory("Not enough memory to read the image header. Try again later.") from None
        except Exception as e:  # noqa: BLE001 - any parser failure on user bytes is the file's fault
            kind = _sniff(head) or "image"
            raise _pillow_failure(kind, e) from None
        with im:
            fmt = _OUR_NAME.get(str(im.format), str(im.format))
            original_size = (int(im.size[0]), int(im.size[1]))
            _check_geometry(original_size, limits)
            return _decode_checked(im, fp, fmt, original_size, reduce_to)


# A JPEG is DCT-scaled at decode when its reduced longest side keeps at least this share of
# the target: the mode's 2048 px becomes 2000 px for a 4000 px photo (2% fewer pixels per
# side, invisible after GPEN's paste-back) and the decode skips 3/4 of the 12 MP (measured
# on the 4000×3000 benchmark photo: the decode's peak and time both drop to about a quarter).
_DRAFT_KEEP = 0.9

_SAMPLE_FORMATS = {1: "unsigned integer", 2: "signed integer", 3: "floating-point", 4: "undefined"}


def _tiff_directory(fp: io.BufferedIOBase) -> "dict[int, object] | None":
    """The first page's TIFF tags (Pillow's own IFD parser; reads no pixel data), or None."""
    from PIL import TiffImagePlugin

    try:
        fp.seek(0)
        ifh = fp.read(8)
        if len(ifh) == 8 and ifh[2] == 43:  # BigTIFF: 16-byte header
            ifh += fp.read(8)
        ifd = TiffImagePlugin.ImageFileDirectory_v2(ifh)
        fp.seek(ifd.next)
        ifd.load(fp)
        return dict(ifd)
    except Exception:  # noqa: BLE001 - a header this broken is reported as corrupt by the caller
        return None


def _first(value: object, default: int) -> int:
    if isinstance(value, tuple):
        value = value[0] if value else default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _decode_other_tiff(fp: io.BufferedIOBase, head: bytes, limits: InputLimits) -> DecodedImage:
    """A TIFF Pillow cannot identify: float RGB(A) is decoded (OpenCV's libtiff); else refused by name."""
    tags = _tiff_directory(fp)
    if tags is None or not tags.get(256) or not tags.get(257):
        raise _unidentified(head, limits)
    w, h = _first(tags[256], 0), _first(tags[257], 0)
    bits, spp = _first(tags.get(258), 1), _first(tags.get(277), 1)
    sample = _SAMPLE_FORMATS.get(_first(tags.get(339), 1), "unknown")
    _check_geometry((w, h), limits)
    what = f"{bits}-bit {sample} samples, {spp} per pixel"
    if sample != "floating-point" or bits not in (16, 32, 64) or spp not in (1, 3, 4):
        raise InputError(
            f"This TIFF's pixel format ({what}) is not supported. Save it as an 8- or 16-bit RGB TIFF or PNG "
            "and try again."
        )
    import cv2  # libtiff via OpenCV: reads float RGB(A), which Pillow does not

    notes: list[str] = []
    try:
        fp.seek(0)
        buf = np.frombuffer(fp.read(), np.uint8)
        arr = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        del buf
        if arr is None or arr.shape[:2] != (h, w):
            raise InputError(
                f"The TIFF file ({what}) is truncated or corrupt; re-export it and try again."
            )
        if arr.ndim == 3:
            arr = arr[..., [2, 1, 0, 3][: arr.shape[2]]]  # OpenCV's BGR(A) → RGB(A)
        alpha = None
        if arr.ndim == 3 and arr.shape[2] == 4:
            a = np.nan_to_num(arr[..., 3].astype(np.float32), nan=1.0)
            alpha = np.round(np.clip(a * 255.0 if a.max() <= 1.0 else a, 0, 255)).astype(np.uint8)
            arr = arr[..., :3]
        base = _float_to_8bit(arr, "TIFF", notes)
        del arr
    except (MemoryError, cv2.error) as e:
        from .oom import is_oom

        if isinstance(e, MemoryError) or is_oom(e):
            raise OutOfMemory(
                f"Not enough memory to decode the {w}×{h} image. Resize it, or try again when the server is less busy."
            ) from None
        raise InputError(f"The TIFF file ({what}) cannot be decoded ({str(e).strip()[:200]}); re-export it and try again.") from None
    orientation = _first(tags.get(274), 1)
    return _finish(base, alpha, "TIFF", (w, h), orientation if orientation in _ORIENT else 1, None, notes)


def _decode_checked(
    im: Image.Image, fp: io.BufferedIOBase, fmt: str, original_size: tuple[int, int], reduce_to: int | None
) -> DecodedImage:
    """Decode an image whose header passed the limits, and normalise it."""
    notes: list[str] = []
    w, h = original_size
    try:
        if reduce_to is not None and fmt == "JPEG" and max(w, h) >= 2 * _DRAFT_KEEP * reduce_to:
            r = _DRAFT_KEEP * reduce_to / max(w, h)
            im.draft(None, (max(1, math.ceil(w * r)), max(1, math.ceil(h * r))))
            if im.size != original_size:
                scale = round(w / im.size[0])
                notes.append(
                    f"shrunk at decode from {w}×{h} to {im.size[0]}×{im.size[1]} (JPEG 1/{scale} scale)"
                )
        frame_note = _first_frame_note(im, fp, fmt)
        if frame_note:
            notes.append(frame_note)
        deep = _is_16bit(im)
        im.load()
        orientation, exif_note = _read_orientation(im)
        if exif_note:
            notes.append(exif_note)
        icc = _rgb_icc(im) if im.mode in ("RGB", "RGBA", "P", "PA", "RGBa") else None
        base, alpha = _to_arrays(im, fmt, deep, notes)
        # The arrays no longer share Pillow's buffer (4 bytes per RGB pixel): free it now,
        # before the copy below, so a 48 MP photo peaks near 2× its RGB size, not 3×.
        im.close()
        icc = _settle_icc(icc, base, notes)
    except MemoryError:
        raise OutOfMemory(
            f"Not enough memory to decode the {w}×{h} image. Resize it, or try again when the server is less busy."
        ) from None
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError, struct.error...
        raise _pillow_failure(fmt, e) from None
    return _finish(base, alpha, fmt, original_size, orientation, icc, notes)


def _finish(
    base: np.ndarray,
    alpha: np.ndarray | None,
    fmt: str,
    original_size: tuple[int, int],
    orientation: int,
    icc: bytes | None,
    notes: list[str],
) -> DecodedImage:
    """uint8 H×W or H×W×3 (+ alpha) as stored → the upright, composited DecodedImage."""
    # From here on: numpy only, no user-controlled parsing.
    if orientation in _ORIENT:
        verb, turn = _ORIENT[orientation]
        base = turn(base)
        alpha = None if alpha is None else turn(alpha)
        notes.append(f"{verb} per EXIF orientation {orientation}")
    # Owned, writable, C-contiguous; copies only when a view (RGBA split, rotation) needs it.
    rgb = np.repeat(base[..., None], 3, axis=2) if base.ndim == 2 else np.ascontiguousarray(base)
    del base
    if alpha is not None:
        if int(alpha.min()) == 255:
            alpha = None
            notes.append("fully opaque alpha channel dropped")
        else:
            alpha = np.ascontiguousarray(alpha)
            _composite_on_white(rgb, alpha)
            notes.append("transparent areas composited on white for restoration; alpha kept in the PNG output")
    return DecodedImage(
        rgb=rgb,
        alpha=alpha,
        format=fmt,
        original_size=original_size,
        notes=tuple(notes),
        icc_profile=icc,
        orientation=orientation if orientation in _ORIENT else 1,
    )


# ---------------------------------------------------------------------------------------
# Encoding and resizing


def _check_rgb(rgb: np.ndarray) -> None:
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise ValueError(f"expected RGB uint8 H×W×3, got {desc}")


def encode_image(
    rgb: np.ndarray,
    fmt: Literal["png", "jpeg"],
    *,
    alpha: np.ndarray | None = None,
    quality: int = 95,
    icc_profile: bytes | None = None,
) -> bytes:
    """RGB uint8 H×W×3 (+ optional uint8 H×W alpha) → the bytes of a PNG or JPEG file.

    PNG keeps ``alpha`` (RGBA output). JPEG has no alpha channel: ``alpha`` is ignored
    and the RGB is written as given (after :func:`decode_image` it is already composited
    on white), so callers that pass alpha with ``"jpeg"`` should tell the user the
    transparency was not kept. ``quality`` applies to JPEG only (1..100; Pillow advises
    ≤ 95; chroma is not subsampled, so skin and lips keep their colour edges). ``icc_profile`` (from
    ``DecodedImage.icc_profile``) is embedded as-is. No EXIF is written: orientation is
    already applied, and camera/GPS metadata is not carried into results.
    """
    _check_rgb(rgb)
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"fmt must be 'png' or 'jpeg', got {fmt!r}")
    if alpha is not None and (
        not isinstance(alpha, np.ndarray) or alpha.dtype != np.uint8 or alpha.shape != rgb.shape[:2]
    ):
        desc = f"{alpha.dtype} {alpha.shape}" if isinstance(alpha, np.ndarray) else type(alpha).__name__
        raise ValueError(f"alpha must be uint8 H×W matching rgb {rgb.shape[:2]}, got {desc}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    extra: dict[str, object] = {"icc_profile": icc_profile} if icc_profile else {}
    try:
        return _encode(rgb, fmt, alpha, quality, extra)
    except MemoryError:
        h, w = rgb.shape[:2]
        raise OutOfMemory(
            f"Not enough memory to encode the {w}×{h} result as {fmt.upper()}. Use a lighter mode (it shrinks "
            "big photos) or a smaller photo, or try again when the machine is less busy."
        ) from None


def _encode(rgb: np.ndarray, fmt: str, alpha: np.ndarray | None, quality: int, extra: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    if fmt == "png":
        if alpha is not None:
            im = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
        else:
            im = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
        # zlib level 1: ~2.5x faster than Pillow's default 6 on a 12 MP photo for ~30 %
        # larger files; still lossless, and encoding is a visible share of a request.
        # Strategy Z_RLE (compress_type=3): after PNG's filters a photo is mostly small
        # residuals, which Huffman coding alone packs about as well (measured on 12 MP:
        # 0.6x the time on a grainy photo, -22 % to +3 % in size on scans).
        im.save(buf, "PNG", compress_level=1, compress_type=3, **extra)
    else:
        im = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
        im.save(buf, "JPEG", quality=quality, subsampling=0, **extra)
    return buf.getvalue()


def shrink_to_max_side(img: np.ndarray, max_side: int) -> tuple[np.ndarray, bool]:
    """Shrink so the longest side is ``max_side`` (area averaging); never enlarges.

    ``img`` is uint8 H×W×3 (RGB) or H×W (an alpha channel: shrink it with the same
    ``max_side`` to keep it aligned). Returns (image, True) when it was shrunk, else the
    same array and False.
    """
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side}")
    if img.ndim not in (2, 3):
        raise ValueError(f"expected H×W or H×W×C, got shape {img.shape}")
    h, w = img.shape[:2]
    if max(h, w) <= max_side:
        return img, False
    import cv2  # heavy; only needed when shrinking

    s = max_side / max(h, w)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    # INTER_AREA averages the source pixels under each output pixel: no aliasing, no ringing.
    try:
        out = cv2.resize(np.ascontiguousarray(img), size, interpolation=cv2.INTER_AREA)
    except (MemoryError, cv2.error) as e:
        from .oom import is_oom

        if not is_oom(e):
            raise
        raise OutOfMemory(
            f"Not enough memory to shrink the {w}×{h} photo to {size[0]}×{size[1]}. Use a smaller photo, "
            "or try again when the machine is less busy."
        ) from None
    return np.ascontiguousarray(out), True
