"""One segment of a long clip restored into its own file: :func:`restore_segment`.

Decodes from the keyframe before the segment's context frames to its tail (the overlap either side
steadies the faces at its edges, as one pass would), restores and writes only the segment's own
frames, video only (the audio is copied once, at the join), under a temporary name renamed when
complete. A new encoder per segment: each file starts with a keyframe, so the join needs no re-encode.
One thread; memory: the Steadier's look-ahead of frames plus x264's own.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.video.errors import VideoStopped
from gpen_core.video.segments import Segment


@dataclass(frozen=True)
class SegmentDone:
    """A segment written: its file, frames, seconds, most faces in a frame, the restore's notes."""

    index: int
    path: str
    frames: int
    seconds: float
    faces_max: int
    notes: tuple[str, ...]


def restore_segment(
    src: str,
    seg: Segment,
    dst: Path,
    engine: Any,
    crf: int,
    *,
    on_frame: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
) -> SegmentDone:
    """Restore ``seg`` of ``src`` into ``dst`` (H.264 MP4, video only, the input's timestamps).

    ``engine``: ``detect(rgb)`` / ``restore(rgb, detections)`` (and ``fit(rgb)`` when the mode shrinks
    frames), as :class:`~gpen_core.video.engine_seam.FrameEngine`. Raises InputError when the segment
    does not decode to the frames the plan counted (the file changed or is damaged there).
    """
    import av

    from gpen_core.video.output import VideoWriter
    from gpen_core.video.probe import open_clip

    t0 = time.perf_counter()
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.partial")
    container = open_clip(src)
    out = None
    try:
        vs = container.streams.video[0]
        # The MP4 stores the segment's start as an edit in the movie's timescale (1/1000 s by default), which would
        # round it (10010/30000 s → 333 ms, 0.67 ms early); in the input's own time base it is exact.
        out = av.open(str(tmp), "w", format="mp4", options={"movie_timescale": str(Fraction(vs.time_base).denominator)})
        writer = VideoWriter(out, [], crf, vs.time_base, vs.average_rate or vs.guessed_rate)
        run = _SegmentLoop(seg, engine, writer, on_frame, stop or threading.Event())
        try:
            run.go(container, vs)
        except (av.FFmpegError, EOFError) as exc:
            raise InputError(
                f"segment {seg.index} (from {seg.start_s:.3f} s) stopped decoding after {run.written} of its {seg.frames} "
                f"frames ({str(exc).strip() or type(exc).__name__}): the input is damaged there. Restore the part before "
                "it with --start/--end, or re-export the file"
            ) from None
        writer.close()
        out = None
        if run.written != seg.frames:
            raise InputError(
                f"segment {seg.index} (from {seg.start_s:.3f} s) decoded {run.written} frames where the plan counted "
                f"{seg.frames}: the input is damaged there or changed since the plan. Restore again with --fresh"
            )
        os.replace(tmp, dst)
        return SegmentDone(seg.index, str(dst), run.written, time.perf_counter() - t0, run.faces_max, tuple(run.notes))
    finally:
        if out is not None:
            try:
                out.close()
            except Exception:  # noqa: BLE001 - a half-written file we delete next
                pass
        container.close()
        tmp.unlink(missing_ok=True)


class _SegmentLoop:
    """Decode → detect → steady → restore → encode for one segment, in one thread."""

    def __init__(self, seg: Segment, engine: Any, writer: Any, on_frame: Callable[[], None] | None,
                 stop: threading.Event) -> None:
        from gpen_core.video.steady import Steadier

        self.seg, self.engine, self.writer, self.on_frame, self.stop = seg, engine, writer, on_frame, stop
        self.steady = Steadier()
        self.window: deque = deque()
        self.written = self.faces_max = 0
        self.notes: dict[str, None] = {}

    def go(self, container: Any, vs: Any) -> None:
        import av

        from gpen_core.video.frames import upright_rgb

        seg = self.seg
        # backward: the keyframe at or before the first context frame, so it decodes from a clean start.
        container.seek(seg.context_pts, stream=vs, backward=True)
        rf = av.video.reformatter.VideoReformatter()
        fit = getattr(self.engine, "fit", None)
        done = False
        for packet in container.demux(vs):
            for frame in packet.decode():
                if frame.pts is None or frame.pts < seg.context_pts:
                    continue
                if seg.tail_pts is not None and frame.pts >= seg.tail_pts:
                    done = True
                    break
                if self.stop.is_set():
                    raise VideoStopped(f"stopped in segment {seg.index}: its partial file was removed")
                rgb, _, colour = upright_rgb(frame, rf)
                if fit is not None:
                    rgb = fit(rgb)
                self.steady.push(float(frame.pts * vs.time_base), self.engine.detect(rgb))
                self.window.append((frame.pts, rgb, colour))
                while self.steady.ready():
                    self._finish_one()
            if done:
                break
        while self.steady.pending():
            self._finish_one()

    def _finish_one(self) -> None:
        faces = self.steady.pop()
        pts, rgb, colour = self.window.popleft()
        seg = self.seg
        if pts < seg.start_pts or (seg.end_pts is not None and pts >= seg.end_pts):
            return  # an overlap frame: it steadied its neighbours; its own segment writes it
        out = self.engine.restore(rgb, [f.detection for f in faces])
        for note in out.notes:
            if len(self.notes) < 50:
                self.notes.setdefault(note)
        self.writer.frame(out.image, pts, colour)
        self.written += 1
        self.faces_max = max(self.faces_max, len(faces))
        if self.on_frame is not None:
            self.on_frame()
