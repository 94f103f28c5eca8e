"""Every real face once: :func:`find_faces` runs the detector's passes over one RGB uint8 photo (upright, large-face,
turned), one box per face, the face check, and returns every decision in photo pixels (docs/face-check.md,
"What runs")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from gpen_core.faces import screen
from gpen_core.faces.screen import overlap

if TYPE_CHECKING:
    from gpen_core.faces.detect import Detection, FaceDetector, Resize

# Two boxes are one face from SAME_FACE_IOU, or when one lies CONTAINED_MAX inside the other (intersection over
# the smaller box; measured: docs/face-check.md, "Where the limits sit").
CONTAINED_MAX = 0.45
SAME_FACE_IOU = 0.4
# The large-face pass (RetinaFace's anchors end at 256 px): a copy this long, trusted for faces from LARGE_FACE_PX
# on it; from there up the full-size pass splits a face into pieces.
LARGE_PASS_SIDE = 400
LARGE_FACE_PX = 96
# One face this share of a square photo: the note says it may be an aligned crop (never switched silently).
ALIGNED_HINT_SHARE = 0.45


@dataclass(frozen=True, eq=False)
class FoundFaces:
    """What :func:`find_faces` decided."""

    faces: tuple[Detection, ...]  # to restore, highest score first, in photo pixels
    rejected: tuple[tuple[Detection, str], ...]  # (detection, reason) not restored
    unchecked: tuple[tuple[Detection, str], ...]  # (detection, reason) kept only because the face check was off
    merged: int  # detections merged into a face that contains them
    large: int  # faces kept from the large-face pass
    searched_turns: tuple[int, ...]  # the quarter turns searched (0 is upright)
    notes: tuple[str, ...]  # sentences for the user


def _same_face(a: Sequence[float], b: Sequence[float]) -> bool:
    iou, inside = overlap(a, b)
    return iou >= SAME_FACE_IOU or inside >= CONTAINED_MAX


def merge_duplicates(detections: Sequence[Detection]) -> tuple[list[Detection], list[Detection]]:
    """(kept, dropped): ``detections`` in order (strongest first), each dropped when a kept one is the same face."""
    kept: list[Detection] = []
    dropped: list[Detection] = []
    for d in detections:
        (dropped if any(_same_face(d.box, k.box) for k in kept) else kept).append(d)
    return kept, dropped


def _reading(d: Detection) -> tuple[bool, float]:
    """Sort key of one face's readings, best first: upright on the copy it was read on (a face turned 180° read on
    the 90° copy passed the check with landmarks half a face off), then the better template fit."""
    v = screen.check(d.box, d.landmarks)
    own_tilt = (v.tilt_deg - 90.0 * d.turn + 180.0) % 360.0 - 180.0  # the tilt on the copy it was found on
    return abs(own_tilt) > 45.0, v.fit


_DEGREES = {1: "90° counter-clockwise", 2: "180°", 3: "90° clockwise"}  # quarter turns (as np.rot90) in words


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True)
class DetectSizing:
    """A mode's detect_side, detect_shrink_above and detect_resize, as :meth:`FaceDetector.detect` takes them."""

    max_side: int = 1000  # the detector sees the photo at most this long
    shrink_above: int | None = None  # photos up to this long are seen as they are (None: max_side)
    interpolation: "Resize" = "area"


