"""Clips made to lie: headers edited after writing, frames of another size than declared, timestamps that go
back, streams an MP4 cannot take. Each is small and made in well under a second."""

from __future__ import annotations

import io
import struct
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np


def jpeg(w: int, h: int, grey: int = 120) -> bytes:
    """A flat JPEG of w×h (a few KB whatever its size: a bomb costs the decoder, not the file)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (grey, grey, grey)).save(buf, "JPEG", quality=40)
    return buf.getvalue()


def mjpeg_clip(path: Path, header: tuple[int, int], frames: Sequence[bytes], pts: Sequence[int] | None = None,
               time_base: Fraction = Fraction(1, 25)) -> Path:
    """A Matroska clip whose stream header declares ``header`` (width, height) and whose packets are the JPEGs
    ``frames`` as they are (any size), at ``pts`` in ``time_base`` (default 0, 1, 2…)."""
    import av

    with av.open(str(path), "w", format="matroska") as out:
        s = out.add_stream("mjpeg", rate=Fraction(1) / time_base)
        s.width, s.height, s.pix_fmt = header[0], header[1], "yuvj420p"
        s.codec_context.time_base = time_base
        for i, data in enumerate(frames):
            p = av.Packet(data)
            p.stream = s
            p.time_base = time_base
            p.dts = i  # in file order; Matroska keeps each block's pts, which the decoder hands back in that order
            p.pts = i if pts is None else pts[i]
            out.mux(p)
    return path


def patch_mp4_durations(path: Path, ticks: int = 1) -> Path:
    """Every duration an MP4's headers declare (mvhd, tkhd, mdhd) set to ``ticks``; the frames are untouched."""
    data = bytearray(path.read_bytes())
    # Offsets of the 32-bit duration from the box type, version 0 (what FFmpeg writes for short clips).
    for box, offset in ((b"mvhd", 20), (b"tkhd", 24), (b"mdhd", 20)):
        at = data.find(box)
        while at != -1:
            assert data[at + 4] == 0, f"{box!r} version 1"
            data[at + offset:at + offset + 4] = struct.pack(">I", ticks)
            at = data.find(box, at + 4)
    path.write_bytes(bytes(data))
    return path


def two_video_streams(path: Path, frames: list[np.ndarray]) -> Path:
    """A Matroska file with two H.264 video streams of the same frames."""
    import av

    h, w = frames[0].shape[:2]
    with av.open(str(path), "w", format="matroska") as out:
        streams = []
        for _ in range(2):
            s = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
            streams.append(s)
        for i, rgb in enumerate(frames):
            for s in streams:
                f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                f.pts = i
                out.mux(s.encode(f))
        for s in streams:
            out.mux(s.encode())
    return path


def hdr10_clip(path: Path, frames: list[np.ndarray]) -> Path:
    """10-bit H.264 tagged BT.2020 primaries and matrix, PQ transfer (an HDR10 phone clip's tags)."""
    import av

    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        s.width, s.height, s.pix_fmt = w, h, "yuv420p10le"
        cc = s.codec_context
        cc.color_primaries, cc.color_trc, cc.colorspace, cc.color_range = 9, 16, 9, 1
        for i, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p10le", dst_colorspace=9)
            f.pts = i
            out.mux(s.encode(f))
        out.mux(s.encode())
    return path


def pcm_clip(path: Path, frames: list[np.ndarray], channels: int, rate: int) -> Path:
    """H.264 frames and a silent PCM s16 track of ``channels`` at ``rate`` Hz, in Matroska."""
    import av

    h, w = frames[0].shape[:2]
    with av.open(str(path), "w", format="matroska") as out:
        v = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        a = out.add_stream("pcm_s16le", rate=rate)
        a.layout = f"{channels}c" if channels > 2 else {1: "mono", 2: "stereo"}[channels]
        for i, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            f.pts = i
            out.mux(v.encode(f))
        out.mux(v.encode())
        n = rate * len(frames) // 25
        af = av.AudioFrame.from_ndarray(np.zeros((1, n * channels), np.int16), format="s16", layout=a.layout)
        af.sample_rate, af.pts = rate, 0
        out.mux(a.encode(af))
        out.mux(a.encode())
    return path
