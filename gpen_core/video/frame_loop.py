"""The one per-frame loop of every video path (one pass, a segment, a Ray worker's segment):
fit → detect → steady → restore, frames handed back in order once their look-ahead is in."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpen_core.video.engine_seam import Tally
from gpen_core.video.identity import FaceCheck, IdentityTracker
from gpen_core.video.steady import Steadier, SteadyFace

# Notes kept for one clip: a long clip's per-frame notes never grow without end.
MAX_NOTES = 50


@dataclass(frozen=True)
class Restored:
    """One frame out of the loop: the restored RGB uint8 H×W×3, its steadied faces, the caller's ``payload``,
    each face's :class:`~gpen_core.video.identity.FaceCheck` (None: not checked), the boxes the face check refused."""

    image: np.ndarray
    faces: list[SteadyFace]
    payload: Any
    checks: tuple[FaceCheck | None, ...] = ()
    rejected: tuple[tuple[float, float, float, float], ...] = ()


class FrameLoop:
    """``engine``: as :class:`~gpen_core.video.engine_seam.FrameEngine` (``fit`` optional). ``wanted(payload)``:
    False for a frame that only steadies its neighbours (dropped unrestored). ``check()``: called before each
    restore (raises to stop). ``tracks``: only these faces; None: all; ``skip``: never these. ``first``: the clip's
    number of the first frame restored here, so identity checks pick and name frames as the clip numbers them;
    ``segment``: its index.
    :attr:`tally` counts the restored frames' finds for the clip's (segment's) notes; None where the engine has no
    ``finds`` (a test's stand-in)."""

    def __init__(self, engine: Any, wanted: Callable[[Any], bool] | None = None,
                 check: Callable[[], None] | None = None, tracks: frozenset[int] | None = None,
                 skip: frozenset[int] = frozenset(), first: int = 0, segment: int | None = None) -> None:
        self.engine, self.wanted, self.check, self.tracks, self.skip = engine, wanted, check, tracks, skip
        self.steady = Steadier()
        self.window: deque[tuple[np.ndarray, Any, Any, int]] = deque()  # (frame, payload, its finds, faces kept)
        self.tally: Tally | None = Tally() if hasattr(engine, "finds") else None
        self.notes: dict[str, None] = {}
        make = getattr(engine, "identity_tracker", None)
        self.identity: IdentityTracker | None = make(segment) if make is not None else None
        self.index = first  # the clip's number of the next frame restored
        self.seen: set[int] = set()  # every face track restored frames held: a face asked for and never seen is said

    def push(self, time_s: float, rgb: np.ndarray, payload: Any) -> Iterator[Restored]:
        """Take one decoded upright RGB frame; yield the frames whose look-ahead it completes."""
        fit = getattr(self.engine, "fit", None)
        if fit is not None:
            rgb = fit(rgb)
        found = self.engine.detect(rgb)
        self.steady.push(time_s, found)
        # Counted once restored: a frame only steadying a segment's neighbours is counted by the segment writing it.
        self.window.append((rgb, payload, self.engine.finds if self.tally is not None else None, len(found)))
        while self.steady.ready():
            yield from self._one()

    def drain(self) -> Iterator[Restored]:
        """The clip's last frames (their look-ahead is the clip's end)."""
        while self.steady.pending():
            yield from self._one()

    def _one(self) -> Iterator[Restored]:
        """The oldest frame, restored; nothing for a frame that is not ``wanted``."""
        faces = self.steady.pop()
        rgb, payload, finds, kept = self.window.popleft()
        if self.wanted is not None and not self.wanted(payload):
            return
        if self.check is not None:
            self.check()
        self.seen.update(f.track for f in faces)
        chosen = [f for f in faces if (self.tracks is None or f.track in self.tracks) and f.track not in self.skip]
        index, self.index = self.index, self.index + 1
        if self.identity is None or self.identity.wants(index):
            out = self.engine.restore(rgb, [f.detection for f in chosen])
        else:  # between checked frames: the check's cost is bounded by identity_every
            out = self.engine.restore(rgb, [f.detection for f in chosen], check_identity=False)
        for note in out.notes:
            if len(self.notes) < MAX_NOTES:
                self.notes.setdefault(note)
        checks: tuple[FaceCheck | None, ...] = ()
        identity = getattr(out, "identity", ())
        if self.tally is not None and finds is not None:
            acted = sum(1 for c in identity if c is not None and c.action != "restored")
            self.tally += Tally.of_frame(finds, kept, acted)
        if self.identity is not None and identity:
            by_track = dict(zip((f.track for f in chosen), self.identity.add(index, [f.track for f in chosen], identity)))
            checks = tuple(by_track.get(f.track) for f in faces)
        refused = () if finds is None else tuple(tuple(float(v) for v in d.box) for d, _ in finds.rejected)
        yield Restored(out.image, faces, payload, checks, refused)

    def summary(self) -> dict[str, Any]:
        """A clip's (or segment's) result fields the engine and this loop know: ``mode``, ``mode_reason``,
        ``runtimes``, ``planned_bytes`` (a test's engine may lack any of them) and the ``identity`` summary."""
        eng = self.engine
        return {"mode": getattr(getattr(eng, "mode", None), "name", "custom"), "mode_reason": getattr(eng, "reason", ""),
                "runtimes": tuple(getattr(eng, "runtimes", ())), "planned_bytes": getattr(eng, "planned_bytes", None),
                "identity": self.identity.result() if self.identity is not None else None}
