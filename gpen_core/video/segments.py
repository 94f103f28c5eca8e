"""A long clip cut at its keyframes into segments, and the plan that lets a killed run resume (checked on reading
by :mod:`gpen_core.video.plan_file`). docs/video-segments.md, "Cut, restore, join"."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.video.probe import open_video

PLAN = "plan.json"
PLAN_VERSION = 2  # 2: the input's fingerprint and each finished segment's hash
FINGERPRINT_BYTES = 1 << 20
# Frames decoded and steadied either side of a segment but not written: the Steadier's look-ahead.
OVERLAP_FRAMES = 3
DEFAULT_SEGMENT_SECONDS = 10.0


@dataclass(frozen=True)
class Segment:
    """Frames ``[start_pts, end_pts)`` of the input (its video time base); ``end_pts`` None: to the clip's end."""

    index: int
    start_pts: int
    end_pts: int | None
    context_pts: int  # first frame decoded (start minus the overlap): steadies, is not written
    tail_pts: int | None  # first frame not decoded any more (end plus the overlap); None: the clip's end
    frames: int  # frames written
    first_frame: int  # index of the segment's first frame in the whole clip
    start_s: float  # its first frame's time from the clip's first frame

    @property
    def file(self) -> str:
        return f"seg-{self.index:05d}.mp4"

    def owns(self, pts: int) -> bool:
        """Whether this segment writes the frame at ``pts`` (not one of the context or tail frames it only decodes)."""
        return self.start_pts <= pts and (self.end_pts is None or pts < self.end_pts)


_SEGMENT_FILE = re.compile(r"seg-(\d{5})\.mp4")


def segment_index(name: str) -> int | None:
    """The index of the segment whose :attr:`Segment.file` is ``name``; None for any other name."""
    m = _SEGMENT_FILE.fullmatch(name)
    return int(m.group(1)) if m else None


def finished_segments(folder: Path) -> int:
    """How many segment files (by name, files only) lie in the work folder ``folder``; 0 when there is none."""
    try:
        return sum(segment_index(p.name) is not None and p.is_file() for p in folder.iterdir())
    except OSError:  # no work folder yet
        return 0


@dataclass(frozen=True)
class FinishedFile:
    """A segment file as this run wrote it: a resume keeps the file only while it is still these bytes."""

    index: int
    bytes: int
    sha256: str
    # Its frames' Tally (engine_seam), so a resumed run's notes count the kept frames too; None: not recorded (a
    # plan written before it was, or a stand-in engine's). Not part of what the file is, so not compared.
    tally: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class SegmentPlan:
    """Where a clip is cut, what it was made from (a resumed run checks these), and which segments are done.
    Untrusted when read back: :func:`gpen_core.video.plan_file.load_plan` validates every field."""

    input: str
    input_bytes: int
    input_mtime_ns: int
    # sha256 of the input's first and last MiB: other content at the same size and time shows here.
    input_head_sha256: str
    input_tail_sha256: str
    settings: str  # what the output depends on besides the input (options, crf): JSON text
    segment_seconds: float
    time_base: str  # "1/12800"
    frames: int
    duration_s: float
    segments: tuple[Segment, ...] = field(default_factory=tuple)
    finished: tuple[FinishedFile, ...] = ()  # each finished segment's size and hash, recorded as it finishes
    version: int = PLAN_VERSION

    @property
    def tb(self) -> Fraction:
        return Fraction(self.time_base)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def work_folder(dst: Path) -> Path:
    """The segments' folder: hidden, beside the output (same disk, so each rename is atomic)."""
    return dst.with_name(f".{dst.name}.segments")


