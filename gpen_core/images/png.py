"""A fast lossless PNG writer (Pillow's tries five filters per row on one thread): each band of rows gets three
numpy filters (Sub, Up, Average; libpng's closest-to-zero pick) and is deflated on its own thread, the bands'
sync-flushed streams one zlib stream as pigz writes them. Measured on 12 MP photos: ~0.4-0.6x Pillow's CPU time,
files -7 % to +6 % of its size.
"""

from __future__ import annotations

import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gpen_core.platform.cpu_share import usable_cores
from gpen_core.platform.meter import mark_call_worker

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ADLER_MOD = 65521
# Candidate filters, in the order of the stacked array; the value is PNG's filter type byte.
_SUB, _UP, _AVG = 0, 1, 2
_FILTER_TYPE = np.array([1, 2, 3], np.uint8)
# ~1 MiB of pixels per band: enough to keep every thread busy, few enough that each band's flush is noise.
_BAND_BYTES = 1 << 20


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))


def _filter_band(rows: np.ndarray, bpp: int) -> np.ndarray:
    """``rows``: (n+1)×W uint8, the row above the band (zeros for the first band) then the band.
    Returns the band as PNG scanlines, n×(W+1): a filter type byte then the filtered row."""
    x, up = rows[1:], rows[:-1]
    n, w = x.shape
    cand = np.empty((3, n, w), np.uint8)
    cand[_SUB, :, :bpp] = x[:, :bpp]
    np.subtract(x[:, bpp:], x[:, :-bpp], out=cand[_SUB, :, bpp:])
    np.subtract(x, up, out=cand[_UP])
    # Average predicts floor((left + up) / 2); (a & b) + ((a ^ b) >> 1) is that without overflow.
    avg = cand[_AVG]
    np.right_shift(up[:, :bpp], 1, out=avg[:, :bpp])
    left, above = x[:, :-bpp], up[:, bpp:]
    np.add(left & above, (left ^ above) >> 1, out=avg[:, bpp:])
    np.subtract(x, avg, out=avg)
    # Distance from zero of a filtered byte, min(v, 256 - v), is |int8| read as uint8. A uint32 sum (4x faster)
    # could wrap only on rows over 32 MiB, and then only picks a worse filter, never wrong pixels.
    cost = np.abs(cand.view(np.int8)).view(np.uint8).sum(axis=2, dtype=np.uint32)
    best = cost.argmin(axis=0)
    out = np.empty((n, w + 1), np.uint8)
    out[:, 0] = _FILTER_TYPE[best]
    out[:, 1:] = cand[best, np.arange(n)]
    return out


def _adler32_combine(a1: int, a2: int, len2: int) -> int:
    """Adler-32 of A+B from adler32(A), adler32(B) and len(B) (zlib's adler32_combine)."""
    s1 = ((a1 & 0xFFFF) + (a2 & 0xFFFF) - 1) % _ADLER_MOD
    s2 = ((a1 >> 16) + (a2 >> 16) + len2 * ((a1 & 0xFFFF) - 1)) % _ADLER_MOD
    return (s2 << 16) | s1


def encode_png(rgb: np.ndarray, alpha: np.ndarray | None = None, icc_profile: bytes | None = None, *,
               exif: bytes | None = None, dpi: tuple[float, float] | None = None, band_bytes: int = _BAND_BYTES,
               workers: int | None = None) -> bytes:
    """RGB uint8 H×W×3 (+ uint8 H×W alpha → RGBA) → the bytes of an 8-bit PNG file.

    ``exif``: TIFF bytes, with or without JPEG's "Exif\\0\\0" prefix; ``dpi``: (x, y). ``band_bytes`` and ``workers``
    (default: the CPUs this process may use, at most 8) change speed only, never the decoded pixels.
    """
    h, w = rgb.shape[:2]
    if h == 0 or w == 0:
        raise ValueError(f"cannot write an empty {w}×{h} image as PNG")
    bpp = 3 if alpha is None else 4
    stride = w * bpp
    band = max(1, band_bytes // stride)
    starts = list(range(0, h, band))

    def job(i: int) -> tuple[bytes, int, int]:  # (IDAT chunk, adler32 of the band's scanlines, their length)
        y0, y1 = starts[i], min(starts[i] + band, h)
        lo = max(0, y0 - 1)
        px = rgb[lo:y1] if alpha is None else np.dstack([rgb[lo:y1], alpha[lo:y1]])
        rows = np.ascontiguousarray(px).reshape(y1 - lo, stride)
        if y0 == 0:  # the first row's "row above" is zeros
            rows = np.concatenate([np.zeros((1, stride), np.uint8), rows])
        data = _filter_band(rows, bpp)
        comp = zlib.compressobj(1, zlib.DEFLATED, -15, 8, zlib.Z_RLE)  # filtered photos are mostly small residuals
        last = y1 == h
        body = comp.compress(data) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
        if y0 == 0:  # zlib header 0x78 0x01: deflate, 32 KiB window, "fastest" level (% 31 == 0)
            body = b"\x78\x01" + body
        return _chunk(b"IDAT", body), zlib.adler32(data), data.nbytes

    n_threads = min(workers or min(usable_cores(), 8), len(starts))
    if n_threads == 1:
        parts = [job(i) for i in range(len(starts))]
    else:
        with ThreadPoolExecutor(n_threads, thread_name_prefix="png", initializer=mark_call_worker) as pool:
            parts = list(pool.map(job, range(len(starts))))
    adler = 1
    for _, a, n in parts:
        adler = _adler32_combine(adler, a, n)
    colour_type = 2 if alpha is None else 6
    out = [_SIGNATURE, _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour_type, 0, 0, 0))]
    if icc_profile:
        out.append(_chunk(b"iCCP", b"ICC Profile\x00\x00" + zlib.compress(icc_profile)))
    if dpi:
        ppm = [max(1, round(v / 0.0254)) for v in dpi]  # pHYs unit 1: the metre
        out.append(_chunk(b"pHYs", struct.pack(">IIB", ppm[0], ppm[1], 1)))
    if exif:
        out.append(_chunk(b"eXIf", exif[6:] if exif.startswith(b"Exif\x00\x00") else exif))
    out += [idat for idat, _, _ in parts]
    # The stream's Adler-32 in an IDAT of its own (IDATs are one stream cut anywhere): no band is copied again.
    out += [_chunk(b"IDAT", struct.pack(">I", adler)), _chunk(b"IEND", b"")]
    return b"".join(out)
