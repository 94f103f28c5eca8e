"""What a file is before any frame is decoded: a video by its bytes, then its streams, refused with a fix when unusable."""

from __future__ import annotations

import functools
import math
import os
from bisect import bisect_left
from dataclasses import dataclass, replace
from typing import Any

from gpen_core.errors import InputError
from gpen_core.images.limits import looks_like_video
from gpen_core.video.limits import ClipCap, audio_problem, check_frame_pixels


# Counting a clip's frames reads its packets (nothing decoded) up to these, then estimates the rest at the read
# part's rate (measured: docs/video.md, "The frame count before the first frame").
COUNT_PACKETS = 18_000  # 10 minutes at 30 fps
COUNT_BYTES = 256 * 2**20


@dataclass(frozen=True)
class PacketTimes:
    """A clip's video packet times (one a frame), in seconds from the stream's start, sorted; ``complete`` False
    where reading stopped at :data:`COUNT_PACKETS` or :data:`COUNT_BYTES`."""

    times: tuple[float, ...]
    complete: bool

    def between(self, start: float, end: float | None, duration: float | None) -> int:
        """The frames from ``start`` (in) to ``end`` (out; None: the clip's end) as the decoder keeps them; past an
        incomplete count, frames at the counted ones' average rate until ``end`` or ``duration`` (neither: 0, unknown)."""
        t = self.times
        lo = bisect_left(t, start - 1e-6)
        n = (bisect_left(t, end - 1e-9) if end is not None else len(t)) - lo
        if self.complete:
            return max(0, n)
        stop = min((x for x in (end, duration) if x is not None), default=None)
        if stop is None or len(t) < 2 or t[-1] <= t[0]:
            return 0
        rate, last = (len(t) - 1) / (t[-1] - t[0]), t[-1]
        # the frames after the last counted one, on its grid: last + k / rate, from start, before stop
        first_k = max(1, math.ceil((start - last) * rate - 1e-6))
        return max(0, n) + max(0, math.ceil((stop - last) * rate - 1e-6) - first_k)


@dataclass(frozen=True)
class ClipInfo:
    """The video stream of an opened clip. ``size``: stored width, height (rotation is each decoded frame's);
    ``frames``: as declared (0: unknown); ``packets``: read from the file where no count is declared and the
    opener asked (:func:`open_video` with ``count``), else None."""

    size: tuple[int, int]
    frames: int
    duration_s: float | None
    rate: Any  # fractions.Fraction or None: the guessed average rate, a hint for the encoder only
    time_base: Any  # fractions.Fraction
    codec: str
    packets: PacketTimes | None = None


def expected_frames(info: ClipInfo, start_s: float | None = None, end_s: float | None = None,
                    cap: ClipCap | None = None) -> int:
    """The frames a restore from ``start_s`` to ``end_s`` (at most ``cap``) writes: the declared count for the whole
    clip, else the packets counted in the part, else the span at the average rate; 0: unknown. An estimate:
    decoding decides, and a header can lie."""
    if info.packets is None:
        return _by_rate(info, start_s, end_s, cap)
    start = start_s or 0.0
    stop = end_s if cap is None else min(start + cap.seconds, math.inf if end_s is None else end_s)
    n = info.packets.between(start, stop, info.duration_s)
    return n if cap is None else min(n or cap.frames, cap.frames)


def _by_rate(info: ClipInfo, start_s: float | None, end_s: float | None, cap: ClipCap | None) -> int:
    """:func:`expected_frames` from the header alone; a variable-rate Matroska's average rate can be far off."""
    rate = float(info.rate) if info.rate else 0.0
    duration = info.duration_s or (info.frames / rate if rate else 0.0)
    start = start_s or 0.0

    def before(t: float) -> int:
        """Frames k / rate before ``t``. The decoder keeps start <= t < end: a part holds a difference of these (its
        length × rate, rounded, is one off where an end falls between two frames)."""
        return math.ceil(t * rate - 1e-6)

    # To the clip's end, the declared count less the frames before the start: a duration a fraction of a frame past
    # the last one (audio, a container's rounding) would count one more.
    n = max(0, info.frames - before(start)) if end_s is None and info.frames and (rate or start_s is None) else 0
    if not n and rate and duration:
        n = max(0, before(duration if end_s is None else min(end_s, duration)) - before(start))
    if cap is not None:
        by_time = before(start + cap.seconds) - before(start) if rate else cap.frames
        n = min(x for x in (n or cap.frames, cap.frames, by_time) if x > 0)
    return n


