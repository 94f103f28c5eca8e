"""One segment of a long clip restored into its own file (video only, a new encoder, so it starts with a keyframe):
:func:`restore_segment`, in one thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.platform import durable
from gpen_core.video.errors import VideoStopped
from gpen_core.video.frame_loop import FrameLoop
from gpen_core.video.frames import upright_rgb
from gpen_core.video.limits import FrameGuard
from gpen_core.video.output import VideoWriter
from gpen_core.video.probe import open_video
from gpen_core.video.segments import Segment


@dataclass(frozen=True)
class SegmentRecord:
    """One segment's outcome, as the manifest records it (the runner adds its peaks and worker)."""

    index: int
    frames: int
    seconds: float
    faces_max: int = 0
    peak_rss_bytes: int | None = None
    peak_vram_bytes: int | None = None
    worker: str = ""
    notes: tuple[str, ...] = ()
    kept: bool = False  # finished by an earlier run, checked and kept
    mode: str = ""  # the mode it ran in ("" when kept)
    mode_reason: str = ""
    runtimes: tuple[Any, ...] = ()  # NetworkRuntime: what ran each network
    identity: Any = None  # VideoIdentity of its frames; None: not checked (or kept from an earlier run)
    planned_bytes: int | None = None  # the mode's plan for one frame (VideoResult.planned_bytes)
    # Tally of its written frames, for the clip's notes said once (summed); None: not counted (a stand-in engine, or
    # kept from a plan written before plan.json recorded it)
    tally: Any = None

    def measured(self, peaks: Any, worker: str) -> SegmentRecord:
        """As restored by ``worker`` (its node and process), with the Peaks it measured there (None: none)."""
        return replace(self, peak_rss_bytes=peaks and peaks.rss_bytes, peak_vram_bytes=peaks and peaks.vram_reserved_bytes,
                       worker=worker)


def restore_segment(src: str, seg: Segment, dst: Path, engine: Any, crf: int, *,
                    on_frame: Callable[[], None] | None = None, stop: threading.Event | None = None) -> SegmentRecord:
    """Restore ``seg`` of ``src`` into ``dst`` (H.264 MP4, video only, the input's timestamps).

    ``engine``: as :class:`~gpen_core.video.engine_seam.FrameEngine`. InputError when the segment does not decode
    to the frames the plan counted."""
    import av

    t0 = time.perf_counter()
    container, info = open_video(src)  # the same header limits as one pass
    written = faces_max = 0
    with container, durable.replacing(dst, sync=True) as tmp:  # flushed: a resume trusts a finished segment
        guard = FrameGuard(src, info.size)
        # Overlap frames steady their neighbours; their segment writes them. Frames are numbered as the clip
        # numbers them, so the identity check picks and names the same frames as one pass.
        loop = FrameLoop(engine, wanted=lambda payload: seg.owns(payload[0]), first=seg.first_frame, segment=seg.index)
        vs = container.streams.video[0]
        # The MP4 stores the segment's start as an edit in the movie's timescale (1/1000 s by default), which would
        # round it (10010/30000 s → 333 ms, 0.67 ms early); in the input's own time base it is exact.
        out = av.open(str(tmp), "w", format="mp4", options={"movie_timescale": str(Fraction(vs.time_base).denominator)})
        writer = VideoWriter(out, [], crf, vs.time_base, vs.average_rate or vs.guessed_rate)
        try:
            for done in _restored(container, seg, guard, loop, stop):
                writer.frame(done.image, *done.payload)
                written += 1
                faces_max = max(faces_max, len(done.faces))
                if on_frame is not None:
                    on_frame()
            writer.close()  # a full disk often shows only here: the output is closed as for any failure
        except BaseException as exc:
            with suppress(Exception):  # a half-written file, removed next
                out.close()
            if not isinstance(exc, (av.FFmpegError, EOFError)):
                raise
            raise InputError(f"segment {seg.index} (from {seg.start_s:.3f} s) stopped decoding after {written} of its "
                             f"{seg.frames} frames ({str(exc).strip() or type(exc).__name__}): the input is damaged "
                             "there. Restore the part before it with --start/--end, or re-export the file") from None
        if written != seg.frames:
            raise InputError(f"segment {seg.index} (from {seg.start_s:.3f} s) decoded {written} frames where the plan "
                             f"counted {seg.frames}: the input is damaged there or changed since the plan. Restore "
                             "again with --fresh")
    # the engine's, the decoded frames' and the restore's notes, as one pass says them; those with the clip's
    # counts (the loop's tally) are said once for the clip, from every segment's tally
    notes = tuple(dict.fromkeys([*getattr(engine, "notes", ()), *guard.notes, *loop.notes]))
    return SegmentRecord(seg.index, written, time.perf_counter() - t0, faces_max, notes=notes, tally=loop.tally,
                         **loop.summary())


def _restored(container: Any, seg: Segment, guard: Any, loop: Any, stop: threading.Event | None) -> Iterator[Any]:
    """The segment's frames out of ``loop`` (payload: pts, colour), decoded from its first context frame to its tail."""
    import av

    vs = container.streams.video[0]
    # backward: the keyframe at or before the first context frame, so it decodes from a clean start.
    container.seek(seg.context_pts, stream=vs, backward=True)
    rf = av.video.reformatter.VideoReformatter()
    for packet in container.demux(vs):
        for frame in packet.decode():
            if frame.pts is None or frame.pts < seg.context_pts:
                continue
            if seg.tail_pts is not None and frame.pts >= seg.tail_pts:
                yield from loop.drain()
                return
            if stop is not None and stop.is_set():
                raise VideoStopped(f"stopped in segment {seg.index}: its partial file was removed")
            guard.check(frame, frame.pts, vs.time_base)  # before its pixels are converted
            rgb, _, colour = upright_rgb(frame, rf)
            yield from loop.push(float(frame.pts * vs.time_base), rgb, (frame.pts, colour))
    yield from loop.drain()
