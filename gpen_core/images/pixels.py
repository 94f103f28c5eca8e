"""From a loaded Pillow image to uint8 arrays (orientation, frames, bit depth, alpha, colour profile), each
normalisation a sentence in ``notes``. Numpy and Pillow only: the header was checked before."""

from __future__ import annotations

import contextlib
import io
import math
from typing import Callable

import numpy as np
from PIL import Image

from gpen_core.images.limits import format_display_name, megabytes


# EXIF orientation → the transform that makes an H×W[×C] array upright (ImageOps.exif_transpose's table).
ORIENT: dict[int, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    2: ("mirrored", lambda a: a[:, ::-1]),
    3: ("rotated", lambda a: a[::-1, ::-1]),
    4: ("flipped", lambda a: a[::-1]),
    5: ("rotated and mirrored", lambda a: a.swapaxes(0, 1)),
    6: ("rotated", lambda a: np.rot90(a, -1)),
    7: ("rotated and mirrored", lambda a: a[::-1, ::-1].swapaxes(0, 1)),
    8: ("rotated", lambda a: np.rot90(a, 1)),
}


def is_16bit(im: Image.Image) -> bool:
    """True when the pending decode reads 16-bit samples (Pillow names rawmodes like 'RGB;16B')."""
    if im.mode.startswith("I;16"):
        return True
    for tile in im.tile:  # Pillow's _Tile(codec_name, extents, offset, args), args[0] the rawmode
        raw = tile.args[0] if isinstance(tile.args, tuple) and tile.args else tile.args
        if isinstance(raw, str) and ";16" in raw:
            return True
    return False


# Frames are counted only for the note, so counting is capped: Pillow's n_frames takes seconds on a GIF of
# 1-pixel frames and minutes on 100 000 tiny TIFF pages.
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
        with contextlib.suppress(EOFError):  # past the last page
            while n < cap:
                im.seek(n)  # reads the next page's directory, no pixels
                n += 1
        im.seek(0)
        return n
    return int(getattr(im, "n_frames", 1))  # WebP and APNG: read from a header chunk


def first_frame_note(im: Image.Image, fp: io.BufferedIOBase, fmt: str) -> str | None:
    if fmt == "JPEG" or not getattr(im, "is_animated", False):
        return None  # JPEG: MPO's extra frames are previews/depth maps, not content
    n = _count_frames(im, fp, fmt, _MAX_COUNTED_FRAMES)
    if n <= 1:
        return None
    of = f"{n}" if n < _MAX_COUNTED_FRAMES else f"{_MAX_COUNTED_FRAMES} or more"
    if fmt == "TIFF":
        return f"multi-page TIFF: first page of {of} used"
    return f"animated {format_display_name(fmt)}: first frame of {of} used"


def _scale_16_to_8(a: np.ndarray) -> np.ndarray:
    """uint16 0..65535 → uint8 0..255 by rounding v/257 (65535 → 255, 32768 → 128)."""
    return ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


_STRIP_PIXELS = 4_000_000  # above this, copy out of Pillow in strips


