"""What an upload may be (:class:`InputLimits`) and the checks before any pixel is decoded; every refusal an
:class:`~gpen_core.errors.InputError` naming the limit and the fix."""

from __future__ import annotations

import codecs
import errno
import io
import math
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from gpen_core.errors import InputError, megabytes
from gpen_core.modes import PILLOW_MAX_PIXELS

# What a folder of photos is made of: the files whose names end so are restored as photos.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif")
# Why a folder's other files are skipped (the videos among them are told by :func:`looks_like_video`).
NEITHER = f"neither a photo by its name ({', '.join(IMAGE_SUFFIXES)}) nor a video by its first bytes"
# Why a folder's subfolders are skipped, by the plain run and by --ray alike.
SUBFOLDER = "a folder: subfolders are not searched (give it as an input of its own)"
VIDEO_HEAD_BYTES = 512  # the first bytes looks_like_video reads

# Our format names are Pillow's plugin names; a phone's multi-picture JPEG opens as "MPO", a .jpg to its owner.
_PILLOW_NAMES: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")
OUR_NAME = {"MPO": "JPEG"}


@dataclass(frozen=True)
class InputLimits:
    """What an uploaded image may be. Checked before its pixels are decoded."""

    # Bytes on disk: a 48 MP phone JPEG is ~10-20 MB; 25 MB bounds how long a hostile upload keeps a decoder busy.
    max_file_bytes: int = 25_000_000
    # Declared width × height: admits 48 MP phone sensors, refuses decompression bombs, and stays below Pillow's
    # own MAX_IMAGE_PIXELS (~89 MP) so that everything above it is refused in our words.
    max_pixels: int = 50_000_000
    # Longest side / shortest side: a 1×20 000 strip is a banner or an attack, and degenerates detector pyramids.
    max_aspect: float = 20.0
    # Shortest side in pixels: RetinaFace's smallest anchor is 16 px, so nothing smaller holds a detectable face.
    min_side: int = 16
    # Allowed containers (an animated GIF or WebP gives its first frame); SVG, PDF, HEIC, ICO, PSD... are out:
    # Pillow cannot decode them, or their parsers are needless attack surface.
    formats: tuple[str, ...] = _PILLOW_NAMES
    # How the user raises max_pixels where they can (a local run's flag), for its refusal to say; "": they cannot.
    raise_with: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.formats) - set(_PILLOW_NAMES)
        if unknown:
            raise ValueError(f"unknown formats {sorted(unknown)}; choose from {sorted(_PILLOW_NAMES)}")
        if self.max_file_bytes < 1 or self.max_pixels < 1 or self.min_side < 1 or self.max_aspect < 1:
            raise ValueError(f"limits must be positive (aspect ≥ 1), got {self}")


DEFAULT_LIMITS = InputLimits()


def input_limits(max_pixels: int | None) -> InputLimits:
    """The limits of a request with its own ``max_pixels`` (RestoreOptions': a local run), else the defaults. Raised
    above the default, files may hold that many 16-bit RGBA pixels uncompressed (8 bytes each: a scan's TIFF)."""
    if max_pixels is None:
        return DEFAULT_LIMITS
    size = 8 * max_pixels if max_pixels > DEFAULT_LIMITS.max_pixels else DEFAULT_LIMITS.max_file_bytes
    return replace(DEFAULT_LIMITS, max_pixels=max_pixels, max_file_bytes=size, raise_with="--max-megapixels")


def _ratio(r: float) -> str:
    return f"{r:.1f}".rstrip("0").rstrip(".")


def _mp(n: int) -> str:
    return f"{n / 1e6:.1f} megapixels" if n % 1_000_000 else f"{n // 1_000_000} megapixels"


def format_display_name(fmt: str) -> str:
    return "WebP" if fmt == "WEBP" else fmt


