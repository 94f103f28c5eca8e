"""Hours of video, resumable: :func:`restore_in_segments`.

The clip is cut at keyframes into segments (:mod:`gpen_core.video.segments`), each restored into its
own file in a work folder beside the output (``.out.mp4.segments/``) by a *runner*: this process
(:class:`LocalRunner`) or Ray workers (:mod:`gpen_core.scaleout.video_ray`). When all are there they are
joined without re-encoding, the audio copied once (:mod:`gpen_core.video.join`), and the work folder
is removed. A run that was killed, however, resumes with the same call: segments with their final
name that decode to the plan's frames are kept, anything else is redone, so at most the segments in
progress are lost. ``fresh=True`` starts over.

The work folder holds the plan, the finished segments and at most one partial file per runner
worker, never frames: its size is the restored video's own, about the output's size.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpen_core.errors import InputError
from gpen_core.options import RestoreOptions
from gpen_core.video.segments import DEFAULT_SEGMENT_SECONDS, Segment, SegmentPlan

MANIFEST = "manifest.jsonl"
# Clips at least this long go in segments unless told otherwise (the CLI's default): a crash past
# this point would cost more than a few minutes of work, and the segments' join costs seconds.
SEGMENTS_FROM_S = 600.0

from gpen_core.progress import CountProgress as Progress  # noqa: E402  (frames done, the clip's frames)


@dataclass(frozen=True)
class SegmentRecord:
    """One segment's outcome as the manifest records it."""

    index: int
    frames: int
    seconds: float
    faces_max: int = 0
    peak_rss_bytes: int | None = None
    peak_vram_bytes: int | None = None
    worker: str = ""
    notes: tuple[str, ...] = ()
    kept: bool = False  # finished by an earlier run, checked and kept


class Runner(Protocol):
    """Restores segments into ``folder`` (each as ``folder / seg.file``, renamed when complete), yielding each's record as it finishes."""

    def __call__(self, plan: SegmentPlan, pending: list[Segment], folder: Path,
                 on_frame: Callable[[], None]) -> Iterator[SegmentRecord]: ...


@dataclass(frozen=True)
class SegmentedResult:
    """A clip restored in segments: what was written, how much an earlier run had done, what each segment cost."""

    output: str
    frames: int
    duration_s: float
    segments: int
    segments_kept: int  # finished by an earlier, interrupted run
    frames_kept: int
    audio: str  # "copied", "re-encoded" or "none"
    total_s: float
    join_s: float
    records: tuple[SegmentRecord, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"output": self.output, "frames": self.frames, "duration": round(self.duration_s, 6),
                "segments": self.segments, "segments_kept": self.segments_kept, "frames_kept": self.frames_kept,
                "audio": self.audio, "total_s": round(self.total_s, 3), "join_s": round(self.join_s, 3),
                "notes": list(self.notes)}


def settings_text(options: RestoreOptions, crf: int) -> str:
    """What the restored pixels depend on besides the input, as stable JSON (a resumed run must match it)."""
    return json.dumps({"options": asdict(options), "crf": crf}, sort_keys=True, default=str)


class LocalRunner:
    """Segments one after another in this process: one frame session (networks resident) for all of them."""

    def __init__(self, restorer: Any, options: RestoreOptions, crf: int, stop: threading.Event | None = None,
                 engine: Any = None) -> None:
        self.restorer, self.options, self.crf, self.stop, self.engine = restorer, options, crf, stop, engine

    def __call__(self, plan: SegmentPlan, pending: list[Segment], folder: Path,
                 on_frame: Callable[[], None]) -> Iterator[SegmentRecord]:
        from gpen_core.platform.meter import PeakMeter
        from gpen_core.video.segment_run import restore_segment

        engine = self.engine or _frame_engine(self.restorer, self.options, plan.input)
        try:
            for seg in pending:
                with PeakMeter(getattr(engine, "device", "cpu")) as meter:
                    done = restore_segment(plan.input, seg, folder / seg.file, engine, self.crf, on_frame=on_frame,
                                           stop=self.stop)
                p = meter.peaks
                yield SegmentRecord(seg.index, done.frames, done.seconds, done.faces_max, p.rss_bytes if p else None,
                                    p.vram_reserved_bytes if p else None, f"pid {os.getpid()}", done.notes)
        finally:
            if self.engine is None:
                engine.close()  # the frame session holds the restorer's lock


def _frame_engine(restorer: Any, options: RestoreOptions, src: str) -> Any:
    from gpen_core.video.engine_seam import FrameEngine

    return FrameEngine(restorer, options, upright_size(src))


def upright_size(src: str) -> tuple[int, int]:
    """The clip's frame size as displayed (width, height): its first frame, turned upright."""
    import av

    from gpen_core.video.frames import upright_rgb
    from gpen_core.video.probe import open_clip

    c = open_clip(src)
    try:
        rf = av.video.reformatter.VideoReformatter()
        for frame in c.decode(c.streams.video[0]):
            rgb = upright_rgb(frame, rf)[0]
            return rgb.shape[1], rgb.shape[0]
    finally:
        c.close()
    raise InputError(f"{src} has no frame that decodes: it is empty or damaged from its start")