def strip_rows(width: int) -> int:
    """Rows per strip of a ``width``-pixel image: about :data:`_STRIP_PIXELS` / 8 pixels, at least one row."""
    return max(1, _STRIP_PIXELS // 8 // max(1, width))


def _asarray(im: Image.Image, convert: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """A loaded Pillow image as an owned, writable array (each strip through ``convert``), copied in strips:
    ``np.asarray(im)`` joins ``im.tobytes()`` chunks, two transient 144 MB copies for a 48 MP photo."""
    w, h = im.size
    if w * h <= _STRIP_PIXELS and convert is None:
        return np.array(im)
    strip = convert or (lambda a: a)
    first = strip(np.asarray(im.crop((0, 0, w, 1))))
    out = np.empty((h, *first.shape[1:]), first.dtype)
    rows = strip_rows(w)
    for y in range(0, h, rows):
        out[y : y + rows] = strip(np.asarray(im.crop((0, y, w, min(h, y + rows)))))
    return out


def _area_tab(src: int, dst: int) -> list[tuple[int, int, float]]:
    """OpenCV's INTER_AREA weights for ``src`` samples shrunk to ``dst`` (its computeResizeAreaTab),
    as (output index, input index, weight) in OpenCV's own order: by output, then input."""
    scale = 1.0 / (dst / src)
    tab: list[tuple[int, int, float]] = []
    for d in range(dst):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s2 = min(math.floor(f2), src - 1)
        s1 = min(math.ceil(f1), s2)
        if s1 - f1 > 1e-3:
            tab.append((d, s1 - 1, (s1 - f1) / cell))
        tab += [(d, s, 1.0 / cell) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            tab.append((d, s2, min(f2 - s2, 1.0, cell) / cell))
    return tab


def shrunk_rgb(im: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """A loaded RGB Pillow image → uint8 ``size[1]``×``size[0]``×3 as ``cv2.INTER_AREA`` shrinks it, without the
    full-size copy: strips summed down with OpenCV's weights, across by OpenCV in float32, rounded once (a value
    may differ by 1 at a rounding tie: at most 1 in 97 000, none for exact 2×, 3×, 4× shrinks)."""
    import cv2  # heavy; only needed when shrinking

    w, h = im.size
    out_w, out_h = size
    weights: list[list[tuple[int, float]]] = [[] for _ in range(out_h)]
    for d, s, weight in _area_tab(h, out_h):
        weights[d].append((s, weight))
    # OpenCV's 2×2 fast path rounds halves up ((sum + 2) >> 2; with half-to-even here 1 value in 8
    # differed on noise); every other shrink rounds halves to even.
    halves_up = w == 2 * out_w and h == 2 * out_h
    out = np.empty((out_h, out_w, 3), np.uint8)
    rows = strip_rows(w)  # input rows per strip, as when copying out whole
    j = 0
    while j < out_h:
        lo, k = weights[j][0][0], j + 1
        while k < out_h and weights[k][-1][0] + 1 - lo <= rows:
            k += 1
        hi = weights[k - 1][-1][0] + 1
        band = np.asarray(im.crop((0, lo, w, hi))).reshape(hi - lo, w * 3)
        # Each output row mixes a handful of input rows: add them slot by slot (the first row
        # of every output row, then the second...), in OpenCV's order.
        down = np.zeros((k - j, w * 3), np.float32)
        for slot in range(max(len(weights[r]) for r in range(j, k))):
            picks = [(r - j, weights[r][slot]) for r in range(j, k) if slot < len(weights[r])]
            at = [p for p, _ in picks]
            coef = np.array([wt for _, (_, wt) in picks], np.float32)[:, None]
            down[at] += band[[s - lo for _, (s, _) in picks]] * coef
        del band
        down = down.reshape(k - j, w, 3)
        across = cv2.resize(down, (out_w, k - j), interpolation=cv2.INTER_AREA)
        out[j:k] = np.clip(np.floor(across + 0.5) if halves_up else np.rint(across), 0, 255)
        j = k
    return out


def to_arrays(im: Image.Image, fmt: str, deep: bool, notes: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Loaded Pillow image → (uint8 H×W or H×W×3, uint8 alpha or None). Pillow work only."""
    mode = im.mode
    if deep and mode != "I":  # "I" finds its own bit depth from the values
        notes.append(f"16-bit {fmt} scaled to 8 bit")
    if mode in ("L", "LA"):
        notes.append("grayscale image expanded to RGB")
    if mode in ("RGB", "L"):
        return _asarray(im), None
    if mode in ("RGBA", "LA"):
        a = _asarray(im)
        return (a[..., :3] if mode == "RGBA" else a[..., 0]), a[..., -1]  # colour, alpha
    if mode == "1":
        notes.append("1-bit black-and-white image expanded to RGB")
        return _asarray(im.convert("L")), None
    if mode in ("P", "PA"):
        transparent = mode == "PA" or im.has_transparency_data
        notes.append("palette image converted to RGB")
        return to_arrays(im.convert("RGBA" if transparent else "RGB"), fmt, False, notes)
    if mode.startswith("I;16"):
        notes.append("grayscale image expanded to RGB")
        # In strips: the whole frame at once held ~10 bytes per pixel beside Pillow's buffer (563 MB at 7000×7000).
        return _asarray(im, lambda a: _scale_16_to_8(a.astype(np.uint16))), None
    if mode == "I":
        return _int32_to_8bit(im, fmt, notes), None
    if mode == "F":
        return float_to_8bit(_asarray(im), fmt, notes), None
    if mode == "CMYK":
        # Pillow's JPEG reader already undoes Adobe's inverted CMYK (APP14 marker).
        notes.append("CMYK converted to RGB (without its colour profile, so colours may shift slightly)")
        return _asarray(im.convert("RGB")), None
    if mode in ("RGBa", "La"):  # premultiplied alpha
        return to_arrays(im.convert("RGBA"), fmt, False, notes)
    notes.append(f"colour mode {mode} converted to RGB")
    return _asarray(im.convert("RGB")), None


def tag_value(value: object, default: int) -> int:
    """A TIFF tag's (first) value as an int; ``default`` when it is absent or not a number."""
    if isinstance(value, tuple):
        value = value[0] if value else default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _int32_to_8bit(im: Image.Image, fmt: str, notes: list[str]) -> np.ndarray:
    a = _asarray(im)
    bits = tag_value((getattr(im, "tag_v2", None) or {}).get(258), 0)  # BitsPerSample; 0: not said
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0 and hi <= 255 and bits != 16:
        notes.append(f"32-bit integer {fmt} holding 8-bit values used as 8 bit; grayscale expanded to RGB")
        return a.astype(np.uint8)
    if lo >= 0 and hi <= 65535:
        notes.append(f"16-bit {fmt} scaled to 8 bit; grayscale expanded to RGB")
        return _scale_16_to_8(a.astype(np.uint16))
    notes.append(f"32-bit integer {fmt} rescaled from its range [{lo}, {hi}] to 8 bit; grayscale expanded to RGB")
    return _rescale(a.astype(np.float64), lo, hi)


def float_to_8bit(a: np.ndarray, fmt: str, notes: list[str]) -> np.ndarray:
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


def composite_on_white(rgb: np.ndarray, alpha: np.ndarray) -> None:
    """In place: rgb = rgb·α + white·(1-α), rounded, in uint16 (it holds 255·255 + 255·255), a strip at a
    time so the temporaries stay a few MB."""
    rows = strip_rows(rgb.shape[1])
    for y in range(0, rgb.shape[0], rows):
        a = alpha[y : y + rows, :, None].astype(np.uint16)
        c = rgb[y : y + rows].astype(np.uint16)
        rgb[y : y + rows] = (c * a + 255 * (255 - a) + 127) // 255


def rgb_icc(im: Image.Image) -> bytes | None:
    icc = im.info.get("icc_profile")
    # Bytes 16..19 of an ICC header name its colour space: only an RGB one describes our RGB output.
    if isinstance(icc, bytes) and len(icc) >= 128 and icc[16:20] == b"RGB ":
        return icc
    return None


# Largest colour profile copied into the result (real ones are 0.5-60 KB; Pillow refuses a PNG's over 1 MB).
_MAX_ICC_BYTES = 256_000


def settle_icc(icc: bytes | None, base: np.ndarray, notes: list[str]) -> bytes | None:
    """``icc`` when it is valid and small enough to copy into the result, else None: a larger valid one converts
    ``base`` (uint8 H×W×3) to sRGB in place, an invalid one is dropped; the notes say which."""
    if icc is None:
        return None
    try:
        from PIL import ImageCms
    except ImportError:  # Pillow built without LittleCMS: nothing can check or convert it
        if len(icc) <= _MAX_ICC_BYTES:
            return icc
        notes.append(f"embedded colour profile ({megabytes(len(icc))}) too large to copy and cannot be converted here: dropped")
        return None
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        name = (ImageCms.getProfileDescription(profile) or "").strip()
    except Exception as e:  # noqa: BLE001 - LittleCMS rejects malformed profiles with OSError/PyCMSError
        notes.append(f"embedded colour profile is invalid ({str(e).strip() or type(e).__name__}): dropped, colours read as sRGB")
        return None
    if len(icc) <= _MAX_ICC_BYTES:
        return icc
    label = f"{megabytes(len(icc))}, {name!r}" if name else megabytes(len(icc))
    if base.ndim != 3 or base.shape[2] != 3:
        notes.append(f"embedded colour profile ({label}) too large to copy into the result: dropped")
        return None
    try:
        transform = ImageCms.buildTransform(profile, ImageCms.createProfile("sRGB"), "RGB", "RGB")
        rows = strip_rows(base.shape[1])
        for y in range(0, base.shape[0], rows):
            strip = Image.fromarray(np.ascontiguousarray(base[y : y + rows]), "RGB")
            base[y : y + rows] = np.asarray(ImageCms.applyTransform(strip, transform))
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a profile LittleCMS can read but not use
        notes.append(f"embedded colour profile ({label}) too large to copy and not usable for conversion "
                     f"({str(e).strip() or type(e).__name__}): dropped, colours read as sRGB")
        return None
    notes.append(f"embedded colour profile ({label}) too large to copy into the result: colours converted to sRGB")
    return None
