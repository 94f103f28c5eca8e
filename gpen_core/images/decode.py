"""Hardened image decoding, the only place that reads user files (callers import encode's and limits' names here too).

Checks run cheapest first, so a hostile file costs milliseconds: file size, format from the header (allow-list),
declared geometry, then the decode. Every refusal is an :class:`~gpen_core.errors.InputError` naming the limit and
the fix; every normalisation a sentence in ``DecodedImage.notes``; truncated files are refused.
"""

from __future__ import annotations

import io
import math
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from gpen_core.errors import InputError, OutOfMemory
from gpen_core.images.encode import encode_image, shrink_to_max_side  # noqa: F401  (encode_image: re-exported)
from gpen_core.images.limits import (DEFAULT_LIMITS, OUR_NAME, SNIFF_BYTES, InputLimits, check_geometry, open_source,
                                     pillow_failure, png_declared_size, sniff, too_many_pixels, unidentified)
from gpen_core.images.metadata import Metadata, upright
from gpen_core.images.metadata import read as read_metadata
from gpen_core.images.pixels import (ORIENT, composite_on_white, first_frame_note, float_to_8bit, is_16bit, rgb_icc,
                                     settle_icc, shrunk_rgb, tag_value, to_arrays)
from gpen_core.modes import preshrink_size


@dataclass(frozen=True, eq=False)
class DecodedImage:
    """A decoded, upright, 8-bit image. ``rgb``: RGB uint8 H×W×3, C-contiguous, transparency composited on white;
    ``alpha``: uint8 H×W (255 = opaque) when the file had real transparency; ``original_size``: (width, height) as
    stored, before EXIF rotation and any shrink; ``icc_profile``: the RGB profile the pixels are in, only a valid
    one of at most 256 KB (a larger one is converted to sRGB), so every result opens in Pillow and OpenCV;
    ``meta``: the EXIF orientation applied to ``rgb``, the file's EXIF (orientation reset to 1) and DPI (x, y of the
    upright picture), as :func:`gpen_core.images.metadata.for_output` carries them to the result."""

    rgb: np.ndarray
    alpha: np.ndarray | None
    format: str
    original_size: tuple[int, int]
    notes: tuple[str, ...] = ()
    icc_profile: bytes | None = field(default=None, repr=False)
    meta: Metadata = field(default=Metadata(), repr=False)
    # The notes among ``notes`` that say a ``reduce_to`` shrink: a caller names whose limit it was, or drops them.
    shrinks: tuple[str, ...] = ()

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of ``rgb``."""
        return int(self.rgb.shape[1]), int(self.rgb.shape[0])

    @property
    def upright_size(self) -> tuple[int, int]:
        """(width, height) of the photo as viewers show it: ``original_size`` after EXIF rotation."""
        return upright(self.original_size, self.meta.orientation)


def decode_image(source: bytes | str | os.PathLike[str], limits: InputLimits = DEFAULT_LIMITS, *,
                 reduce_to: int | None = None) -> DecodedImage:
    """Read an uploaded image (its bytes or a path) safely: RGB uint8 H×W×3, upright, its alpha kept apart.

    ``reduce_to``: the longest side the caller will shrink to anyway; a large JPEG then decodes DCT-scaled, RGB
    and greyscale without alpha shrink as they leave Pillow (the notes say so), the rest decode at full size.
    Raises :class:`InputError` for anything wrong with the file and :class:`~gpen_core.errors.OutOfMemory` when
    memory runs out decoding one within the limits; nothing else for bad files.
    """
    if reduce_to is not None and reduce_to < 1:
        raise ValueError(f"reduce_to must be a positive longest side in pixels, got {reduce_to}")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # Pillow would pad truncated files with grey; we must not flip a global others rely on, so we refuse.
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES was turned on elsewhere in this process, so truncated "
                           "uploads would be accepted silently. Do not import the module that sets it (some modelscope "
                           "CV pipelines do), or set it back to False.")
    with _opened(source, limits) as (fp, head, im):
        if im is None:  # Pillow has no mode for float RGB(A) TIFFs (scientific and HDR exports)
            return _decode_other_tiff(fp, head, limits)
        with im:
            fmt, original_size = _format_and_size(im, limits)
            return _decode_checked(im, fp, fmt, original_size, reduce_to)


def probe_image(source: bytes | str | os.PathLike[str], limits: InputLimits = DEFAULT_LIMITS) -> tuple[str, tuple[int, int]]:
    """(format, (width, height)) of a file that passes every check :func:`decode_image` makes before its pixels
    (headers only, for a file a request may never use); :class:`InputError` as it raises. Its pixels may still fail."""
    with _opened(source, limits) as (fp, head, im):
        if im is None:
            _, w, h, _ = _other_tiff_header(fp, head, limits)
            return "TIFF", (w, h)
        with im:
            return _format_and_size(im, limits)


def _format_and_size(im: Image.Image, limits: InputLimits) -> tuple[str, tuple[int, int]]:
    """Our name for ``im``'s format, and its (width, height) as stored once they passed ``limits``."""
    size = (int(im.size[0]), int(im.size[1]))
    check_geometry(size, limits)
    return OUR_NAME.get(str(im.format), str(im.format)), size


