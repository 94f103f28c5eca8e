"""The hostile-input table: real files that users (or attackers) upload, and what must happen.

One table drives the engine tests (``tests/test_imageio.py`` feeds every file to
``decode_image``) and, later, the app tests (the same files through the UI handler).
Each :class:`Case` writes its file into a folder; its :class:`Expectation` says whether
the image is accepted, which substrings the refusal message (or, when accepted, the
notes) must contain, and — for engine tests — a pixel check on the decoded arrays.

    from tests.hostile import CASES, make_all
    files = make_all(tmp_path)          # {name: (path, expectation)}

Every generator is cheap: the 50 000 × 50 000 PNG bomb is a hand-written header and a
tiny IDAT (no pixels allocated), the over-size file is sparse, and the largest real
image (an 8000×6000 JPEG gradient) takes under a second.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

PixelCheck = Callable[[np.ndarray, "np.ndarray | None"], None]


@dataclass(frozen=True)
class Expectation:
    """What must happen to one hostile file, with the default limits and no ``reduce_to``."""

    accepted: bool
    # Refused: each must occur in the error message. Accepted: each must occur in one of
    # the notes. Compared case-insensitively.
    says: tuple[str, ...] = ()
    # Accepted: (width, height) of the decoded RGB, after EXIF rotation.
    size: tuple[int, int] | None = None
    # Accepted: whether an alpha channel is kept beside the RGB.
    alpha: bool = False
    # Accepted: check(rgb, alpha) raises AssertionError when the pixels are wrong. rgb is
    # RGB uint8 H×W×3 as decoded (before any restoration), alpha uint8 H×W or None.
    check: PixelCheck | None = None


@dataclass(frozen=True)
class Case:
    name: str
    filename: str  # the extension a user would see (sometimes a lie, on purpose)
    write: Callable[[Path], None]  # writes the file at the given path
    expect: Expectation

    def make(self, folder: Path) -> Path:
        path = Path(folder) / self.filename
        self.write(path)
        return path


# ---------------------------------------------------------------------------------------
# Byte-level writers


def png_bytes(width: int, height: int, bit_depth: int, color_type: int, rows: bytes | None = None) -> bytes:
    """A PNG written by hand: IHDR as declared, IDAT = zlib(rows) (filter bytes included).

    ``rows=None`` writes a tiny IDAT regardless of the declared size: a header-only bomb.
    """

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    idat = zlib.compress(rows if rows is not None else b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def png16_bytes(samples: np.ndarray) -> bytes:
    """16-bit PNG from uint16 H×W (grey), H×W×3 (RGB) or H×W×4 (RGBA); Pillow cannot write RGB16."""
    color_type = 0 if samples.ndim == 2 else {2: 4, 3: 2, 4: 6}[samples.shape[2]]
    h, w = samples.shape[:2]
    be = samples.astype(">u2")
    rows = b"".join(b"\x00" + be[y].tobytes() for y in range(h))
    return png_bytes(w, h, 16, color_type, rows)


def _save(img: Image.Image, fmt: str, **kw: object) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        img.save(path, fmt, **kw)

    return write


def _bytes(data: bytes | Callable[[], bytes]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(data() if callable(data) else data)

    return write


# ---------------------------------------------------------------------------------------
# Pixel checks


def _near(actual: np.ndarray, expected: tuple[int, ...] | int, tol: int, what: str) -> None:
    diff = np.abs(np.asarray(actual, np.int32) - np.asarray(expected, np.int32)).max()
    assert diff <= tol, f"{what}: got {np.asarray(actual).tolist()}, expected {expected} ± {tol}"


RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 200, 0), (0, 0, 255), (255, 255, 255)


def _marker_image(w: int = 64, h: int = 48) -> Image.Image:
    """Grey image, a red block in the stored top-left corner and a blue one top-right."""
    a = np.full((h, w, 3), 128, np.uint8)
    a[:16, :16] = RED
    a[:16, -16:] = BLUE
    return Image.fromarray(a)


def _corner_mean(rgb: np.ndarray, corner: str, n: int = 8) -> np.ndarray:
    # The inner n×n of a 16-px block: JPEG ringing stays at the block's edges.
    off = 4
    ys = slice(off, off + n) if corner[0] == "t" else slice(-off - n, -off)
    xs = slice(off, off + n) if corner[1] == "l" else slice(-off - n, -off)
    return rgb[ys, xs].reshape(-1, 3).mean(axis=0)


def _markers_at(red_corner: str, blue_corner: str) -> PixelCheck:
    def check(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
        _near(_corner_mean(rgb, red_corner), RED, 40, f"red marker at {red_corner}")
        _near(_corner_mean(rgb, blue_corner), BLUE, 40, f"blue marker at {blue_corner}")

    return check


def _exif_jpeg(orientation: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        _marker_image().save(path, "JPEG", quality=95, exif=exif.tobytes())

    return write


def _gradient(w: int, h: int) -> Image.Image:
    """A smooth colour gradient made by upscaling a tiny one (fast at any size)."""
    small = Image.linear_gradient("L").resize((80, 60))
    rgb = Image.merge("RGB", [small, small.transpose(Image.Transpose.FLIP_LEFT_RIGHT), small.rotate(180)])
    return rgb.resize((w, h), Image.Resampling.BILINEAR)


def _write_big_jpeg(path: Path) -> None:
    _gradient(8000, 6000).save(path, "JPEG", quality=85)


def _check_gradient(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    # Top-left is dark in R; bottom-right bright (linear_gradient runs black → white downwards).
    assert rgb[:50, :, 0].mean() < 40 and rgb[-50:, :, 0].mean() > 215, "gradient not decoded"


def _truncated(fmt: str, keep: float) -> Callable[[], bytes]:
    def data() -> bytes:
        noise = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(noise).save(buf, fmt)
        full = buf.getvalue()
        return full[: int(len(full) * keep)]

    return data


def _cmyk_jpeg(path: Path) -> None:
    # Pillow writes CMYK JPEGs the Adobe way (APP14 marker, inverted samples), as Photoshop does.
    a = np.zeros((32, 64, 4), np.uint8)
    a[:, :32] = (0, 255, 255, 0)  # red
    a[:, 32:] = (255, 255, 0, 0)  # blue
    Image.fromarray(a, "CMYK").save(path, "JPEG", quality=95)


def _check_cmyk(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    _near(rgb[8:24, 4:28].reshape(-1, 3).mean(0), RED, 30, "CMYK red half")
    _near(rgb[8:24, 36:60].reshape(-1, 3).mean(0), BLUE, 30, "CMYK blue half")


def _gray16() -> bytes:
    g = np.full((32, 48), 32768, np.uint16)
    g[:, :8] = 0
    g[:, -8:] = 65535
    return png16_bytes(g)


def _check_gray16(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    _near(rgb[0, 20], (128, 128, 128), 1, "16-bit 32768")
    _near(rgb[0, 0], (0, 0, 0), 0, "16-bit 0")
    _near(rgb[0, -1], (255, 255, 255), 0, "16-bit 65535")


def _rgb16() -> bytes:
    a = np.full((32, 48, 3), 32768, np.uint16)
    a[:, :8] = (65535, 0, 32768)
    a[:, -8:] = (256, 65535, 1000)
    return png16_bytes(a)


def _check_rgb16(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    _near(rgb[5, 20], (128, 128, 128), 1, "16-bit RGB mid-grey (must not clip to white)")
    _near(rgb[5, 0], (255, 0, 128), 1, "16-bit RGB pure red + half blue")
    _near(rgb[5, -1], (1, 255, 4), 1, "16-bit RGB small values")


def _rgba_png(path: Path) -> None:
    a = np.zeros((32, 64, 4), np.uint8)
    a[..., :3] = (200, 40, 40)
    a[:, :, 3] = np.linspace(0, 255, 64).round().astype(np.uint8)[None, :]
    Image.fromarray(a, "RGBA").save(path, "PNG")


def _check_rgba(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert alpha is not None
    expected_alpha = np.linspace(0, 255, 64).round().astype(np.uint8)
    assert (alpha == expected_alpha[None, :]).all(), "alpha not preserved exactly"
    _near(rgb[0, 0], WHITE, 0, "fully transparent pixel composited on white")
    _near(rgb[0, -1], (200, 40, 40), 0, "opaque pixel kept")
    a = int(alpha[0, 32]) / 255
    _near(rgb[0, 32], tuple(round(c * a + 255 * (1 - a)) for c in (200, 40, 40)), 1, "half-transparent blend")


def _la_png(path: Path) -> None:
    a = np.zeros((32, 32, 2), np.uint8)
    a[..., 0] = 60
    a[:, 16:, 1] = 255
    Image.fromarray(a, "LA").save(path, "PNG")


def _check_la(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert alpha is not None and (alpha[:, :16] == 0).all() and (alpha[:, 16:] == 255).all()
    _near(rgb[3, 3], WHITE, 0, "transparent grey on white")
    _near(rgb[3, 20], (60, 60, 60), 0, "opaque grey")


def _palette_png(path: Path) -> None:
    idx = np.zeros((32, 32), np.uint8)
    idx[:, 16:] = 1
    im = Image.fromarray(idx, "P")
    im.putpalette([0, 0, 0, *GREEN] + [0] * (254 * 3))
    im.save(path, "PNG", transparency=0)


def _check_palette(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert alpha is not None and (alpha[:, :16] == 0).all() and (alpha[:, 16:] == 255).all()
    _near(rgb[3, 3], WHITE, 0, "transparent palette entry on white")
    _near(rgb[3, 20], GREEN, 0, "opaque palette entry")


def _gray_png(path: Path) -> None:
    Image.fromarray(np.tile(np.arange(0, 256, 4, dtype=np.uint8), (32, 1)), "L").save(path, "PNG")


def _check_gray(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all(), "grey must stay grey"
    assert rgb[0, 0, 0] == 0 and rgb[0, -1, 0] == 252


def _bilevel_png(path: Path) -> None:
    a = np.zeros((32, 32), bool)
    a[:, 16:] = True
    Image.fromarray(a).convert("1").save(path, "PNG")


def _check_bilevel(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert (rgb[:, :16] == 0).all() and (rgb[:, 16:] == 255).all()


def _frames() -> list[Image.Image]:
    return [Image.new("RGB", (32, 32), c) for c in (RED, GREEN, BLUE)]


def _animated(fmt: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        first, *rest = _frames()
        kw: dict[str, object] = {"lossless": True} if fmt == "WEBP" else {}
        first.save(path, fmt, save_all=True, append_images=rest, duration=100, loop=0, **kw)

    return write


def _check_red(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    _near(rgb.reshape(-1, 3).mean(0), RED, 3, "first frame (red)")


def many_frames_gif(n: int) -> bytes:
    """A GIF of ``n`` 1×1 frames on a 32×32 red screen: ~23 bytes a frame, a frame-count bomb."""
    head = b"GIF89a" + struct.pack("<HHBBB", 32, 32, 0x80, 0, 0) + bytes((255, 0, 0, 0, 0, 255))
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    first = b"\x2c" + struct.pack("<HHHHB", 0, 0, 32, 32, 0) + b"\x02" + _lzw_zeros(32 * 32) + b"\x00"
    control = b"\x21\xf9\x04\x00\x01\x00\x00\x00"  # graphic control extension: 10 ms delay
    tiny = control + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return head + loop + first + tiny * (n - 1) + b"\x3b"


def _lzw_zeros(count: int) -> bytes:
    """GIF LZW (min code size 2) for ``count`` pixels of index 0, as sub-blocks.

    Emits clear + one literal 0 per pixel with a clear every 2 codes, so codes stay 3 bits:
    not compact, but simple and valid.
    """
    bits, nbits = 0, 0
    out = bytearray()
    for _ in range(count):
        for code in (4, 0):  # clear, literal 0
            bits |= code << nbits
            nbits += 3
            while nbits >= 8:
                out.append(bits & 0xFF)
                bits >>= 8
                nbits -= 8
    bits |= 5 << nbits  # end of information
    nbits += 3
    while nbits > 0:
        out.append(bits & 0xFF)
        bits >>= 8
        nbits -= 8
    return b"".join(bytes((len(out[i : i + 255]),)) + out[i : i + 255] for i in range(0, len(out), 255))


def many_pages_tiff(n: int) -> bytes:
    """A little-endian TIFF of ``n`` 16×16 grey pages sharing one strip: a page-count bomb."""
    strip = 8
    data = bytearray(b"II*\x00" + struct.pack("<I", 8 + 256) + bytes([90]) * 256)
    tags = ((256, 16), (257, 16), (258, 8), (259, 1), (262, 1), (273, strip), (278, 16), (279, 256))
    for i in range(n):
        ifd = struct.pack("<H", len(tags)) + b"".join(
            struct.pack("<HHII", t, 4, 1, v) if t in (273, 279) else struct.pack("<HHIHH", t, 3, 1, v, 0)
            for t, v in tags
        )
        nxt = len(data) + len(ifd) + 4 if i < n - 1 else 0
        data += ifd + struct.pack("<I", nxt)
    return bytes(data)


def _check_grey90(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert (rgb == 90).all()


def _tiff_float(path: Path) -> None:
    Image.fromarray(np.linspace(0, 1, 32 * 32, dtype=np.float32).reshape(32, 32), "F").save(path, "TIFF")


def _check_float(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert rgb[0, 0, 0] == 0 and rgb[-1, -1, 0] == 255 and 120 <= rgb[16, 0, 0] <= 135


def _tiff_float_rgb(path: Path) -> None:
    """A float32 RGB TIFF (Pillow has no mode for it): red left half, [0, 1] ramp in blue."""
    import cv2

    a = np.zeros((32, 48, 3), np.float32)
    a[:, :24, 0] = 1.0
    a[..., 2] = np.linspace(0, 1, 48, dtype=np.float32)
    ok, buf = cv2.imencode(".tif", np.ascontiguousarray(a[..., ::-1]))  # OpenCV writes BGR
    assert ok
    path.write_bytes(buf.tobytes())


def _check_float_rgb(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    assert (rgb[:, :24, 0] == 255).all() and (rgb[:, 24:, 0] == 0).all() and (rgb[..., 1] == 0).all()
    assert rgb[0, 0, 2] == 0 and rgb[0, -1, 2] == 255 and 120 <= rgb[0, 24, 2] <= 135


def big_icc(nbytes: int = 10_000_000) -> bytes:
    """A valid sRGB profile padded to ``nbytes`` (its header's size field says so too)."""
    from PIL import ImageCms

    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = bytearray(srgb + b"\0" * (nbytes - len(srgb)))
    data[0:4] = len(data).to_bytes(4, "big")
    return bytes(data)


def _icc_jpeg(icc: Callable[[], bytes]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        Image.new("RGB", (64, 48), (200, 100, 50)).save(path, "JPEG", quality=95, icc_profile=icc())

    return write


def _junk_icc() -> bytes:
    data = bytearray(np.random.default_rng(5).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    data[16:20] = b"RGB "  # says RGB, but nothing else in it is a profile
    return bytes(data)


def _check_orange(rgb: np.ndarray, alpha: np.ndarray | None) -> None:
    _near(rgb.reshape(-1, 3).mean(axis=0), (200, 100, 50), 4, "orange")


def _sparse_png(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "wb") as f:
            f.write(png_bytes(4000, 4000, 8, 2))
            f.truncate(size)  # sparse: costs no disk and no time

    return write


SVG = b"""<?xml version="1.0" encoding="UTF-8"?>
<!-- a logo -->
<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><circle cx="32" cy="32" r="30" fill="red"/></svg>
"""
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
# An ISO-BMFF 'ftyp' box with the HEIC brand: what an iPhone photo starts with.
HEIC = struct.pack(">I", 24) + b"ftypheic" + b"\x00\x00\x00\x00" + b"mif1heic" + b"\x00" * 64
# The first bytes of a phone's MP4 and of a Matroska clip (EBML header): a video picked where a photo goes.
MP4_HEAD = struct.pack(">I", 24) + b"ftypisom" + b"\x00\x00\x02\x00" + b"isomiso2" + b"\x00" * 64
MKV_HEAD = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01" + b"\x00" * 64
TEXT = b"These are my holiday notes, not a picture.\nDay 1: beach.\n"


def _ico(path: Path) -> None:
    Image.new("RGB", (32, 32), RED).save(path, "ICO")


# ---------------------------------------------------------------------------------------
# The table


def _accept(size: tuple[int, int], *says: str, alpha: bool = False, check: PixelCheck | None = None) -> Expectation:
    return Expectation(accepted=True, says=says, size=size, alpha=alpha, check=check)


def _refuse(*says: str) -> Expectation:
    return Expectation(accepted=False, says=says)


CASES: tuple[Case, ...] = (
    Case("empty_file", "empty.png", _bytes(b""), _refuse("empty", "0 bytes")),
    Case("text_renamed_png", "notes.png", _bytes(TEXT), _refuse("not an image", "text")),
    Case("truncated_jpeg", "cut.jpg", _bytes(_truncated("JPEG", 0.6)), _refuse("JPEG", "truncated or", "export")),
    Case("truncated_png", "cut.png", _bytes(_truncated("PNG", 0.6)), _refuse("PNG", "truncated or corrupt", "export")),
    Case(
        "png_bomb_50000x50000",
        "bomb.png",
        _bytes(lambda: png_bytes(50_000, 50_000, 8, 2)),
        _refuse("2500 megapixels", "limit is 50 megapixels", "resize it to at most"),
    ),
    # Over our limit but under Pillow's own (89 MP): our check, not Pillow's, must refuse it.
    Case(
        "png_bomb_9000x9000",
        "bomb_small.png",
        _bytes(lambda: png_bytes(9000, 9000, 8, 2)),
        _refuse("9000×9000", "limit is 50 megapixels", "resize it to at most"),
    ),
    Case("jpeg_8000x6000", "big.jpg", _write_big_jpeg, _accept((8000, 6000), check=_check_gradient)),
    Case(
        "exif_orientation_6",
        "rot6.jpg",
        _exif_jpeg(6),
        # Stored 64×48; shown rotated 90° clockwise: stored top-left → top-right, top-right → bottom-right.
        _accept((48, 64), "EXIF orientation 6", check=_markers_at("tr", "br")),
    ),
    Case(
        "exif_orientation_8",
        "rot8.jpg",
        _exif_jpeg(8),
        # Shown rotated 90° counter-clockwise: stored top-left → bottom-left, top-right → top-left.
        _accept((48, 64), "EXIF orientation 8", check=_markers_at("bl", "tl")),
    ),
    Case("cmyk_jpeg", "cmyk.jpg", _cmyk_jpeg, _accept((64, 32), "CMYK converted to RGB", check=_check_cmyk)),
    Case("gray16_png", "gray16.png", _bytes(_gray16), _accept((48, 32), "16-bit", check=_check_gray16)),
    Case("rgb16_png", "rgb16.png", _bytes(_rgb16), _accept((48, 32), "16-bit PNG scaled to 8 bit", check=_check_rgb16)),
    Case("rgba_png", "rgba.png", _rgba_png, _accept((64, 32), "composited on white", alpha=True, check=_check_rgba)),
    Case("la_png", "la.png", _la_png, _accept((32, 32), "composited on white", alpha=True, check=_check_la)),
    Case(
        "palette_transparent_png",
        "palette.png",
        _palette_png,
        _accept((32, 32), "composited on white", alpha=True, check=_check_palette),
    ),
    Case("gray_png", "gray.png", _gray_png, _accept((64, 32), "grayscale", check=_check_gray)),
    Case("bilevel_png", "bilevel.png", _bilevel_png, _accept((32, 32), "1-bit", check=_check_bilevel)),
    Case("animated_gif", "anim.gif", _animated("GIF"), _accept((32, 32), "first frame of 3", check=_check_red)),
    Case("animated_webp", "anim.webp", _animated("WEBP"), _accept((32, 32), "first frame of 3", check=_check_red)),
    # Frame/page-count bombs: counting every frame for the note would take seconds (GIF) or
    # minutes (TIFF, quadratic in Pillow); the count is capped instead.
    Case(
        "gif_1M_frames",
        "frames.gif",
        _bytes(lambda: many_frames_gif(1_000_000)),
        _accept((32, 32), "first frame of 1000 or more", check=_check_red),
    ),
    Case(
        "tiff_20000_pages",
        "pages.tif",
        _bytes(lambda: many_pages_tiff(20_000)),
        _accept((16, 16), "first page of 1000 or more", check=_check_grey90),
    ),
    Case("float_tiff", "float.tif", _tiff_float, _accept((32, 32), "floating-point", check=_check_float)),
    Case(
        "float32_rgb_tiff",
        "float_rgb.tif",
        _tiff_float_rgb,
        _accept((48, 32), "floating-point TIFF in [0, 1] scaled to 8 bit", check=_check_float_rgb),
    ),
    Case(
        "jpeg_icc_10mb",
        "big_icc.jpg",
        _icc_jpeg(big_icc),
        _accept((64, 48), "colour profile (10 MB", "converted to sRGB", check=_check_orange),
    ),
    Case("jpeg_icc_invalid", "bad_icc.jpg", _icc_jpeg(_junk_icc), _accept((64, 48), "colour profile is invalid", "dropped")),
    Case("bmp", "plain.bmp", _save(_marker_image(), "BMP"), _accept((64, 48), check=_markers_at("tl", "tr"))),
    Case("tiff", "plain.tif", _save(_marker_image(), "TIFF"), _accept((64, 48), check=_markers_at("tl", "tr"))),
    Case("webp", "plain.webp", _save(_marker_image(), "WEBP", lossless=True), _accept((64, 48))),
    Case("svg", "logo.svg", _bytes(SVG), _refuse("SVG", "not supported", "PNG or JPEG")),
    Case("svg_renamed_png", "logo.png", _bytes(SVG), _refuse("SVG", "not supported")),
    Case("ico", "favicon.ico", _ico, _refuse("ICO", "not supported")),
    Case("pdf", "scan.pdf", _bytes(PDF), _refuse("PDF", "not supported")),
    Case("heic", "IMG_0001.heic", _bytes(HEIC), _refuse("HEIC", "export it as JPEG")),
    Case("mp4_as_photo", "VID_0001.mp4", _bytes(MP4_HEAD), _refuse("is a video, not a photo", "Video tab", "restore")),
    Case("mkv_as_photo", "clip.png", _bytes(MKV_HEAD), _refuse("is a video, not a photo", "Video tab", "restore")),
    Case("tiny_16x16", "tiny.png", _save(Image.new("RGB", (16, 16), GREEN), "PNG"), _accept((16, 16))),
    Case("too_small_8x8", "icon.png", _save(Image.new("RGB", (8, 8), GREEN), "PNG"), _refuse("8×8", "at least 16")),
    Case(
        "strip_1x20000",
        "strip.png",
        _save(Image.new("L", (1, 20_000), 128), "PNG"),
        _refuse("1×20000", "limit is 20:1", "crop"),
    ),
    Case("over_25mb", "huge.png", _sparse_png(26_000_000), _refuse("26 MB", "limit is 25 MB")),
)

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def make_all(folder: Path, names: list[str] | None = None) -> dict[str, tuple[Path, Expectation]]:
    """Write every case (or the named ones) into ``folder``: {name: (path, expectation)}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chosen = CASES if names is None else tuple(CASES_BY_NAME[n] for n in names)
    return {c.name: (c.make(folder), c.expect) for c in chosen}