def png_declared_size(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        return (w, h) if w and h else None
    return None


def too_many_pixels(pixels: int, limits: InputLimits, size: tuple[int, int] | None) -> InputError:
    what = f"is {size[0]}×{size[1]} ({_mp(pixels)})" if size else f"declares {_mp(pixels)}"
    s = math.sqrt(limits.max_pixels / pixels)
    most = f"{max(1, int(size[0] * s))}×{max(1, int(size[1] * s))}" if size else _mp(limits.max_pixels)
    need = math.ceil(pixels / 1e6)  # the limit that admits it, where Pillow admits it too
    raise_it = (f" (or raise the limit for this run: {limits.raise_with} {need})"
                if limits.raise_with and need * 10**6 <= PILLOW_MAX_PIXELS else "")
    return InputError(f"The image {what}; the limit is {_mp(limits.max_pixels)} (larger images are refused to bound "
                      f"the memory a restore takes). Resize it to at most {most}{raise_it} and try again.")


# ISO media brands that are still images, not clips.
HEIC_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")
AVIF_BRANDS = (b"avif", b"avis")


def looks_like_video(head: bytes) -> bool:
    """True when the first bytes are a video container's (ISO media, Matroska/WebM, AVI, MPEG-TS/PS, FLV,
    Ogg): the one rule by which the CLI routes a file to the video path and a photo refusal names a clip."""
    if head[4:8] == b"ftyp":
        return head[8:12] not in HEIC_BRANDS + AVIF_BRANDS
    return (head[4:8] in (b"moov", b"mdat", b"wide", b"free", b"skip")  # QuickTime without ftyp
            # EBML (Matroska, WebM), MPEG-PS, FLV, Ogg
            or head.startswith((b"\x1a\x45\xdf\xa3", b"\x00\x00\x01\xba", b"FLV\x01", b"OggS"))
            or (head[:4] == b"RIFF" and head[8:12] == b"AVI ")
            or (len(head) > 376 and head[0] == head[188] == head[376] == 0x47))  # MPEG-TS sync bytes


def file_head(path: str | os.PathLike[str]) -> bytes | None:
    """A file's first :data:`VIDEO_HEAD_BYTES` (enough to tell a photo or a clip by), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(VIDEO_HEAD_BYTES)
    except OSError:
        return None


def neither_why(path: str | os.PathLike[str]) -> str:
    """Why a folder's file that is neither a photo by its name nor a video is left out: :data:`NEITHER`, or for a
    phone's HEIC or AVIF photo the refusal it gets given alone, with its fix."""
    head = file_head(path)
    return str(unidentified(head, DEFAULT_LIMITS)) if head is not None and sniff(head) in ("HEIC", "AVIF") else NEITHER


def sniff_file(path: str | os.PathLike[str]) -> bool:
    """:func:`looks_like_video` on a file's first bytes (False when it cannot be read)."""
    head = file_head(path)
    return head is not None and looks_like_video(head)


def not_a_photo(path: str | os.PathLike[str]) -> str | None:
    """None when a file's first bytes are a photo format's (or it cannot be read: the photo path says why); else what
    they are ("text", "PDF", "no format this reads"), for a refusal that does not call it a photo."""
    head = file_head(path)
    if head is None:
        return None
    photos = {name for _, name in _IMAGE_MAGIC} | {"WEBP", "BMP", "HEIC", "AVIF"}
    kind = sniff(head)
    return None if kind in photos else kind or "no format this reads"


# Magic numbers of the formats we read, then of files uploaded by mistake, so a refusal can name what it got.
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
                (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"II+\x00", "TIFF"), (b"MM\x00+", "TIFF"))
