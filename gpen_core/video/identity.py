"""Is it still the same person along the clip? :class:`IdentityTracker` compares each checked face's two dlib
descriptors (the photo check's, reused) with its track's previous checked frame's. docs/identity.md, "Along a clip"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpen_core.modes import IDENTITY_THRESHOLD, IDENTITY_THRESHOLD_TEXT

# How far the restored face may jump beyond the input's own jump before its frame is flagged: above a
# same-person stand-in's 0.151, far below another person's 0.655 (measured: docs/identity.md, "Along a clip").
JUMP_MARGIN = 0.25
# Frame numbers kept per track and list: a long clip's summary stays small (the counts are exact).
MAX_LISTED = 100


@dataclass(frozen=True)
class FaceCheck:
    """One face's identity in one checked frame (descriptor distances, dlib's 128-D space)."""

    distance: float  # restored face to this frame's own input face (the photo check's number)
    jump: float | None  # restored face to the track's restored face in the previous checked frame; None: none there
    input_jump: float | None  # the same for the input crops
    jumped: bool  # jump > input_jump + JUMP_MARGIN
    over_limit: bool  # distance over the clip's limit (the user's --identity-limit, else IDENTITY_THRESHOLD)

    def to_json(self) -> dict[str, Any]:
        r = (lambda v: None if v is None else round(v, 4))
        return {"distance": r(self.distance), "jump": r(self.jump), "input_jump": r(self.input_jump),
                "jumped": self.jumped, "over_limit": self.over_limit}


@dataclass(frozen=True)
class TrackIdentity:
    """One face (track) over the clip. Frame numbers are :attr:`FrameRecord.index` (0 = the first written)."""

    track: int  # as FrameRecord.faces numbers it (0: the first face seen; "face 1" to a user)
    segment: int | None  # the segment it was followed in (a segmented run numbers faces per segment); None: one pass
    checked: int  # frames of this face checked
    max_distance: float
    max_jump: float  # the largest restored jump beyond the input's (restored − input; may be negative)
    over_limit: tuple[int, ...]  # the first MAX_LISTED frames over the limit
    over_limit_count: int
    jumps: tuple[int, ...]  # the first MAX_LISTED frames whose restored jump was over the input's by the margin
    jumps_count: int

    def to_json(self) -> dict[str, Any]:
        return {"face": self.track + 1, "segment": self.segment, "checked": self.checked,
                "max_distance": round(self.max_distance, 4), "max_jump_over_input": round(self.max_jump, 4),
                "over_limit": {"count": self.over_limit_count, "frames": list(self.over_limit)},
                "jumps": {"count": self.jumps_count, "frames": list(self.jumps)}}


@dataclass(frozen=True)
class VideoIdentity:
    """The identity check of a whole clip: which frames were checked, and per track what it found."""

    every: int  # frames 0, every, 2·every… were checked (as numbered in the clip)
    limit: float  # the distance frames are counted over
    limit_is_users: bool  # the user's --identity-limit (False: IDENTITY_THRESHOLD)
    margin: float  # JUMP_MARGIN
    checked_frames: int  # frames with at least one face checked
    seconds: float  # the checks' time in all
    tracks: tuple[TrackIdentity, ...] = ()

    @property
    def jumps_count(self) -> int:
        return sum(t.jumps_count for t in self.tracks)

    @property
    def over_limit_count(self) -> int:
        return sum(t.over_limit_count for t in self.tracks)

    def to_json(self) -> dict[str, Any]:
        return {"every": self.every, "limit": self.limit,
                "limit_source": "your limit" if self.limit_is_users else IDENTITY_THRESHOLD_TEXT,
                "jump_margin": self.margin, "checked_frames": self.checked_frames, "seconds": round(self.seconds, 3),
                "jumps": self.jumps_count, "over_limit": self.over_limit_count,
                "tracks": [t.to_json() for t in self.tracks]}


def frames_text(frames: Sequence[int], count: int) -> str:
    """"3, 17, 40" (numbered from 1, as the app's frame slider), "… and 12 more" past the listed ones."""
    text = ", ".join(str(i + 1) for i in frames)
    return text + (f" … and {count - len(frames)} more" if count > len(frames) else "")


def ordinal(n: int) -> str:
    """2 → "2nd", 3 → "3rd", 11 → "11th"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def summary_lines(identity: VideoIdentity | None) -> list[str]:
    """The clip's identity summary in words, one line per face with findings (CLI, panel); [] when not checked."""
    if identity is None:
        return []
    which = "every frame" if identity.every == 1 else f"every {ordinal(identity.every)} frame (1, {1 + identity.every}, …)"
    limit = f"your limit {identity.limit:g}" if identity.limit_is_users else IDENTITY_THRESHOLD_TEXT
    # the counts are summed over the faces: two faces over the limit in one frame count 2
    lines = [f"identity: {which} checked ({identity.checked_frames} frames, {identity.seconds:.1f} s); counted per "
             f"face and frame: {identity.jumps_count} where a restored face jumped more than the input's own jump + "
             f"{identity.margin:g}, {identity.over_limit_count} over {limit}"]
    for t in identity.tracks:
        if not (t.jumps_count or t.over_limit_count):
            continue
        name = f"face {t.track + 1}" + (f" of segment {t.segment}" if t.segment is not None else "")
        parts = []
        if t.jumps_count:
            parts.append(f"jumped at frame(s) {frames_text(t.jumps, t.jumps_count)}")
        if t.over_limit_count:
            parts.append(f"over the limit at frame(s) {frames_text(t.over_limit, t.over_limit_count)}")
        lines.append(f"  {name}: {'; '.join(parts)} (largest distance {t.max_distance:.2f})")
    return lines


class IdentityTracker:
    """Per-track identity over a clip's frames, fed in written order (:meth:`add`), summed up by :meth:`result`.
    ``every``: check frames 0, every, 2·every…; ``limit`` None: IDENTITY_THRESHOLD; ``segment`` None: one pass."""

    def __init__(self, every: int = 1, limit: float | None = None, segment: int | None = None) -> None:
        self.every, self.segment = every, segment
        self.limit, self.limit_is_users = (limit, True) if limit is not None else (IDENTITY_THRESHOLD, False)
        self._tracks: dict[int, TrackIdentity] = {}  # max_jump -inf until a jump is measured
        self._last: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}  # (frame, input, restored descriptors)
        self.checked_frames = 0
        self.seconds = 0.0

    def wants(self, index: int) -> bool:
        return index % self.every == 0

    def add(self, index: int, tracks: Sequence[int], checks: Sequence[Any]) -> tuple[FaceCheck | None, ...]:
        """Frame ``index``'s faces: their ``tracks`` and each one's photo check (``IdentityCheck`` or None);
        one :class:`FaceCheck` (or None) per face."""
        out = tuple(None if check is None or check.descriptors is None else self._one(index, track, check)
                    for track, check in zip(tracks, checks))
        if any(c is not None for c in out):
            self.checked_frames += 1
        return out

    def _one(self, index: int, track: int, check: Any) -> FaceCheck:
        before, after = check.descriptors
        self.seconds += check.seconds
        t = self._tracks.get(track) or TrackIdentity(track, self.segment, 0, 0.0, -np.inf, (), 0, (), 0)
        last = self._last.get(track)
        jump = input_jump = None
        if last is not None and last[0] == index - self.every:  # the previous checked frame held this face too
            jump = float(np.linalg.norm(after - last[2]))
            input_jump = float(np.linalg.norm(before - last[1]))
        self._last[track] = (index, before, after)
        jumped = jump is not None and jump > input_jump + JUMP_MARGIN
        over = check.distance > self.limit
        self._tracks[track] = replace(
            t, checked=t.checked + 1, max_distance=max(t.max_distance, check.distance),
            max_jump=t.max_jump if jump is None else max(t.max_jump, jump - input_jump),
            over_limit=_listed(t.over_limit, index, over), over_limit_count=t.over_limit_count + int(over),
            jumps=_listed(t.jumps, index, jumped), jumps_count=t.jumps_count + int(jumped))
        return FaceCheck(float(check.distance), jump, input_jump, jumped, over)

    def result(self) -> VideoIdentity:
        tracks = tuple(replace(t, max_jump=t.max_jump if np.isfinite(t.max_jump) else 0.0)
                       for _, t in sorted(self._tracks.items()))
        return VideoIdentity(self.every, self.limit, self.limit_is_users, JUMP_MARGIN, self.checked_frames, self.seconds, tracks)


def _listed(frames: tuple[int, ...], index: int, flagged: bool) -> tuple[int, ...]:
    """``frames`` with ``index`` added when ``flagged``, up to :data:`MAX_LISTED` (the count goes on)."""
    return (*frames, index) if flagged and len(frames) < MAX_LISTED else frames


def merged(parts: Sequence[VideoIdentity | None]) -> VideoIdentity | None:
    """The segments' identity summaries as one (tracks kept per segment: each numbers its own faces); None
    when no segment was checked."""
    got = [p for p in parts if p is not None]
    if not got:
        return None
    return replace(got[0], checked_frames=sum(p.checked_frames for p in got), seconds=sum(p.seconds for p in got),
                   tracks=tuple(t for p in got for t in p.tracks))