def count_packets(path: str) -> PacketTimes | None:
    """The file's video packets up to :data:`COUNT_PACKETS` and :data:`COUNT_BYTES`; None where they carry no
    timestamps or none reads. Cached per file as it is now: the app asks three times for one clip."""
    st = os.stat(path)
    return _count_packets(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _count_packets(path: str, size: int, mtime_ns: int) -> PacketTimes | None:
    """:func:`count_packets` of ``path`` while its size and mtime are these (a changed file is read again)."""
    import av

    times: list[float] = []
    complete, read = True, 0
    try:
        with av.open(path, "r", metadata_errors="ignore", options={"skip_frame": "all"}) as c:
            vs = c.streams.video[0]
            tb, first = float(vs.time_base), vs.start_time or 0
            for packet in c.demux(vs):
                if packet.size == 0:  # the demuxer's flush packet
                    continue
                if len(times) >= COUNT_PACKETS or read >= COUNT_BYTES:
                    complete = False
                    break
                ts = packet.pts if packet.pts is not None else packet.dts
                if ts is None:
                    return None
                times.append((ts - first) * tb)
                read += packet.size
    except (av.FFmpegError, OSError):
        pass  # damaged from here: the restore's decoding stops here too, so what was read is what it gets
    return PacketTimes(tuple(sorted(times)), complete) if times else None


def open_clip(path: str | os.PathLike[str]) -> Any:
    """The input container (``av.container.InputContainer``), or InputError saying what the file is instead."""
    import av

    p = os.fspath(path)
    if not os.path.isfile(p):
        raise InputError(f"The file {p!r} does not exist or is not a file. Check the path and try again.")
    with open(p, "rb") as f:
        head = f.read(512)
    if not looks_like_video(head):
        raise InputError(f"{p} is not a video (its bytes are no video container's: MP4, MOV, MKV, WebM, AVI, "
                         "MPEG-TS, FLV, Ogg). Restore photos as photos, or choose a video file.")
    try:
        _refuse_by_header(p)
        container = av.open(p, "r", metadata_errors="ignore")
    except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:
        why = (getattr(exc, "strerror", None) or str(exc)).strip() or type(exc).__name__
        raise InputError(f"{p} starts like a video but cannot be opened ({why}); it is probably truncated "
                         "or damaged. Re-export or re-download it and try again.") from None
    if not container.streams.video:
        container.close()
        raise InputError(f"{p} holds no video stream (audio or data only). Choose a file with a picture.")
    return container


def open_video(path: str | os.PathLike[str], count: bool = False) -> tuple[Any, ClipInfo]:
    """The one way a clip is opened: (its container, :class:`ClipInfo`), refused by its headers before any frame
    decodes; ``count``: packets counted where no frame count is declared. The caller closes the container."""
    container = open_clip(path)
    try:
        info = clip_info(container, os.fspath(path))
        if count and not info.frames:
            info = replace(info, packets=count_packets(os.fspath(path)))
        return container, info
    except BaseException:
        container.close()
        raise


def preflight(container: Any, path: str, audio: bool) -> list[str]:
    """Before any frame: InputError for audio an MP4 cannot take unless ``audio`` is off (found at the end, hours
    of work would be lost); else what the output cannot keep of the input's streams: extra video streams, HDR or
    more than 8 bits a sample (written 8-bit), the sound when ``audio`` is off."""
    import av

    for stream in container.streams.audio if audio else ():
        why = audio_problem(stream)
        if why:
            raise InputError(f"{path}: {why}")
    notes = []
    videos = container.streams.video
    if len(videos) > 1:
        notes.append(f"the file has {len(videos)} video streams: only the first (stream {videos[0].index}) was restored; "
                     f"the other{'s were' if len(videos) > 2 else ' was'} dropped (an MP4 here holds one picture)")
    cc = videos[0].codec_context
    try:
        bits = max(c.bits for c in av.VideoFormat(cc.pix_fmt).components) if cc.pix_fmt else 8
    except (ValueError, TypeError):
        bits = 8
    hdr = _HDR_TRANSFER.get(int(cc.color_trc or 2), "")
    if hdr:
        notes.append(f"the input is {bits}-bit HDR ({_PRIMARIES.get(int(cc.color_primaries or 2), 'unspecified primaries')}, "
                     f"{hdr}): written as 8-bit H.264 with the same HDR tags, not tone-mapped to SDR; smooth gradients "
                     "may band")
    elif bits > 8:
        notes.append(f"the input has {bits} bits a sample: written as 8-bit H.264 (yuv420p); smooth gradients may band")
    if not audio and container.streams.audio:
        notes.append(f"the sound was dropped, as asked (--no-audio): the output has no audio "
                     f"(the input has {len(container.streams.audio)} audio stream(s))")
    return notes


def clip_info(container: Any, path: str) -> ClipInfo:
    """The first video stream's :class:`ClipInfo`; InputError for no picture size or frames over the photo limit."""
    vs = container.streams.video[0]
    cc = vs.codec_context
    w, h = cc.width, cc.height
    if not w or not h:
        raise InputError(f"{path}: its video stream declares no picture size (damaged or zero frames). Re-export it and try again.")
    check_frame_pixels(path, "its frames are", (w, h))
    duration = float(vs.duration * vs.time_base) if vs.duration and vs.time_base else None
    if duration is None:
        duration = _tagged_duration(vs.metadata.get("DURATION", "") if vs.metadata else "")
    if duration is None and container.duration and not container.streams.audio:
        duration = container.duration / 1_000_000  # the file's: the video's only when nothing else is in it
    rate = vs.average_rate or vs.guessed_rate
    return ClipInfo((w, h), int(vs.frames or 0), duration, rate, vs.time_base, cc.name)


# FFmpeg's AVColorTransferCharacteristic and AVColorPrimaries numbers, as the notes name them.
_HDR_TRANSFER = {16: "PQ (SMPTE 2084)", 18: "HLG"}
_PRIMARIES = {1: "BT.709", 9: "BT.2020", 12: "Display P3"}


def _refuse_by_header(path: str) -> None:
    """InputError for a declared size over the limit, read with frames skipped: FFmpeg's stream-info probe decodes
    first frames (measured: docs/video.md, "Limits and failures: the clip"). A size only decoding tells is left to
    the open."""
    import av

    with av.open(path, "r", metadata_errors="ignore", options={"skip_frame": "all"}) as c:
        if c.streams.video:
            cc = c.streams.video[0].codec_context
            if cc.width and cc.height:
                check_frame_pixels(path, "its frames are", (cc.width, cc.height))


def _tagged_duration(tag: str) -> float | None:
    """Matroska's per-track DURATION tag ("00:00:10.040000000") in seconds, or None."""
    try:
        h, m, sec = tag.split(":")
        return int(h) * 3600 + int(m) * 60 + float(sec)
    except ValueError:
        return None