_MISTAKE_MAGIC = (
    (b"\x00\x00\x01\x00", "ICO"), (b"\x00\x00\x02\x00", "CUR"), (b"8BPS", "PSD (Photoshop)"), (b"%PDF", "PDF"),
    (b"%!PS", "PostScript/EPS"), (b"\xc5\xd0\xd3\xc6", "EPS"), (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"), (b"\xff\x0a", "JPEG XL"), (b"\x00\x00\x00\x0cJXL ", "JPEG XL"),
    (b"PK\x03\x04", "ZIP archive"), (b"\x1f\x8b", "gzip archive"),
)


def _magic(head: bytes, table: tuple[tuple[bytes, str], ...]) -> str | None:
    return next((name for magic, name in table if head.startswith(magic)), None)


def sniff(head: bytes) -> str | None:
    if name := _magic(head, _IMAGE_MAGIC):
        return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith(b"BM") and int.from_bytes(head[14:18], "little") in (12, 40, 52, 56, 64, 108, 124):
        return "BMP"  # "BM" + a known DIB header size, so text starting "BM" is not a bitmap
    if head[4:8] == b"ftyp" and head[8:12] in HEIC_BRANDS + AVIF_BRANDS:
        return "HEIC" if head[8:12] in HEIC_BRANDS else "AVIF"
    if looks_like_video(head):
        return "video"
    if name := _magic(head, _MISTAKE_MAGIC):
        return name
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    lowered = text[:4096].lower()
    if b"<svg" in lowered and (lowered.startswith((b"<?xml", b"<svg", b"<!--", b"<!doctype svg"))):
        return "SVG"
    if lowered.startswith((b"<!doctype html", b"<html")):
        return "HTML"
    try:  # not final: a multi-byte character cut at the end of the sniffed prefix is still text
        decoded = codecs.getincrementaldecoder("utf-8")().decode(head)
    except UnicodeDecodeError:
        return None
    if decoded and all(c.isprintable() or c in "\r\n\t\f" for c in decoded):
        return "text"
    return None


def unidentified(head: bytes, limits: InputLimits) -> InputError:
    kind = sniff(head)
    supported = f"Supported formats: {', '.join(map(format_display_name, limits.formats))}."
    if kind in _PILLOW_NAMES and kind in limits.formats:
        return InputError(f"The file starts like a {kind} but its header cannot be read; it is probably truncated "
                          f"or corrupt. Re-export it and try again.")
    if kind in _PILLOW_NAMES:
        return InputError(f"{kind} files are not accepted here. {supported} Convert it to PNG or JPEG and try again.")
    if kind == "HEIC":
        return InputError("HEIC/HEIF photos (the iPhone default) are not supported. "
                          f"{supported} Export it as JPEG (on iPhone: Settings → Camera → Formats → Most Compatible) "
                          "and try again.")
    if kind == "video":
        return InputError("The file is a video, not a photo. Restore it as a video: in the app's Video tab, or with "
                          "`python -m gpen_core restore CLIP -o out.mp4` (docs/video.md).")
    if kind == "text":
        return InputError(f"The file is not an image: it contains text. {supported} Choose an image file and try again.")
    if kind is not None:
        return InputError(f"{kind} files are not supported. {supported} Convert it to PNG or JPEG and try again.")
    return InputError(f"The file is not a recognised image (it starts with bytes {head[:8].hex(' ')}). "
                      f"{supported} Choose an image file and try again.")


SNIFF_BYTES = 4096  # enough to find "<svg" after an XML prolog and a comment


def open_source(source: bytes | str | os.PathLike[str], limits: InputLimits) -> io.BufferedIOBase:
    """A readable binary file for ``source``, after the size check (which reads nothing)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        n = memoryview(source).nbytes
        if n > limits.max_file_bytes:
            raise too_big(n, limits)
        return io.BytesIO(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be bytes or a path, got {type(source).__name__}")
    path = os.fspath(source)
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size <= limits.max_file_bytes:
            return open(path, "rb")  # noqa: SIM115 - closed by decode_image's with-block
    except FileNotFoundError:
        raise InputError(f"The file {path!r} does not exist. Check the path and try again.") from None
    except OSError as e:
        raise InputError(f"The file {path!r} cannot be opened ({e.strerror}). Check the path and try again.") from None
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device reports size 0 and then streams forever; a folder is a mistake.
        raise InputError(f"{path!r} is {special_kind(st.st_mode)}, not a regular file. Choose an image file and try again.")
    raise too_big(st.st_size, limits)


MISSING = "not there"  # not_a_file's word for a path with nothing at it


def not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a photo (a folder, a FIFO, a symbolic link loop...), or None for a regular file."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        if path.is_symlink():
            return "a broken symbolic link"
        return MISSING if exc.errno == errno.ENOENT else f"unreadable ({exc.strerror})"
    return None if stat.S_ISREG(mode) else f"{special_kind(mode)}, not a file"


def special_kind(mode: int) -> str:
    """What a file that is not a regular one is, by its ``st_mode``, as every refusal names it."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def too_big(n: int | None, limits: InputLimits) -> InputError:
    """A file over the size limit; ``n`` None: an upload stopped at the limit, its size unknown."""
    cap = megabytes(limits.max_file_bytes)
    size = (f"The upload is over {cap}, the limit; it was refused without being read to the end" if n is None
            else f"The file is {megabytes(n)}; the limit is {cap}")
    # a local run's flag raises the file limit with the pixel limit: 8 bytes a pixel past the default's megapixels
    need = math.ceil((n or 0) / 8e6)
    raise_it = (f" (or raise the limit for this run: {limits.raise_with} {max(need, DEFAULT_LIMITS.max_pixels // 10**6 + 1)})"
                if n and limits.raise_with and need * 10**6 <= PILLOW_MAX_PIXELS else "")
    return InputError(f"{size}. Save it as a JPEG (quality 90 is plenty) or resize it{raise_it}, and try again.")


def check_geometry(size: tuple[int, int], limits: InputLimits) -> None:
    w, h = size
    pixels = w * h
    if pixels > limits.max_pixels:
        raise too_many_pixels(pixels, limits, size)
    long, short = max(w, h), max(1, min(w, h))
    if long / short > limits.max_aspect:
        raise InputError(
            f"The image is {w}×{h} (aspect ratio {_ratio(long / short)}:1); "
            f"the limit is {_ratio(limits.max_aspect)}:1. Crop it closer to the people in it and try again."
        )
    if min(w, h) < limits.min_side:
        raise InputError(f"The image is {w}×{h} pixels; its shortest side must be at least {limits.min_side} pixels "
                         "for a face to be found. Use a larger image and try again.")


def pillow_failure(fmt: str, e: BaseException) -> InputError:
    detail = str(e).strip() or type(e).__name__
    return InputError(f"The {fmt} file is truncated or corrupt ({detail}); re-export it and try again.")