def find_faces(detector: FaceDetector, rgb: np.ndarray, *, threshold: float = 0.9,
               sizing: DetectSizing = DetectSizing(), face_check: bool = True,
               orientations: bool = False, upright: bool = False) -> FoundFaces:
    """Every face of ``rgb`` once. ``face_check=False`` keeps what the check would reject (``unchecked`` says which
    and why); ``orientations=True`` searches the turned copies always (else only when no face or a sideways one,
    and never when ``upright``: a clip's frames, turned by their display matrix, where a faceless frame would pay
    three more passes; the 180° copy still reads a face found upside down)."""
    h, w = rgb.shape[:2]
    longest = max(h, w)
    copy_side = longest if longest <= max(sizing.max_side, sizing.shrink_above or 0) else sizing.max_side
    passes = partial(_pass, detector, rgb, threshold, sizing, copy_side > LARGE_PASS_SIDE * 1.25)

    first = passes(0)
    kept, rejected, upside = first.kept, first.rejected, first.upside
    # The large-face pass's detections are held, not only their ids: an id is only unique while its object lives.
    merged, large, searched = first.merged, list(first.large), [0]
    # A face read on its side means a turned photo, whose other faces the upright pass may have missed: the
    # detector finds some faces lying sideways, not all.
    sideways = any(_reading(d)[0] for d in kept)
    turns_wanted = [1, 2, 3] if orientations or (not upright and (not kept or sideways)) else ([2] if upside else [])
    for turn in turns_wanted:
        more = passes(turn)
        searched.append(turn)
        merged += more.merged
        large += more.large
        # A face found on several turns is one face read again, not a duplicate box: keep its best reading.
        for d in more.kept:
            same = [i for i, k in enumerate(kept) if _same_face(d.box, k.box)]
            if not same:
                kept.append(d)
            elif _reading(d) < _reading(kept[same[0]]):
                kept[same[0]] = d
        rejected += [(d, r) for d, r in more.rejected if not any(_same_face(d.box, k.box) for k in kept)]
        upside += more.upside

    kept, rejected, unchecked, notes = _settle(kept, rejected, upside, face_check)
    large_used = sum(1 for d in kept if any(d is g for g in large))
    notes += _summary_notes(kept, merged, large_used, searched, h, w)
    kept.sort(key=lambda d: d.score, reverse=True)
    return FoundFaces(tuple(kept), tuple(rejected), tuple(unchecked), merged, large_used, tuple(searched), tuple(notes))


@dataclass
class _TurnFinds:
    kept: list[Detection]  # passed the face check, upright for their landmarks
    rejected: list[tuple[Detection, str]]  # (detection, reason)
    upside: list[Detection]  # passed the check but read upside down
    merged: int  # detections dropped as pieces of another face
    large: list[Detection]  # the large-face pass's detections


def _pass(detector: FaceDetector, rgb: np.ndarray, threshold: float, sizing: DetectSizing, large_pass: bool,
          turn: int) -> _TurnFinds:
    """Detect on the photo turned ``turn`` quarter turns (plus the large-face pass when ``large_pass``), one box
    per face, then the face check and the upright look; in photo pixels."""
    dets = detector.detect(rgb, threshold=threshold, max_side=sizing.max_side, shrink_above=sizing.shrink_above,
                           interpolation=sizing.interpolation, turn=turn)
    large: list[Detection] = []
    if large_pass:
        k = LARGE_PASS_SIDE / max(rgb.shape[:2])
        large = [d for d in detector.detect(rgb, threshold=threshold, max_side=LARGE_PASS_SIDE, turn=turn)
                 if min(d.width, d.height) * k >= LARGE_FACE_PX]
    kept, dropped = merge_duplicates(large + dets)  # a large face first: its pieces merge into it
    # The same face found by both passes is one reading; a box inside a face is a duplicate.
    merged = sum(1 for d in dropped if not any(overlap(d.box, g.box)[0] >= SAME_FACE_IOU for g in large if g is not d))
    filtered = detector.screen(rgb, kept, threshold=threshold)
    good = list(filtered.kept)
    rejected = [(d, v.reasons[0]) for d, v in filtered.rejected]

    def upright_look(img: np.ndarray) -> list[Detection]:  # ``img`` at its own size, the look's own threshold
        return detector.detect(img, threshold=screen.UPRIGHT_LOOK_THRESHOLD, max_side=max(img.shape[:2]))

    looks = screen.upright_looks(rgb, [d.landmarks for d in good], upright_look)
    upside = [d for d, (up, turned) in zip(good, looks) if turned > up]
    good = [d for d, (up, turned) in zip(good, looks) if not turned > up]
    return _TurnFinds(good, rejected, upside, merged, large)


