"""Small clips the video tests write themselves with PyAV (no files checked in, nothing downloaded): one
clip maker (:func:`make_clip`), and for the segment tests frames that carry their own index (so a frame
can be told from its neighbours after H.264) in a clip with a keyframe every ``gop`` frames."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np


def gradient_frames(n: int, w: int = 64, h: int = 48) -> list[np.ndarray]:
    """``n`` distinct RGB frames: a moving gradient with the frame number in the red channel."""
    yy, xx = np.mgrid[0:h, 0:w]
    return [np.stack([np.full((h, w), (i * 37) % 256), (xx * 4 + i) % 256, (yy * 5) % 256], -1).astype(np.uint8) for i in range(n)]


def make_clip(
    path: Path,
    frames: Iterable[np.ndarray],
    *,
    pts: Sequence[int] | None = None,
    time_base: Fraction = Fraction(1, 25),
    audio: str | None = None,
    audio_seconds: float = 1.0,
    rotation: int = 0,
    colour: tuple[int, int, int, int] | None = None,
    crf: int = 18,
    container: str | None = None,
    gop: int | None = None,
    preset: str = "ultrafast",
) -> Path:
    """Write ``frames`` (RGB uint8) as H.264 into ``path`` (its suffix picks the container).

    ``pts``: each frame's timestamp in ``time_base`` (default 0, 1, 2…: constant rate).
    ``audio``: None, "aac" or "pcm_s16le" (a 440 Hz tone of ``audio_seconds``).
    ``rotation``: the display matrix's rotation (degrees counter-clockwise). ``colour``:
    (primaries, transfer, matrix, range) tags as FFmpeg numbers. ``container``: FFmpeg's format name
    when the suffix does not say it ("mp4" for a video named clip.bin). ``gop``: a keyframe every ``gop``
    frames and no others (no scene-cut keyframes); None: x264's own choice.
    """
    import av

    frames = list(frames)
    h, w = frames[0].shape[:2]
    out = av.open(str(path), "w", format=container)
    rate = Fraction(1, 1) / time_base if pts is None else None
    options = {"crf": str(crf), "preset": preset}
    if gop is not None:
        options |= {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"}
    vs = out.add_stream("libx264", rate=rate or 25, options=options)
    vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
    vs.time_base = time_base
    vs.codec_context.time_base = time_base
    if rotation:
        vs.set_display_rotation(rotation)
    if colour is not None:
        cc = vs.codec_context
        cc.color_primaries, cc.color_trc, cc.colorspace, cc.color_range = colour
    a = None
    if audio is not None:  # every stream before the first packet: MP4 writes its header once
        a = out.add_stream(audio, rate=16000)
        a.layout = "mono"
    for i, rgb in enumerate(frames):
        f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        if colour is not None:
            f = f.reformat(format="yuv420p", dst_colorspace=colour[2] if colour[2] in (1, 5, 9) else None,
                           dst_color_range=colour[3])
            f.colorspace, f.color_range = colour[2], colour[3]
        f.pts = i if pts is None else pts[i]
        f.time_base = time_base
        for p in vs.encode(f):
            out.mux(p)
    for p in vs.encode():
        out.mux(p)
    if a is not None:
        n = int(16000 * audio_seconds)
        tone = (np.sin(np.arange(n) * 2 * np.pi * 440 / 16000) * 8000).astype(np.int16)
        fmt = "s16" if audio == "pcm_s16le" else "fltp"
        for k in range(0, n, 1024):
            chunk = tone[k : k + 1024]
            data = chunk[None, :] if fmt == "s16" else (chunk.astype(np.float32) / 32768)[None, :]
            af = av.AudioFrame.from_ndarray(data, format=fmt, layout="mono")
            af.sample_rate, af.pts = 16000, k
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode():
            out.mux(p)
    out.close()
    return path


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


def keyed_clip(path: Path, frames: list[np.ndarray], *, fps: int = 25, gop: int = 25, audio: bool = True) -> Path:
    """:func:`make_clip` as the segment tests want it: a keyframe every ``gop`` frames, AAC as long as the
    video, and crf 14 (veryfast), at which the index rows stay readable after the restore's second encode."""
    return make_clip(path, frames, time_base=Fraction(1, fps), audio="aac" if audio else None,
                     audio_seconds=len(frames) / fps, crf=14, gop=gop, preset="veryfast")


def keyframe_times(path: Path) -> list[Fraction]:
    """The keyframes' times (seconds) in ``path``'s first video stream, as the container stores them."""
    import av

    with av.open(str(path)) as c:
        vs = c.streams.video[0]
        return sorted(p.pts * vs.time_base for p in c.demux(vs) if p.size and p.is_keyframe)


def read_clip(path: Path) -> dict:
    """What the tests compare: video frame times (Fraction seconds), RGB frames as displayed by FFmpeg's
    decoder (not turned), each stream's codec, the audio packets' bytes and timestamps, rotation, colour."""
    import av

    with av.open(str(path)) as c:
        vs = c.streams.video[0]
        streams = [(s.type, s.codec_context.name) for s in c.streams]
        audio = []
        times, frames, rotations, colours = [], [], [], []
        for packet in c.demux():
            if packet.stream.type == "audio" and packet.size:
                audio.append((bytes(packet), packet.pts * packet.time_base, packet.duration))
            elif packet.stream.type == "video":
                for f in packet.decode():
                    times.append(f.pts * f.time_base)
                    frames.append(f.to_ndarray(format="rgb24"))
                    rotations.append(f.rotation)
                    colours.append((int(f.color_primaries), int(f.color_trc), int(f.colorspace), int(f.color_range)))
        size = (vs.codec_context.width, vs.codec_context.height)
    return {"times": times, "frames": frames, "streams": streams, "audio": audio, "rotations": rotations,
            "colours": colours, "size": size}
