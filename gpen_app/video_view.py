"""The Video tab's frame viewer as plain values: frames by number, faces drawn over one, the faces a rerun can
keep, the original over the same span (RGB uint8 H×W×3, upright)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from gpen_app.overlay import KEPT_COLOR, draw_detections, line_width
from gpen_core.video.engine_seam import FrameEngine, FrameOut
from gpen_core.video.frames import upright_rgb
from gpen_core.video.probe import clip_info, open_clip
from gpen_core.video.stream import VideoOptions, restore_video

LEFT_ALONE_COLOR = (150, 150, 150)  # grey: a face followed but unticked (left as it was)
# Frames offered in the identity list beside the slider: a long clip's list stays readable (the panel counts them all).
MAX_FLAGGED_CHOICES = 200


@dataclass(frozen=True)
class FrameFaces:
    """One written frame as the viewer draws it (display pixels): (track, box) per face, the refused boxes, and
    (track, :class:`~gpen_core.video.identity.FaceCheck`) per checked face."""

    tracks: tuple[tuple[int, tuple[float, float, float, float]], ...]
    rejected: tuple[tuple[float, float, float, float], ...]
    checks: tuple[tuple[int, Any], ...] = ()


def frame_faces(record: Any) -> FrameFaces:
    """A FrameRecord reduced to what the viewer draws (no landmarks: a long clip's list stays small)."""
    return FrameFaces(tuple((int(f.track), tuple(float(v) for v in f.box)) for f in record.faces),
                      tuple(tuple(float(v) for v in b) for b in record.rejected),  # type: ignore[misc]
                      tuple((int(f.track), f.identity) for f in record.faces if f.identity is not None))


def identity_caption(faces: FrameFaces | None) -> str:
    """This frame's identity figures for the before/after's caption; "" where no face was checked on it."""
    if faces is None or not faces.checks:
        return ""
    parts = []
    for track, c in faces.checks:
        text = f"face {track + 1}: identity distance {c.distance:.2f}" + (" (over the limit)" if c.over_limit else "")
        if c.jump is not None:
            text += f", jump {c.jump:.2f} (input's own {c.input_jump:.2f})" + (": jumped more than the input" if c.jumped else "")
        parts.append(text)
    return "; ".join(parts)


def flagged_choices(frames: Sequence[FrameFaces]) -> list[tuple[str, int]]:
    """(label, frame number from 1) of the first :data:`MAX_FLAGGED_CHOICES` frames the identity check flagged:
    "frame 12: face 1 jumped 0.45 (input 0.04)", "frame 30: face 2 over the limit (0.71)"."""
    out: list[tuple[str, int]] = []
    for i, f in enumerate(frames, 1):
        why = [f"face {k + 1} jumped {c.jump:.2f} (input {c.input_jump:.2f})" if c.jumped else f"face {k + 1} over the limit ({c.distance:.2f})"
               for k, c in f.checks if c.jumped or c.over_limit]
        if why:
            out.append((f"frame {i}: {', '.join(why)}", i))
            if len(out) >= MAX_FLAGGED_CHOICES:
                break
    return out


def frame_times(path: str) -> tuple[float, ...]:
    """Each video frame's time in ``path`` (seconds, as stamped, in display order), from the packets alone."""
    import av

    with av.open(path, "r", metadata_errors="ignore") as container:
        vs = container.streams.video[0]
        tb = vs.time_base
        return tuple(sorted(float(p.pts * tb) for p in container.demux(vs) if p.pts is not None and p.size))


# The frame viewer with no restored clip (before the first, after a new upload or a Stop): no frame count of a clip
# that is gone, no "frame 1 of 0".
PAIR_LABEL = "Before / after of that frame"
NO_FRAMES = {"minimum": 1, "maximum": 2, "value": 1, "interactive": False, "label": "Frame"}


def slider_spec(times: Sequence[float]) -> dict[str, Any]:
    """The frame slider over a restored clip: frame numbers 1…N (every frame reachable), opening on the middle one."""
    n = max(1, len(times))
    return {"minimum": 1, "maximum": max(2, n), "step": 1, "value": (n + 1) // 2, "interactive": n > 1,
            "label": f"Frame (1–{n}; its time shows on the before/after)"}


def frame_number(times: Sequence[float], number: float | None) -> int:
    """The slider's ``number`` as a frame of the restored file (from 1, clamped to the clip)."""
    return min(len(times), max(1, int(round(number or 1)))) if times else 1


def frame_time(times: Sequence[float], number: float | None) -> float:
    """The time of frame ``number`` (from 1, clamped to the clip) in the restored file."""
    return times[frame_number(times, number) - 1] if times else 0.0


def pair_label(times: Sequence[float], number: float | None, faces: Sequence[FrameFaces] | None = None) -> str:
    """The before/after's caption: which frame, its time, and its identity figures where ``faces`` has them."""
    if not times:
        return PAIR_LABEL
    i = frame_number(times, number)
    label = f"Before / after of frame {i} of {len(times)} ({frame_time(times, number):.2f} s)"
    identity = identity_caption(faces[i - 1]) if faces and i <= len(faces) else ""
    return label + (f" · {identity}" if identity else "")


def track_choices(frames: Sequence[FrameFaces]) -> list[tuple[str, int]]:
    """(label, track id) per face followed in the clip: "face 1: frames 3–120 (111 frames)", in order of appearance."""
    seen: dict[int, list[int]] = {}
    for i, f in enumerate(frames, 1):
        for track, _ in f.tracks:
            seen.setdefault(track, []).append(i)
    return [(f"face {k + 1}: frames {v[0]}–{v[-1]} ({len(v)} frame{'s' if len(v) != 1 else ''})", k)
            for k, v in sorted(seen.items())]


def found_text(frames: Sequence[FrameFaces]) -> str:
    """What Find faces saw: "2 faces followed in 150 frames; the face check rejected 3 detections in 2 frames …"."""
    n = len({k for f in frames for k, _ in f.tracks})
    m = f"{len(frames)} frame{'s' if len(frames) != 1 else ''}"
    text = f"{n} face{'s' if n != 1 else ''} followed in {m}" if n else f"No face found in {m}"
    bad, where = sum(len(f.rejected) for f in frames), sum(1 for f in frames if f.rejected)
    if bad:
        text += (f"; the face check rejected {bad} detection{'s' if bad != 1 else ''} in {where} frame{'s' if where != 1 else ''} "
                 "(turn Face check off to restore them)")
    return text + "."


def draw_faces(rgb: np.ndarray, faces: FrameFaces | None, left_out: Collection[int] = ()) -> tuple[np.ndarray, str]:
    """(a copy of the frame with its faces drawn, a caption): restored faces numbered solid green, the faces
    ``left_out`` (unticked) grey, detections the face check refused dashed red."""
    if faces is None:
        return np.array(rgb[..., :3]), "No faces recorded for this frame."
    if not faces.tracks and not faces.rejected:
        return np.array(rgb[..., :3]), "none found (the frame is as it came)."
    kept = [(k, b) for k, b in faces.tracks if k not in left_out]
    left = [(k, b) for k, b in faces.tracks if k in left_out]
    out = draw_detections(rgb[..., :3], [b for _, b in left + kept], faces.rejected,
                          kept_colors=[LEFT_ALONE_COLOR] * len(left) + [KEPT_COLOR] * len(kept))
    t = line_width(out.shape)
    image = Image.fromarray(out)
    pen = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=max(12, 6 * t))  # readable at the frame's size, as the lines are
    for k, box in faces.tracks:
        pen.text((box[0] + 2 * t, box[1] + 2 * t), str(k + 1), fill=KEPT_COLOR if (k, box) in kept else LEFT_ALONE_COLOR,
                 font=font)
    caption = f"{len(kept)} restored (solid green, numbered as in the face choice)"
    if left:
        caption += f", {len(left)} left as they were by your choice (grey)"
    if faces.rejected:
        caption += (f", {len(faces.rejected)} rejected by the face check (dashed red: left as they were; turn "
                    "Face check off to restore them)")
    else:
        caption += ", none rejected by the face check"
    return np.asarray(image), caption + "."


