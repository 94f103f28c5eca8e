"""The engine as a clip sees it: one frame session (``Restorer.frames``) for the clip, then ``detect(rgb)``
and ``restore(rgb, detections)`` per frame with the networks resident. The session holds the restorer's lock,
so :meth:`FrameEngine.close` must run."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gpen_core.modes import AUTO, get_mode, preshrink_size
from gpen_core.options import RestoreOptions
from gpen_core.video.identity import IdentityTracker


@dataclass(frozen=True)
class FrameOut:
    """One restored frame: RGB uint8 H×W×3, the restore's notes, and each face's ``IdentityCheck`` (or None,
    in the detections' order; () where it did not run)."""

    image: np.ndarray
    notes: tuple[str, ...]
    identity: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Tally:
    """What a clip's frames did that its notes say once, with counts: max faces, the identity limit, the face check
    and the finder's passes (docs/face-check.md). A segmented run sums its segments'; plan.json keeps each finished
    segment's."""

    capped_frames: int = 0  # frames over max faces, and the most faces one of them had
    most_found: int = 0
    identity_acted: int = 0
    rejected_faces: int = 0
    rejected_frames: int = 0
    reasons: tuple[str, ...] = ()
    turned_faces: int = 0
    turned_frames: int = 0
    unchecked_faces: int = 0
    unchecked_frames: int = 0
    unchecked_reasons: tuple[str, ...] = ()
    merged: int = 0
    large_faces: int = 0
    frames: int = 0
    faced_frames: int = 0  # frames where a face was found

    def __add__(self, other: Tally) -> Tally:
        def add(a: Any, b: Any) -> Any:
            return tuple(dict.fromkeys(a + b)) if isinstance(a, tuple) else a + b

        summed = {f.name: add(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)}
        return Tally(**{**summed, "most_found": max(self.most_found, other.most_found)})

    @classmethod
    def of_frame(cls, finds: Any, kept: int, acted: int = 0) -> Tally:
        """One frame's :class:`gpen_core.faces.find.FoundFaces` as counts: ``kept`` of its faces restored (max faces),
        ``acted`` of them over the identity limit."""
        found, turned = len(finds.faces), sum(1 for d in finds.faces if d.turn)
        return cls(capped_frames=int(found > kept), most_found=found if found > kept else 0, identity_acted=acted,
                   rejected_faces=len(finds.rejected), rejected_frames=int(bool(finds.rejected)),
                   reasons=tuple(r for _, r in finds.rejected), turned_faces=turned, turned_frames=int(turned > 0),
                   unchecked_faces=len(finds.unchecked), unchecked_frames=int(bool(finds.unchecked)),
                   unchecked_reasons=tuple(r for _, r in finds.unchecked), merged=finds.merged,
                   large_faces=finds.large, frames=1, faced_frames=int(found > 0))

    def notes(self, opts: RestoreOptions, whole: bool = True) -> list[str]:
        """Max faces', the identity limit's, the face check's and the finder's notes, for the clip (``whole``: every
        frame counted, so "no face in any frame" can be said)."""
        from gpen_core.engine.stages import capped_note

        def n(k: int, what: str) -> str:
            return f"{k} {what}{'s' if k != 1 else ''}"

        notes = []
        if whole and self.frames and not self.faced_frames:  # a photo says it too; a clip turned unflagged is the case
            notes.append(f"no face found in any of the {n(self.frames, 'frame')}, each searched upright"
                         + (" and turned 90°, 180° and 270°" if opts.orientations else ": if the clip was filmed on its side "
                            "or upside down without a rotation tag, search turned faces too (Video tab: Search turned "
                            "faces; CLI: --orientations)"))
        if self.capped_frames:
            notes.append(capped_note(opts.max_faces, self.most_found, self.capped_frames))
        if self.identity_acted:  # said once for the clip; the identity summary names the frames
            alpha = opts.identity_alpha
            what = "kept as they were" if alpha <= 0 else f"blended toward the original (alpha {alpha:g})"
            notes.append(f"over your identity limit {opts.identity_limit:g}, {self.identity_acted} face(s) in the "
                         f"clip's frames were {what}")
        if self.rejected_faces:
            notes.append(f"the face check rejected {n(self.rejected_faces, 'detection')} in {n(self.rejected_frames, 'frame')} "
                         f"({'; '.join(self.reasons)}): those faces were left as they were. If they are real faces, turn "
                         "the face check off (app: Face check; CLI: --no-face-check)")
        if self.unchecked_faces:
            notes.append(f"face check off: kept {n(self.unchecked_faces, 'detection')} in {n(self.unchecked_frames, 'frame')} "
                         f"the check would have dropped ({'; '.join(self.unchecked_reasons)})")
        if self.turned_faces:
            notes.append(f"{n(self.turned_faces, 'face')} in {n(self.turned_frames, 'frame')} found only on the frame "
                         "turned 90°, 180° or 270°: restored upright, pasted back as in the frame")
        if self.merged:
            notes.append(f"{n(self.merged, 'detection')} in the clip's frames {'was' if self.merged == 1 else 'were'} the "
                         "same face as another and merged (one box per face)")
        if self.large_faces:
            from gpen_core.faces.find import LARGE_PASS_SIDE  # OpenCV's module: not for a segment driver's notes

            notes.append(f"{n(self.large_faces, 'large face')} in the clip's frames found on a {LARGE_PASS_SIDE} px copy "
                         "(the detector misses or splits faces over about 256 px)")
        return notes


def clip_device(engine: Any, restorer: Any) -> str:
    """Where a clip's frames run, so where its peaks are measured: the engine's device, else the restorer's."""
    return getattr(engine, "device", None) or (restorer.device if restorer is not None else "cpu")


class FrameEngine:
    """Per-frame access to a :class:`~gpen_core.restorer.Restorer` for one clip of ``size`` (width, height, upright).
    ``auto`` is planned once from the frame size; a mode with a longest side shrinks frames above it (:meth:`fit`)."""

    def __init__(self, restorer: Any, options: RestoreOptions, size: tuple[int, int]) -> None:
        # Frames are turned upright by their display matrix: the session searches turned copies only under
        # orientations (a clip filmed on its side or upside down), on every frame.
        opts = options.validated()
        # auto plans for the frame as it is; an explicit mode for the frame its longest side leaves
        planned = size if opts.mode == AUTO else preshrink_size(*size, get_mode(opts.mode).max_side)
        self.device: str = restorer.device
        self._stack = ExitStack()
        self.session = self._stack.enter_context(restorer.frames(opts, planned))
        self.mode, self.opts = self.session.mode, opts
        self.reason = self.session.notes[0] if self.session.notes and self.mode.name != opts.mode else ""
        self.notes: list[str] = list(self.session.notes)  # the clip's notes without its counts (FrameLoop.tally's)
        written = preshrink_size(*size, self.mode.max_side)
        if written != size:
            self.notes.append(f"{self.mode.name} mode shrinks frames over {self.mode.max_side} px: "
                              f"{size[0]}×{size[1]} restored and written at {written[0]}×{written[1]}")

    @property
    def finds(self) -> Any:
        """The last detected frame's ``FoundFaces`` (before max faces): what :class:`FrameLoop` counts."""
        return self.session.finds

    @property
    def runtimes(self) -> tuple[Any, ...]:
        return self.session.runtimes

    @property
    def planned_bytes(self) -> int | None:
        """The bytes the mode's plan gives one frame above the process as the session began (None on a GPU)."""
        plan = self.session.plan
        return plan.planned if plan is not None else None

    def fit(self, rgb: np.ndarray) -> np.ndarray:
        """The frame at the mode's longest side (unchanged when it fits)."""
        from gpen_core.images.encode import shrink_to_max_side

        return shrink_to_max_side(rgb, self.mode.max_side)[0] if self.mode.max_side else rgb

    def detect(self, rgb: np.ndarray) -> list[Any]:
        """The faces of one upright RGB frame (``Detection`` list), highest score first, at most max_faces."""
        return self.session.detect(rgb)

    def identity_tracker(self, segment: int | None = None) -> Any:
        """The clip's :class:`~gpen_core.video.identity.IdentityTracker` where its mode and options check identity."""
        from gpen_core.faces.identity import runs

        if not runs(self.mode.name, self.opts):
            return None
        return IdentityTracker(self.opts.identity_every, self.opts.identity_limit, segment)

    def restore(self, rgb: np.ndarray, detections: list[Any], check_identity: bool = True) -> FrameOut:
        """``rgb`` with ``detections`` restored and pasted back; a frame without faces comes back as it is."""
        if not detections:
            return FrameOut(rgb, ())
        from gpen_core.faces.identity import face_note

        out = self.session.restore(rgb, detections, check_identity)
        checks = tuple(f.identity for f in out.faces)
        # A photo's per-face note on the limit's action would repeat every frame: FrameLoop counts it for one note.
        acted = {face_note(i, c, self.opts.identity_alpha) for i, c in enumerate(checks, 1) if c is not None}
        return FrameOut(out.image, tuple(n for n in out.notes if n not in acted), checks)

    def close(self) -> None:
        """End the session: the restorer's lock released, its lifetime policy restored."""
        self._stack.close()