def scan_frames(container: Any) -> tuple[list[int], list[int]]:
    """(every video frame's pts in presentation order, the keyframes' pts), from the packets alone."""
    vs = container.streams.video[0]
    pts: list[int] = []
    keys: list[int] = []
    for packet in container.demux(vs):
        if packet.size == 0:  # the demuxer's flush packet
            continue
        if packet.pts is None:
            raise InputError("the video's packets carry no timestamps (an old AVI?), so it cannot be cut into "
                             "segments: restore it without --segments, or remux it to MP4 first "
                             "(ffmpeg -i IN -c copy OUT.mp4)")
        pts.append(packet.pts)
        if packet.is_keyframe:
            keys.append(packet.pts)
    pts.sort()
    return pts, sorted(set(keys))


def cut_points(pts: list[int], keys: list[int], tb: Fraction, segment_seconds: float) -> list[int]:
    """Indices into ``pts`` where segments start: 0, then the keyframe nearest each next multiple of the
    length (one long GOP: fewer, longer segments)."""
    if segment_seconds <= 0:
        raise InputError(f"--segment-seconds must be more than 0, got {segment_seconds:g}")
    index = {p: i for i, p in enumerate(pts)}
    key_idx = sorted(index[k] for k in keys if k in index and index[k] > 0)
    times = {k: float((pts[k] - pts[0]) * tb) for k in key_idx}
    starts = [0]
    target = segment_seconds
    end = float((pts[-1] - pts[0]) * tb)
    while True:
        after = next((k for k in key_idx if times[k] >= target), None)
        before = [k for k in key_idx if k > starts[-1] and times[k] < target]
        t_after = times[after] if after is not None else end  # no keyframe after: the clip's end is the other choice
        if before and target - times[before[-1]] < t_after - target:
            pick = before[-1]
        elif after is not None:
            pick = after
        else:
            break
        starts.append(pick)
        target = times[pick] + segment_seconds
    return starts


def plan_segments(src: str | os.PathLike[str], segment_seconds: float, settings: str) -> SegmentPlan:
    """Read the clip's packets and cut it (see the module doc). InputError for a clip that cannot be cut."""
    src_s = os.path.abspath(os.fspath(src))
    st = os.stat(src_s)
    with open_video(src_s)[0] as container:  # refused by its headers as one pass is
        vs = container.streams.video[0]
        tb, rate = vs.time_base, vs.average_rate or vs.guessed_rate
        pts, keys = scan_frames(container)
    if not pts:
        raise InputError(f"{src_s} has no video frames to restore: it is empty or damaged from its start")
    starts = cut_points(pts, keys, Fraction(tb), segment_seconds)
    n = len(pts)
    # one frame lasts a period of the stream's rate (0 when none is known: no made-up figure), not one tick
    step = pts[1] - pts[0] if n > 1 else round(1 / (rate * Fraction(tb))) if rate else 0
    segs = []
    for i, (a, b) in enumerate(zip(starts, [*starts[1:], n])):
        tail = b + OVERLAP_FRAMES
        segs.append(Segment(
            index=i, start_pts=pts[a], end_pts=pts[b] if b < n else None,
            context_pts=pts[max(0, a - OVERLAP_FRAMES)], tail_pts=pts[tail] if tail < n else None,
            frames=b - a, first_frame=a, start_s=float((pts[a] - pts[0]) * tb),
        ))
    duration = float((pts[-1] - pts[0] + step) * tb)
    head, tail = input_fingerprint(src_s)
    return SegmentPlan(input=src_s, input_bytes=st.st_size, input_mtime_ns=st.st_mtime_ns, input_head_sha256=head,
                       input_tail_sha256=tail, settings=settings,
                       segment_seconds=segment_seconds, time_base=str(tb), frames=n, duration_s=duration,
                       segments=tuple(segs))


def input_fingerprint(src: str) -> tuple[str, str]:
    """sha256 of the file's first and last MiB (hex): cheap at any length, and where a container keeps
    its header and index, so other content of the same size almost surely differs."""
    with open(src, "rb") as f:
        head = hashlib.sha256(f.read(FINGERPRINT_BYTES)).hexdigest()
        f.seek(max(0, os.fstat(f.fileno()).st_size - FINGERPRINT_BYTES))
        tail = hashlib.sha256(f.read(FINGERPRINT_BYTES)).hexdigest()
    return head, tail