def _quiet_bombs(on: bool) -> AbstractContextManager[object]:
    return warnings.catch_warnings(action="ignore", category=Image.DecompressionBombWarning) if on else nullcontext()


@contextmanager
def _opened(source: bytes | str | os.PathLike[str], limits: InputLimits,
            ) -> Iterator[tuple[io.BufferedIOBase, bytes, "Image.Image | None"]]:
    """(the open file, its first bytes, Pillow's image, header only; None for a TIFF Pillow cannot identify);
    every failure to get this far is an :class:`InputError` in our words."""
    # Between its two guards Pillow warns as it opens a file, and past its MAX_IMAGE_PIXELS (only a local run's raised
    # limit admits that) as a TIFF loads: our limit speaks in our words. The filter is process-wide (not thread-safe),
    # so it covers the whole decode only where that limit was raised.
    raised = limits.max_pixels > Image.MAX_IMAGE_PIXELS
    with open_source(source, limits) as fp, _quiet_bombs(raised):
        head = fp.read(SNIFF_BYTES)
        if not head:
            raise InputError("The file is empty (0 bytes). Upload it again; the transfer may have failed.")
        fp.seek(0)
        im: Image.Image | None = None
        try:
            with _quiet_bombs(not raised):
                im = Image.open(fp, formats=limits.formats)
        except Image.DecompressionBombError as e:
            # Pillow's own guard (above ~179 MP): our words, with a PNG's declared size.
            size = png_declared_size(head)
            m = re.search(r"\((\d+) pixels\)", str(e))
            pixels = size[0] * size[1] if size else int(m.group(1)) if m else limits.max_pixels + 1
            raise too_many_pixels(pixels, limits, size) from None
        except UnidentifiedImageError:
            if sniff(head) != "TIFF" or "TIFF" not in limits.formats:
                raise unidentified(head, limits) from None
        except MemoryError:
            raise OutOfMemory("Not enough memory to read the image header. Try again later.") from None
        except Exception as e:  # noqa: BLE001 - any parser failure on user bytes is the file's fault
            kind = sniff(head) or "image"
            reopened = _open_png_with_big_icc(fp, limits) if kind == "PNG" and "MAX_TEXT_CHUNK" in str(e) else None
            if reopened is None:
                raise pillow_failure(kind, e) from None
            im = reopened
        yield fp, head, im


# Largest colour profile read from a PNG's iCCP chunk: Pillow stops at 1 MB (a global we leave alone), real
# profiles are under 100 KB, LUT-heavy printer profiles a few MB.
MAX_ICC_READ_BYTES = 16_000_000


def _open_png_with_big_icc(fp: io.BufferedIOBase, limits: InputLimits) -> "Image.Image | None":
    """A PNG whose iCCP chunk inflates past Pillow's 1 MB limit, opened from a copy without it, the profile put
    back into ``info`` (so the normal path converts it to sRGB); None when it is not that."""
    import struct
    import zlib

    fp.seek(0)
    data = fp.read(limits.max_file_bytes + 1)
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 12 + length
        if kind == b"iCCP":
            body = data[pos + 8 : pos + 8 + length]
            name_end = body.find(b"\0")
            if name_end < 0 or end > len(data):
                return None
            inflate = zlib.decompressobj()
            try:
                icc = inflate.decompress(body[name_end + 2 :], MAX_ICC_READ_BYTES)
            except zlib.error:
                return None
            if inflate.unconsumed_tail:
                raise InputError(
                    f"The PNG's colour profile is over {MAX_ICC_READ_BYTES // 1_000_000} MB once unpacked, far "
                    "beyond any real profile. Re-export it with a standard profile (sRGB) and try again."
                )
            im = Image.open(io.BytesIO(data[:pos] + data[end:]), formats=["PNG"])
            im.info["icc_profile"] = icc
            return im
        if kind == b"IDAT":
            return None
        pos = end
    return None


