"""Faces steady across frames (the detector's landmarks jitter by about a pixel, so a restored face would shimmer):
:class:`Steadier` tracks faces, fills short gaps between two sightings, and fits box and landmarks by a local line
in time. Pure NumPy, on ``Detection``s in display pixels (docs/video.md, "Faces steady from frame to frame")."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

# Frames either side of the one being smoothed (window 7); measured: docs/video.md, "Faces steady from frame to frame".
HALF_WINDOW = 3
# Longest run of missed detections filled between two sightings of the same face.
MAX_GAP = 3
MATCH_IOU = 0.3
MATCH_CENTRE = 0.5


@dataclass
class _Track:
    id: int
    last_pos: int
    last_box: tuple[float, float, float, float]
    # (frame position, time s, 14 values: box then 5 landmarks, the detection): sightings still in some window
    seen: deque = field(default_factory=deque)


@dataclass(frozen=True)
class SteadyFace:
    """One face of a frame handed back: its track, the steadied detection (display pixels), and whether it was filled."""

    track: int
    detection: Any  # gpen_core.faces.detect.Detection
    filled: bool


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes (faces.find's pulls in OpenCV)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = max(0.0, (a[2] - a[0]) * (a[3] - a[1])) + max(0.0, (b[2] - b[0]) * (b[3] - b[1])) - inter
    return inter / union if union > 0 else 0.0


def _centre_near(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    side = max(1.0, ((a[2] - a[0]) * (a[3] - a[1])) ** 0.5)
    ca = ((a[0] + a[2]) / 2, (a[1] + a[3]) / 2)
    cb = ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)
    return ((ca[0] - cb[0]) ** 2 + (ca[1] - cb[1]) ** 2) ** 0.5 < MATCH_CENTRE * side


def local_linear(times: np.ndarray, values: np.ndarray, at: float) -> np.ndarray:
    """Least-squares line through (``times``, each column of ``values``) evaluated at ``at``; one point: itself."""
    if len(times) == 1:
        return values[0]
    t = times - times.mean()
    var = float((t * t).sum())
    mean = values.mean(axis=0)
    if var <= 0.0:
        return mean
    slope = (t[:, None] * (values - mean)).sum(axis=0) / var
    return mean + slope * (at - times.mean())


class Steadier:
    """Frames in (:meth:`push`, in display order), steadied frames out (:meth:`pop`) ``lookahead`` frames later."""

    lookahead = max(HALF_WINDOW, MAX_GAP)

    def __init__(self) -> None:
        self._tracks: list[_Track] = []
        self._frames: deque[tuple[int, float]] = deque()  # (position, time) of the frames not handed back yet
        self._ids = itertools.count()
        self._pushed = 0

    def push(self, time_s: float, detections: list[Any]) -> None:
        pos = self._pushed
        self._pushed += 1
        live = [t for t in self._tracks if pos - t.last_pos <= MAX_GAP + 1]
        pairs = []
        for di, d in enumerate(detections):
            for ti, t in enumerate(live):
                o = iou(d.box, t.last_box)
                if o >= MATCH_IOU or _centre_near(d.box, t.last_box):
                    pairs.append((-o, pos - t.last_pos, di, ti))
        owner: dict[int, _Track] = {}  # detection → the track it continues: best overlap, then the latest seen
        taken: set[int] = set()
        for _, _, di, ti in sorted(pairs):
            if di not in owner and ti not in taken:
                owner[di] = live[ti]
                taken.add(ti)
        for di, d in enumerate(detections):
            track = owner.get(di)
            if track is None:
                track = _Track(next(self._ids), pos, tuple(d.box))
                self._tracks.append(track)
            track.last_pos, track.last_box = pos, tuple(d.box)
            values = np.concatenate([np.asarray(d.box, np.float64), np.asarray(d.landmarks, np.float64).reshape(-1)])
            track.seen.append((pos, time_s, values, d))
        self._frames.append((pos, time_s))

    def ready(self) -> bool:
        return bool(self._frames) and self._frames[0][0] + self.lookahead < self._pushed

    def pending(self) -> int:
        return len(self._frames)

    def pop(self) -> list[SteadyFace]:
        """The oldest frame's faces (call when :meth:`ready`, or at the clip's end until nothing is pending)."""
        pos, time_s = self._frames.popleft()
        faces = [f for f in (self._face_at(t, pos, time_s) for t in self._tracks) if f is not None]
        # Forget sightings no later frame's window reaches, and tracks with nothing left.
        oldest = pos + 1 - max(HALF_WINDOW, MAX_GAP + 1)
        for track in self._tracks:
            while track.seen and track.seen[0][0] < oldest:
                track.seen.popleft()
        self._tracks = [t for t in self._tracks if t.seen or self._pushed - t.last_pos <= MAX_GAP + 1]
        return faces

    def _face_at(self, track: _Track, pos: int, time_s: float) -> SteadyFace | None:
        seen = track.seen
        here = [s for s in seen if s[0] == pos]
        filled = not here
        if filled:  # only between two sightings, at most MAX_GAP frames apart
            before = [s for s in seen if s[0] < pos]
            after = [s for s in seen if s[0] > pos]
            if not before or not after or after[0][0] - before[-1][0] - 1 > MAX_GAP:
                return None
        near = [s for s in seen if abs(s[0] - pos) <= HALF_WINDOW]
        if filled and len(near) < 2:  # the sightings bracketing the gap, even beyond the window
            near = [before[-1], after[0]]
        times = np.array([s[1] for s in near])
        values = np.stack([s[2] for s in near])
        fit = local_linear(times, values, time_s)
        base = here[0][3] if here else min(near, key=lambda s: abs(s[0] - pos))[3]
        box = tuple(float(v) for v in fit[:4])
        landmarks = fit[4:].reshape(5, 2).astype(np.float32)
        landmarks.setflags(write=False)
        unclipped = None
        if getattr(base, "unclipped", None) is not None:
            shift = [b - o for b, o in zip(box, base.box)]
            unclipped = tuple(u + s for u, s in zip(base.unclipped, shift))
        det = replace(base, box=box, landmarks=landmarks, unclipped=unclipped)
        return SteadyFace(track.id, det, filled)