def _settle(
    kept: list[Detection], rejected: list[tuple[Detection, str]], upside: list[Detection], face_check: bool
) -> tuple[list[Detection], list[tuple[Detection, str]], list[tuple[Detection, str]], list[str]]:
    """(kept, rejected, unchecked, notes) once the upside-down readings and the check's rejections are decided;
    ``kept`` gains the unchecked detections in place when ``face_check`` is off."""
    notes: list[str] = []
    # An upside-down reading gives way to a turn's upright one of the same face. Counted for the upright pass
    # only: with every turn searched, each upright face is also read upside down on the 180° copy.
    fixed = [d for d in upside if d.turn == 0 and any(_same_face(d.box, k.box) for k in kept)]
    unfixed = [d for d in upside if not any(_same_face(d.box, k.box) for k in kept)]
    upside_reason = "it is upside down for its landmarks and was not found on the photo turned 180°"
    if fixed:
        notes.append(f"{_plural(len(fixed), 'face was', 'faces were')} read upside down; found again on the photo "
                     "turned and restored upright")
    # Rejected candidates overlapping a kept face are that face's other readings, not false faces.
    rejected = [(d, r) for d, r in rejected if not any(_same_face(d.box, k.box) for k in kept)]
    rejected += [(d, upside_reason) for d in unfixed]
    once = {id(d) for d in merge_duplicates([d for d, _ in rejected])[0]}  # each false face's first reason
    rejected = [(d, r) for d, r in rejected if id(d) in once]

    unchecked: list[tuple[Detection, str]] = []
    if not face_check:
        unchecked, rejected = rejected, []
        kept += [d for d, _ in unchecked]
        if unchecked:
            notes.append(f"face check off: kept {_plural(len(unchecked), 'detection', 'detections')} the check would "
                         f"have dropped ({'; '.join(dict.fromkeys(r for _, r in unchecked))})")
    elif rejected:
        notes.append(f"{_plural(len(rejected), 'detection', 'detections')} rejected by the face check: "
                     f"{'; '.join(dict.fromkeys(r for _, r in rejected))} (turn the check off to keep them)")
    return kept, rejected, unchecked, notes


def _summary_notes(kept: Sequence[Detection], merged: int, large_used: int, searched: Sequence[int], h: int,
                   w: int) -> list[str]:
    """Notes on how the faces kept were found (merged boxes, the large-face pass, the turned copies), and when the
    one face found covers most of a square photo (it may be an aligned crop)."""
    notes: list[str] = []
    if merged:
        notes.append(f"{_plural(merged, 'detection was', 'detections were')} the same face as another and merged (one box per face)")
    if large_used:
        notes.append(f"{_plural(large_used, 'large face', 'large faces')} found on a {LARGE_PASS_SIDE} px copy "
                     "(the detector misses or splits faces over about 256 px)")
    for t in (1, 2, 3):
        if n := sum(1 for d in kept if d.turn == t):
            notes.append(f"{_plural(n, 'face', 'faces')} found on the photo turned {_DEGREES[t]}: restored upright, "
                         "pasted back as in the photo")
    if len(searched) > 1 and not kept:
        notes.append("no face upright, nor on the photo turned " + ", ".join(_DEGREES[t] for t in searched[1:]))
    if len(kept) == 1 and 0.9 <= h / w <= 1.1:
        x0, y0, x1, y1 = kept[0].box
        share = (x1 - x0) * (y1 - y0) / (h * w)
        if share >= ALIGNED_HINT_SHARE:
            notes.append(f"the face covers {share:.0%} of this square photo: if it is an aligned face crop "
                         "(FFHQ-style), the aligned option restores it whole")
    return notes