# A JPEG is DCT-scaled at decode when its reduced longest side keeps this share of the target (2048 px becomes
# 2000 px for a 4000 px photo, invisible after paste-back; the decode's peak and time drop to about a quarter).
_DRAFT_KEEP = 0.9


def _jpeg_scale(fmt: str, w: int, h: int, reduce_to: int | None) -> int:
    """The DCT scale (8, 4, 2, else 1) a ``fmt`` photo decodes at: a JPEG's largest that keeps its longest side at
    least _DRAFT_KEEP × ``reduce_to``, as Pillow's draft picks it for that size."""
    if reduce_to is None or fmt != "JPEG" or max(w, h) < 2 * _DRAFT_KEEP * reduce_to:
        return 1
    r = _DRAFT_KEEP * reduce_to / max(w, h)
    fit = min(w // max(1, math.ceil(w * r)), h // max(1, math.ceil(h * r)))
    return next(s for s in (8, 4, 2, 1) if fit >= s)


def decoded_size(fmt: str, size: tuple[int, int], reduce_to: int | None) -> tuple[int, int]:
    """The (width, height) a ``fmt`` photo of ``size`` is restored at when decoded with ``reduce_to`` (a mode's max
    side): a big JPEG's DCT scale first (1/2 can leave 4000 px at 2000, under 2048), then
    :func:`~gpen_core.modes.preshrink_size`. The decoder's own rule, for sizes said before it runs."""
    s = _jpeg_scale(fmt, *size, reduce_to)
    return preshrink_size(-(-size[0] // s), -(-size[1] // s), reduce_to)


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


def _other_tiff_header(fp: io.BufferedIOBase, head: bytes, limits: InputLimits) -> tuple[dict[int, object], int, int, str]:
    """(tags, width, height, pixel format in words) of a TIFF Pillow cannot identify; refused unless float RGB(A)."""
    tags = _tiff_directory(fp)
    if tags is None or not tags.get(256) or not tags.get(257):
        raise unidentified(head, limits)
    w, h = tag_value(tags[256], 0), tag_value(tags[257], 0)
    bits, spp = tag_value(tags.get(258), 1), tag_value(tags.get(277), 1)
    sample = _SAMPLE_FORMATS.get(tag_value(tags.get(339), 1), "unknown")
    check_geometry((w, h), limits)
    what = f"{bits}-bit {sample} samples, {spp} per pixel"
    if sample != "floating-point" or bits not in (16, 32, 64) or spp not in (1, 3, 4):
        raise InputError(
            f"This TIFF's pixel format ({what}) is not supported. Save it as an 8- or 16-bit RGB TIFF or PNG "
            "and try again."
        )
    return tags, w, h, what


def _no_memory_to_decode(w: int, h: int) -> OutOfMemory:
    return OutOfMemory(f"Not enough memory to decode the {w}×{h} image. Resize it, or try again when the server is "
                       "less busy.")


def _decode_other_tiff(fp: io.BufferedIOBase, head: bytes, limits: InputLimits) -> DecodedImage:
    """A TIFF Pillow cannot identify: float RGB(A) is decoded (OpenCV's libtiff); else refused by name."""
    tags, w, h, what = _other_tiff_header(fp, head, limits)
    import cv2  # libtiff via OpenCV: reads float RGB(A), which Pillow does not

    notes: list[str] = []
    try:
        fp.seek(0)
        buf = np.frombuffer(fp.read(), np.uint8)
        arr = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        del buf
        if arr is None or arr.shape[:2] != (h, w):
            raise InputError(f"The TIFF file ({what}) is truncated or corrupt; re-export it and try again.")
        if arr.ndim == 3:
            arr = arr[..., [2, 1, 0, 3][: arr.shape[2]]]  # OpenCV's BGR(A) → RGB(A)
        alpha = None
        if arr.ndim == 3 and arr.shape[2] == 4:
            a = np.nan_to_num(arr[..., 3].astype(np.float32), nan=1.0)
            alpha = np.round(np.clip(a * 255.0 if a.max() <= 1.0 else a, 0, 255)).astype(np.uint8)
            arr = arr[..., :3]
        base = float_to_8bit(arr, "TIFF", notes)
        del arr
    except (MemoryError, cv2.error) as e:
        from gpen_core.platform.oom import is_oom

        if isinstance(e, MemoryError) or is_oom(e):
            raise _no_memory_to_decode(w, h) from None
        raise InputError(f"The TIFF file ({what}) cannot be decoded ({str(e).strip()[:200]}); re-export it and try again.") from None
    orientation = tag_value(tags.get(274), 1)
    meta = Metadata(orientation=orientation if orientation in ORIENT else 1)  # no EXIF or DPI read from a TIFF's tags
    return _finish(base, alpha, notes, "TIFF", (w, h), None, meta)


def _decode_checked(
    im: Image.Image, fp: io.BufferedIOBase, fmt: str, original_size: tuple[int, int], reduce_to: int | None
) -> DecodedImage:
    notes: list[str] = []
    shrinks: list[str] = []

    def shrunk(before: tuple[int, int], after: tuple[int, int], how: str) -> None:
        shrinks.append(f"shrunk at decode from {before[0]}×{before[1]} to {after[0]}×{after[1]} ({how})")
        notes.append(shrinks[-1])

    w, h = original_size
    try:
        if (scale := _jpeg_scale(fmt, w, h, reduce_to)) > 1:
            im.draft(None, (w // scale, h // scale))  # Pillow's largest scale ≤ min(w // ask_w, h // ask_h): ours
            if im.size != original_size:
                shrunk(original_size, im.size, f"JPEG 1/{scale} scale")
        frame_note = first_frame_note(im, fp, fmt)
        if frame_note:
            notes.append(frame_note)
        deep = is_16bit(im)
        im.load()
        meta = read_metadata(im)
        if meta.note:
            notes.append(meta.note)
        icc = rgb_icc(im) if im.mode in ("RGB", "RGBA", "P", "PA", "RGBa") else None
        if reduce_to is not None and fmt != "JPEG" and im.mode == "RGB" and max(im.size) > reduce_to:
            # Shrunk as it leaves Pillow, so the full-size copy never exists (measured: docs/files-and-limits.md,
            # "Greyscale and 16-bit photos"); JPEG has its DCT scaling, images with alpha the full-size path.
            if deep:
                notes.append(f"16-bit {fmt} scaled to 8 bit")
            size = preshrink_size(w, h, reduce_to)
            base, alpha = shrunk_rgb(im, size), None
            shrunk(original_size, size, "while reading it out of the decoder")
        else:
            base, alpha = to_arrays(im, fmt, deep, notes)
        # Pillow's buffer (4 bytes per pixel) freed before the copy below: a 48 MP photo peaks near 2×, not 3×.
        im.close()
        if reduce_to is not None and base.ndim == 2 and alpha is None and max(base.shape) > reduce_to:
            # Greyscale triples when expanded to RGB: shrunk first, as the caller would right after.
            big = base.shape
            base, _ = shrink_to_max_side(base, reduce_to)
            shrunk((big[1], big[0]), (base.shape[1], base.shape[0]), "greyscale, before expanding it to RGB")
        icc = settle_icc(icc, base, notes)
    except MemoryError:
        raise _no_memory_to_decode(w, h) from None
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError, struct.error...
        raise pillow_failure(fmt, e) from None
    return replace(_finish(base, alpha, notes, fmt, original_size, icc, meta), shrinks=tuple(shrinks))


def _finish(base: np.ndarray, alpha: np.ndarray | None, notes: list[str], fmt: str, original_size: tuple[int, int],
            icc: bytes | None, meta: Metadata) -> DecodedImage:
    """uint8 H×W or H×W×3 (+ alpha) as stored → the upright, composited DecodedImage."""
    orientation = meta.orientation
    # From here on: numpy only, no user-controlled parsing.
    if orientation in ORIENT:
        verb, turn = ORIENT[orientation]
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
            composite_on_white(rgb, alpha)
            notes.append("transparent areas composited on white for restoration; alpha kept in a PNG output")
    return DecodedImage(rgb=rgb, alpha=alpha, format=fmt, original_size=original_size, notes=tuple(notes),
                        icc_profile=icc, meta=meta)
