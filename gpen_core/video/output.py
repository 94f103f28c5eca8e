"""The output file: H.264 yuv420p MP4 under a temporary name beside the output, renamed onto it only when complete."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.images.outputs import check_output_file
from gpen_core.video.frames import Colour, to_yuv
from gpen_core.video.limits import MP4_AUDIO, aac_settings
from gpen_core.video.result import AudioHandling

VIDEO_SUFFIXES = (".mp4", ".m4v")
# x264's speed/size trade: its default.
X264_PRESET = "medium"
# Frames x264 looks ahead for rate control: its default 40 holds ~90 MiB more at 720p for a little compression
# (measured: docs/video.md, "What is held at once").
X264_LOOKAHEAD = 10


def check_output(dst: Path, src: str | os.PathLike[str]) -> None:
    """InputError for an output that cannot or may not be written: not .mp4, its folder missing or read-only, a
    device/FIFO/folder, or ``src`` itself by any link (one rule with photos)."""
    if dst.suffix.lower() not in VIDEO_SUFFIXES:
        raise InputError(f"a restored video is an H.264 MP4: name the output {dst.with_suffix('.mp4').name}, not {dst.name}")
    if not dst.parent.is_dir():
        raise InputError(f"the output folder {dst.parent} does not exist: create it, or choose another output path")
    check_output_file(dst, [Path(src)])


# What a full disk, a quota, a read-only remount or a failing disk raise while a file is written.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM})


class WriteFailed(InputError):
    """Writing a video file failed: the disk full, read-only or gone, or the encoder refused."""


def write_failed(folder: Path, what: str, exc: BaseException) -> WriteFailed:
    """The one message for a write refused, on every video path."""
    detail = getattr(exc, "strerror", None) or str(exc).strip() or type(exc).__name__
    return WriteFailed(f"writing {what} failed ({detail}): check that the output folder {folder} is writable and its "
                       "disk has space, and try again")


@contextmanager
def disk_errors(folder: Path, what: str) -> Iterator[None]:
    """The disk refusing a write (PyAV's av.error.OSError carries its errno) as :func:`write_failed`; others pass."""
    try:
        yield
    except OSError as exc:
        if getattr(exc, "errno", None) not in DISK_ERRNOS:
            raise
        raise write_failed(folder, what, exc) from None


@dataclass
class AudioRoute:
    """One input audio stream's way into the output: ``copy`` (packets as they are) or re-encoded to AAC."""

    source: Any  # input av stream
    out: Any  # output av stream
    copy: bool

    def mux(self, out: Any, item: Any) -> None:
        """A packet (copied; already shifted) or, re-encoded, a decoded audio frame into ``out``."""
        if self.copy:
            item.stream = self.out
            out.mux(item)
            return
        item.pts = None  # the AAC encoder times its own frames from the sample count
        for p in self.out.encode(item):
            out.mux(p)


def add_audio(out: Any, sources: list[Any]) -> list[AudioRoute]:
    """An output stream per input audio stream: copied when MP4 takes its codec, else AAC (the notes say so)."""
    routes = []
    for s in sources:
        if s.codec_context.name in MP4_AUDIO:
            routes.append(AudioRoute(s, out.add_stream_from_template(s), True))
        else:
            _, rate, layout = aac_settings(s.codec_context)
            routes.append(AudioRoute(s, out.add_stream("aac", rate=rate, layout=layout), False))
    return routes


@dataclass(frozen=True)
class AudioOutcome:
    """How the input's audio reached the output."""

    handling: AudioHandling  # as ``VideoResult.audio``
    notes: tuple[str, ...]  # one per re-encoded stream

    @classmethod
    def of(cls, routes: list[AudioRoute]) -> "AudioOutcome":
        """Read while the input's streams are open."""
        handling = "none" if not routes else "copied" if all(r.copy for r in routes) else "re-encoded"
        return cls(handling, tuple(f"audio stream {r.source.index} ({r.source.codec_context.name}) cannot go into an "
                                   "MP4 as it is: re-encoded to AAC" for r in routes if not r.copy))


def flush(out: Any, streams: list[Any]) -> None:
    """The encoders' last packets into ``out`` (call once every frame is in)."""
    for s in streams:
        for p in s.encode():
            out.mux(p)


class VideoWriter:
    """The encoder side, used by one thread: frames (upright RGB) and audio in, an MP4 out. The video stream
    is made at the first frame; audio before it waits, since MP4 writes its header once every stream exists."""

    def __init__(self, out: Any, routes: list[AudioRoute], crf: int, time_base: Any, rate: Any) -> None:
        import av

        self.out, self.routes, self.crf, self.time_base, self.rate = out, routes, crf, time_base, rate
        self.stream: Any = None
        self.colour = Colour()
        self.waiting: list[tuple[AudioRoute, Any]] = []
        self.reformatter = av.video.reformatter.VideoReformatter()
        self.frames = 0
        self.closed = False

    def _open_video(self, rgb: Any, colour: Colour) -> None:
        h, w = rgb.shape[:2]
        s = self.out.add_stream("libx264", rate=self.rate or 25, options={
            "crf": str(self.crf), "preset": X264_PRESET, "rc-lookahead": str(X264_LOOKAHEAD)})
        s.width, s.height, s.pix_fmt = w + w % 2, h + h % 2, "yuv420p"
        s.time_base = self.time_base
        cc = s.codec_context
        cc.time_base = self.time_base
        cc.color_primaries, cc.color_trc, cc.colorspace = colour.primaries, colour.transfer, colour.matrix
        cc.color_range = colour.range
        self.stream, self.colour = s, colour
        for item in self.waiting:
            self.audio(*item)
        self.waiting = []

    def _disk(self) -> Any:
        return disk_errors(Path(self.out.name).parent, f"the video at frame {self.frames}")

    def frame(self, rgb: Any, pts: int, colour: Colour) -> None:
        if self.stream is None:
            self._open_video(rgb, colour)
        f = to_yuv(rgb, self.colour, self.reformatter)
        f.pts, f.time_base = pts, self.time_base
        with self._disk():
            for p in self.stream.encode(f):
                self.out.mux(p)
        self.frames += 1

    def audio(self, route: AudioRoute, item: Any) -> None:
        """A packet (a copied route's, already shifted) or a decoded frame (re-encoded) of one of :attr:`routes`."""
        if self.stream is None:
            self.waiting.append((route, item))
            return
        with self._disk():
            route.mux(self.out, item)

    def close(self) -> None:
        """Flush the encoders and write the MP4's index; WriteFailed when the disk refuses (on a nearly full
        disk, often only here)."""
        with self._disk():
            if self.stream is not None:
                flush(self.out, [self.stream, *(r.out for r in self.routes if not r.copy)])
            self.out.close()
        self.closed = True
