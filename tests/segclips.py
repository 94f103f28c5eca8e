"""Clips for the segment tests: a keyframe every ``gop`` frames (no scene-cut keyframes), the frame's index
written into its top rows (so a frame can be told from its neighbours after H.264), optional AAC audio and
a still picture (a face) under it."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

STRIP = 8  # rows at the top that carry the frame index


def index_strip(i: int, w: int) -> np.ndarray:
    """The top rows for frame ``i`` (0…99): its tens then its units as greys 16 + 22·digit, 4 rows each,
    steps H.264 keeps apart after two encodes."""
    strip = np.empty((STRIP, w, 3), np.uint8)
    strip[:4] = 16 + 22 * ((i // 10) % 10)
    strip[4:] = 16 + 22 * (i % 10)
    return strip


def frame_index(rgb: np.ndarray) -> int:
    """Which frame this is, read back from its top rows."""
    tens = float(rgb[1:3, 4:-4].mean())
    units = float(rgb[5:7, 4:-4].mean())
    return 10 * int(round((tens - 16) / 22)) + int(round((units - 16) / 22))


def keyed_frames(n: int, base: np.ndarray) -> list[np.ndarray]:
    """``n`` frames of ``base`` (RGB) with their index in the top rows and a bar that moves 2 px a frame."""
    out = []
    for i in range(n):
        f = base.copy()
        f[:STRIP] = index_strip(i, f.shape[1])
        x = (2 * i) % (f.shape[1] - 4)
        f[-6:, x : x + 4] = 250
        out.append(f)
    return out


def write_clip(path: Path, frames: list[np.ndarray], *, fps: int = 25, gop: int = 25, audio: bool = True) -> Path:
    import av

    h, w = frames[0].shape[:2]
    out = av.open(str(path), "w")
    vs = out.add_stream("libx264", rate=fps, options={"crf": "14", "preset": "veryfast", "g": str(gop),
                                                        "keyint_min": str(gop), "sc_threshold": "0"})
    vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
    tb = Fraction(1, fps)
    a = None
    if audio:  # every stream before the first packet: MP4 writes its header once
        a = out.add_stream("aac", rate=16000)
        a.layout = "mono"
    for i, rgb in enumerate(frames):
        f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        f.pts, f.time_base = i, tb
        for p in vs.encode(f):
            out.mux(p)
    for p in vs.encode():
        out.mux(p)
    if a is not None:
        n = int(16000 * len(frames) / fps)
        tone = (np.sin(np.arange(n) * 2 * np.pi * 440 / 16000) * 0.25).astype(np.float32)
        for k in range(0, n, 1024):
            af = av.AudioFrame.from_ndarray(tone[None, k : k + 1024], format="fltp", layout="mono")
            af.sample_rate, af.pts = 16000, k
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode():
            out.mux(p)
    out.close()
    return path


def keyframe_times(path: Path) -> list[Fraction]:
    import av

    with av.open(str(path)) as c:
        vs = c.streams.video[0]
        return sorted(p.pts * vs.time_base for p in c.demux(vs) if p.size and p.is_keyframe)
