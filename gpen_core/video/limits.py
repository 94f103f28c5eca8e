"""What a clip may cost, judged by what decodes, not by what its header claims (a header is easy to edit):
:class:`ClipCap`, :class:`FrameGuard` (each frame before its pixels are converted), audio an MP4 cannot take."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpen_core.errors import InputError
from gpen_core.images.limits import DEFAULT_LIMITS

# Audio codecs an MP4 takes as they are (copied packet for packet); others are re-encoded to AAC.
MP4_AUDIO = frozenset({"aac", "mp3", "mp2", "ac3", "eac3", "opus", "flac", "alac"})
# A capped clip's frames per capped second: 60 fps clips pass whole; 10 000 frames crammed into a second stop at 60.
CAP_FPS = 60
# What FFmpeg's AAC encoder takes: up to 8 channels (7.1) and these sample rates (its MPEG-4 table).
AAC_MAX_CHANNELS = 8
AAC_RATES = frozenset({7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000})
NO_AUDIO_FIX = "restore it with --no-audio (the picture only; the notes say so), or convert its audio to AAC or stereo first"


@dataclass(frozen=True)
class ClipCap:
    """A server's limit on one clip: at most ``seconds`` of decoded time and ``frames`` decoded frames;
    ``reason`` names the limit in the note."""

    seconds: float
    frames: int
    reason: str

    @classmethod
    def of_seconds(cls, seconds: float, reason: str) -> "ClipCap":
        """The cap for ``seconds``, with :data:`CAP_FPS` frames for each of them."""
        return cls(float(seconds), max(1, math.ceil(seconds * CAP_FPS)), reason)

    def text(self) -> str:
        return f"{self.seconds:g} s and {self.frames} frames of a clip, counted as they decode"


def check_frame_pixels(path: str, what: str, size: tuple[int, int], claim: str = "") -> None:
    """InputError when a frame of ``size`` is over the photos' pixel limit; ``what`` names the frame ("its frames
    are", "frame 3 decodes at"), ``claim`` adds what the header said when it differs."""
    w, h = size
    if w * h > DEFAULT_LIMITS.max_pixels:
        raise InputError(f"{path}: {what} {w}×{h} ({w * h / 1e6:.1f} megapixels); the limit is "
                         f"{DEFAULT_LIMITS.max_pixels / 1e6:.0f} megapixels a frame, as for photos{claim}. "
                         "Scale the video down and try again.")


class FrameGuard:
    """Checks each decoded frame of one clip before its pixels are converted: under the photo limits, the
    first frame's size, timed after the previous frame."""

    def __init__(self, path: str, header: tuple[int, int]) -> None:
        self.path, self.header = path, header
        self.size: tuple[int, int] | None = None  # the first frame's, stored (before rotation)
        self.last_pts: int | None = None
        self.index = 0
        self.notes: list[str] = []

    def check(self, frame: Any, pts: int | None, time_base: Any) -> None:
        """InputError when this decoded frame is too big, another size, or timed before the last."""
        size = (int(frame.width), int(frame.height))
        claim = f" (its header claims {self.header[0]}×{self.header[1]})" if self.header != size else ""
        check_frame_pixels(self.path, f"frame {self.index} decodes at", size, claim)
        if self.size is None:
            self.size = size
            if size != self.header:
                self.notes.append(f"the file's header says {self.header[0]}×{self.header[1]} but its frames decode at "
                                  f"{size[0]}×{size[1]}: restored and written at {size[0]}×{size[1]}")
        elif size != self.size:
            raise InputError(f"{self.path}: frame {self.index} is {size[0]}×{size[1]} where the frames before it "
                             f"are {self.size[0]}×{self.size[1]}: a clip that changes size mid-way is not restored. "
                             "Re-export it at one size (e.g. ffmpeg -i IN -vf scale=W:H OUT.mp4) and try again.")
        if pts is not None and self.last_pts is not None and pts <= self.last_pts:
            raise InputError(f"{self.path}: frame {self.index}'s timestamp ({_seconds(pts, time_base)}) is not "
                             f"after the frame before it ({_seconds(self.last_pts, time_base)}): the file's timing is "
                             "broken, and no frame was restored past it. Re-export it (e.g. ffmpeg -i IN -vf "
                             "setpts=N/FRAME_RATE/TB OUT.mp4) and try again.")
        if pts is not None:
            self.last_pts = pts
        self.index += 1


def _seconds(pts: int, time_base: Any) -> str:
    return f"{float(pts * time_base):.6g} s" if time_base else f"pts {pts}"


def aac_settings(cc: Any) -> tuple[int, int, str]:
    """(channels, sample rate, layout) of the AAC stream that re-encodes codec context ``cc``'s audio. The layout
    goes by channel count: a PCM track's may be "2 channels" with no order, which AAC refuses."""
    channels = cc.channels or 2
    return channels, cc.sample_rate or 48000, {1: "mono", 2: "stereo"}.get(channels, f"{channels}c")


def audio_problem(stream: Any) -> str:
    """Why the audio ``stream`` cannot reach an MP4 ("" when it can): a codec MP4 does not take is
    re-encoded to AAC, whose encoder is opened here as the writer will open it."""
    import av

    cc = stream.codec_context
    if cc.name in MP4_AUDIO:
        return ""
    channels, rate, layout = aac_settings(cc)
    aac = av.CodecContext.create("aac", "w")
    aac.sample_rate, aac.format, aac.layout = rate, "fltp", layout
    try:
        aac.open()
        return ""
    except (av.FFmpegError, ValueError) as exc:
        detail = str(exc).strip() or type(exc).__name__
    if channels > AAC_MAX_CHANNELS:
        why = f"{channels} channels (AAC, the MP4's audio, takes at most {AAC_MAX_CHANNELS})"
    elif rate not in AAC_RATES:
        why = f"{rate / 1000:g} kHz (AAC, the MP4's audio, takes at most 96 kHz, at its standard rates)"
    else:
        why = f"{channels} channels at {rate / 1000:g} kHz, which the AAC encoder refuses ({detail})"
    return f"its audio stream {stream.index} ({cc.name}) has {why}, so it cannot go into the MP4: {NO_AUDIO_FIX}"