class _Unchanged:
    """A frame engine that finds no face: the clip is written as it came (the original over a span)."""

    def detect(self, rgb: np.ndarray) -> list[Any]:
        return []

    def restore(self, rgb: np.ndarray, detections: list[Any]) -> Any:
        return FrameOut(rgb, ())


def original_span(source: str, dst: Path, start_s: float | None, end_s: float | None, crf: int) -> str:
    """The original over the restored span: the upload itself for the whole clip, else that span written into ``dst``
    with the result's x264 settings, times, sound and turn."""
    if start_s is None and end_s is None:
        return source
    restore_video(source, dst, video=VideoOptions(crf=crf, start_s=start_s, end_s=end_s), engine=_Unchanged())
    return str(dst)


PREVIEW_S = 5.0  # how much of the part "Find faces" reads: enough for the faces on screen at its start


class _DetectOnly(_Unchanged):
    """The clip's real detection and face check (a frame session), no restore: the faces a run will number."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.device, self.opts = engine, engine.device, engine.opts

    def detect(self, rgb: np.ndarray) -> list[Any]:
        return self.engine.detect(rgb)

    @property
    def finds(self) -> Any:  # what the face check refused, for each frame's record
        return self.engine.finds


def find_faces(source: str, scratch: Path, restorer: Any, options: Any, start_s: float | None,
               end_s: float | None) -> list[FrameFaces]:
    """The faces of the part's first :data:`PREVIEW_S` seconds, numbered as a restore from ``start_s`` numbers them
    (same detector, face check and steadying), nothing restored; ``scratch`` (a file this call makes) is removed."""
    import av

    with open_clip(source) as container:
        clip_info(container, source)  # a clip with no video stream is refused here, with its fix
        first = next(container.decode(video=0))
        h, w = upright_rgb(first, av.video.reformatter.VideoReformatter())[0].shape[:2]  # as the frames are detected
    end = (start_s or 0.0) + PREVIEW_S
    records: list[FrameFaces] = []
    engine = FrameEngine(restorer, options, (w, h))
    try:
        restore_video(source, scratch, video=VideoOptions(start_s=start_s, end_s=end if end_s is None else min(end, end_s)),
                      engine=_DetectOnly(engine), on_frame=lambda r: records.append(frame_faces(r)))
    finally:
        engine.close()
        scratch.unlink(missing_ok=True)
    return records