def prepare(src: str, dst: Path, settings: str, segment_seconds: float, fresh: bool) -> tuple[SegmentPlan, Path, list[str]]:
    """(the plan, the work folder, notes): the folder's plan when it fits this run, else a new one.

    InputError when the folder holds another run's plan and ``fresh`` is not set: hours of work are
    never thrown away without being asked.
    """
    from gpen_core.video.segments import plan_segments, read_plan, same_source, work_folder, write_plan

    folder = work_folder(dst)
    notes: list[str] = []
    if folder.exists() and fresh:
        shutil.rmtree(folder)
        notes.append("--fresh: the segments of an earlier run were removed")
    plan = read_plan(folder) if folder.exists() else None
    if plan is not None:
        why = same_source(plan, src, settings, segment_seconds)
        if why:
            raise InputError(f"{folder} holds an earlier run's segments, but {why}. Restore with the same input and options "
                             "to resume it, or add --fresh to start over (its segments are deleted)")
        return plan, folder, notes
    folder.mkdir(exist_ok=True)
    plan = plan_segments(src, segment_seconds, settings)
    write_plan(folder, plan)
    return plan, folder, notes


def finished(plan: SegmentPlan, folder: Path) -> list[Segment]:
    """The segments an earlier run completed, checked (they decode to the plan's frames); partial files removed."""
    from gpen_core.video.join import check_segment

    for p in folder.glob("*.partial"):  # a segment or plan being written when the run was killed
        p.unlink(missing_ok=True)
    done = []
    for seg in plan.segments:
        path = folder / seg.file
        if path.exists():
            if check_segment(path, plan, seg.index):
                done.append(seg)
            else:
                path.unlink()  # damaged (power loss before the data reached the disk): redone
    return done


def restore_in_segments(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    runner: Runner,
    settings: str,
    *,
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS,
    fresh: bool = False,
    progress: Progress | None = None,
    on_record: Callable[[SegmentRecord], None] | None = None,
) -> SegmentedResult:
    """Restore ``src`` into ``dst`` (H.264 MP4) segment by segment, resuming an interrupted run (module doc).

    ``runner``: :class:`LocalRunner` or the Ray one. ``settings``: :func:`settings_text` of what the
    runner restores with (a resumed run must match it). ``on_record``: each segment's record, kept
    ones included (the CLI writes them to manifest.jsonl). InputError for an unusable input or a work
    folder from another run; the runner's own errors pass through, the finished segments kept.
    """
    from gpen_core.video.join import join_segments
    from gpen_core.video.output import check_output

    t0 = time.perf_counter()
    src_s, dst_p = os.path.abspath(os.fspath(src)), Path(dst)
    check_output(dst_p)
    plan, folder, notes = prepare(src_s, dst_p, settings, segment_seconds, fresh)
    kept = finished(plan, folder)
    kept_ids = {s.index for s in kept}
    records = [SegmentRecord(s.index, s.frames, 0.0, kept=True) for s in kept]
    count = [sum(s.frames for s in kept)]
    frames_kept = count[0]
    if progress is not None:
        progress(count[0], plan.frames)
    if on_record is not None:
        for r in records:
            on_record(r)

    def on_frame() -> None:
        count[0] += 1
        if progress is not None:
            progress(count[0], plan.frames)

    pending = [s for s in plan.segments if s.index not in kept_ids]
    for rec in runner(plan, pending, folder, on_frame) if pending else ():
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    t_join = time.perf_counter()
    audio = join_segments(src_s, plan, folder, dst_p)
    join_s = time.perf_counter() - t_join
    shutil.rmtree(folder, ignore_errors=True)
    if audio == "re-encoded":
        notes.append("the input's audio is in a codec an MP4 cannot hold as it is: re-encoded to AAC")
    if kept:
        notes.append(f"resumed: {len(kept)} of {len(plan.segments)} segments ({frames_kept} frames) were kept from an "
                     "earlier run")
    for r in records:
        notes.extend(n for n in r.notes if n not in notes)
    return SegmentedResult(str(dst_p), plan.frames, plan.duration_s, len(plan.segments), len(kept), frames_kept, audio,
                           time.perf_counter() - t0, join_s, tuple(sorted(records, key=lambda r: r.index)), tuple(notes))


def manifest_line(run_id: str, src: str, rec: SegmentRecord) -> str:
    """One manifest.jsonl line for a segment (beside the output, appended; batch.py's format for photos)."""
    return json.dumps({"run": run_id, "input": src, "segment": rec.index, "status": "kept" if rec.kept else "ok",
                       "frames": rec.frames, "seconds": round(rec.seconds, 3), "faces_max": rec.faces_max,
                       "peaks": {"rss_bytes": rec.peak_rss_bytes, "vram_bytes": rec.peak_vram_bytes},
                       "worker": rec.worker, "notes": list(rec.notes)})
