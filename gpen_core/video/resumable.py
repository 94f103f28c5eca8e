"""Hours of video, resumable: :func:`restore_in_segments` cuts a clip at keyframes, has a runner (:class:`LocalRunner`
or Ray's) restore each segment into its own file, joins them, and resumes a killed run. docs/video-segments.md."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from gpen_core.errors import InputError
from gpen_core.options import RestoreOptions
from gpen_core.platform.meter import PeakMeter, format_bytes
from gpen_core.progress import CountProgress as Progress  # frames done, the clip's frames
from gpen_core.result import Peaks
from gpen_core.video.engine_seam import FrameEngine, Tally, clip_device
from gpen_core.video.errors import no_frames
from gpen_core.video.frames import upright_rgb, written_notes
from gpen_core.video.identity import merged
from gpen_core.video.join import check_segment, join_segments
from gpen_core.video.limits import FrameGuard
from gpen_core.video.output import check_output
from gpen_core.video.plan_file import plan_segment_count, read_plan, same_cuts, same_source, write_plan
from gpen_core.video.probe import open_video, preflight
from gpen_core.video.result import VideoResult
from gpen_core.video.segment_run import SegmentRecord, restore_segment
from gpen_core.video.segments import DEFAULT_SEGMENT_SECONDS, FinishedFile, Segment, SegmentPlan, plan_segments
from gpen_core.video.steady import Steadier
from gpen_core.video.work_dir import WorkFolder, is_ours, open_work_folder

# Clips at least this long go in segments unless told otherwise: past it a crash costs more than the join.
SEGMENTS_FROM_S = 600.0


@dataclass(frozen=True)
class SegmentedResult(VideoResult):
    """A one-pass result's every field (``peaks``: this process's; Ray workers' higher ones named in ``peaks.shared``;
    ``damage`` None: a segment that does not decode to the plan is refused), and ``segments`` cut,
    ``segments_kept``/``frames_kept`` from an interrupted run, ``join_s``, each segment's ``records`` (by index)."""

    segments: int = 0
    segments_kept: int = 0
    frames_kept: int = 0
    join_s: float = 0.0
    records: tuple[SegmentRecord, ...] = ()

    def to_json(self) -> dict:
        return {**super().to_json(), "segments": self.segments, "segments_kept": self.segments_kept,
                "frames_kept": self.frames_kept, "join_s": round(self.join_s, 3)}


class Runner(Protocol):
    """Restores segments into ``folder`` (each as ``folder / seg.file``), yielding each's record as it finishes."""

    options: RestoreOptions  # what the segments are restored with: the clip's notes are said for them

    def __call__(self, plan: SegmentPlan, pending: list[Segment], folder: Path,
                 on_frame: Callable[[], None]) -> Iterator[SegmentRecord]: ...


def settings_text(options: RestoreOptions, crf: int) -> str:
    """What the restored pixels depend on besides the input, as stable JSON (a resumed run must match it); a photo's
    pixel limit is not among them."""
    kept = {k: v for k, v in asdict(options).items() if k != "max_pixels"}
    return json.dumps({"options": kept, "crf": crf}, sort_keys=True, default=str)


class LocalRunner:
    """Segments one after another in this process: one frame session (networks resident) for all of them."""

    def __init__(self, restorer: Any, options: RestoreOptions, crf: int, stop: threading.Event | None = None,
                 engine: Any = None) -> None:
        self.restorer, self.options, self.crf, self.stop, self.engine = restorer, options, crf, stop, engine

    @property
    def device(self) -> str:
        """Where its segments run (read when a run starts: an unknown --device is that clip's error)."""
        return clip_device(self.engine, self.restorer)

    def __call__(self, plan: SegmentPlan, pending: list[Segment], folder: Path,
                 on_frame: Callable[[], None]) -> Iterator[SegmentRecord]:
        engine = self.engine or FrameEngine(self.restorer, self.options, upright_geometry(plan.input)[0])
        try:
            for seg in pending:
                with PeakMeter(self.device) as meter:
                    done = restore_segment(plan.input, seg, folder / seg.file, engine, self.crf, on_frame=on_frame,
                                           stop=self.stop)
                yield done.measured(meter.peaks, f"pid {os.getpid()}")
        finally:
            if self.engine is None:
                engine.close()  # the frame session holds the restorer's lock


def upright_geometry(src: str) -> tuple[tuple[int, int], int]:
    """(upright size, display rotation in degrees) of the clip's first decoded frame, checked by FrameGuard."""
    import av

    c, info = open_video(src)
    with c:
        try:
            for frame in c.decode(c.streams.video[0]):
                FrameGuard(src, info.size).check(frame, None, None)
                rgb, rotation, _ = upright_rgb(frame, av.video.reformatter.VideoReformatter())
                return (rgb.shape[1], rgb.shape[0]), rotation
        except (av.FFmpegError, EOFError) as exc:  # as one pass's decoder: a damaged start is the input's fault
            raise no_frames(decoder=str(exc).strip() or type(exc).__name__) from None
    raise no_frames()


@dataclass
class StartedRun:
    """What a run starts from: the plan (checked against the input), its locked work folder, notes so far."""

    plan: SegmentPlan
    work: WorkFolder
    notes: list[str]


def prepare(src: str, dst: Path, settings: str, segment_seconds: float, fresh: bool) -> StartedRun:
    """The folder's plan when it fits this run, else a new one; the work folder locked (released on an error).
    InputError when it holds another run's plan (or a bad one) and not ``fresh``: hours of work are never thrown
    away unasked; WorkFolderBusy while another run holds it."""
    work = open_work_folder(dst)
    notes: list[str] = []
    try:
        if fresh and work.clear(plan_segment_count(work.path)):
            notes.append("--fresh: the segments of an earlier run were removed")
        plan = read_plan(work.path)
        if plan is not None:
            why = same_source(plan, src, settings, segment_seconds) or same_cuts(
                plan, plan_segments(src, segment_seconds, settings))
            if why:
                raise InputError(f"{work.path} holds an earlier run's segments, but {why}. Restore with the same input "
                                 "and options to resume it, or add --fresh to start over (its segments are deleted)")
        else:
            plan = plan_segments(src, segment_seconds, settings)
            left = work.clashes(len(plan.segments))
            if left:
                raise InputError(f"{work.path} holds files this program did not write under the names it writes "
                                 f"({', '.join(left[:5])}); it does not write over them: move them elsewhere, or "
                                 "choose another output name")
            write_plan(work.path, plan)
        return StartedRun(plan, work, notes)
    except BaseException:
        work.release()
        raise


def finished(plan: SegmentPlan, folder: Path) -> tuple[list[Segment], tuple[FinishedFile, ...], list[str]]:
    """(the segments an earlier run completed, their records, notes); the run's other files removed, to be redone.
    Kept: a file that decodes to the plan's frames and times, with the size and sha256 the plan recorded (or none,
    when killed between its rename and the plan's update)."""
    for p in folder.iterdir():  # a segment or plan being written when the run was killed
        if p.name.endswith(".partial") and is_ours(p.name, len(plan.segments)):
            p.unlink(missing_ok=True)
    recorded = {f.index: f for f in plan.finished}
    done, records, notes = [], [], []
    for seg in plan.segments:
        path = folder / seg.file
        if not os.path.lexists(path):
            continue
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise InputError(f"{path} is a folder, not a segment this program wrote: move it out of {folder} and run "
                             "again")
        now, rec = file_record(path, seg.index), recorded.get(seg.index)
        if rec is not None and now != rec:
            notes.append(f"segment {seg.index}'s file ({seg.file}) changed since it was written (its size or "
                         "sha256 differs: damaged or replaced): it was restored again")
        elif now.bytes > 0 and check_segment(path, plan, seg.index):
            done.append(seg)
            records.append(rec or now)  # the plan's record carries the segment's tally
            continue
        path.unlink()  # changed, damaged (power loss before the data reached the disk) or a link: redone
    return done, tuple(records), notes


def file_record(path: Path, index: int) -> FinishedFile:
    """A segment file's size and sha256 as the plan records them (a link is read as nothing: never kept)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return FinishedFile(index, -1, "")
    with os.fdopen(fd, "rb") as f:
        return FinishedFile(index, os.fstat(fd).st_size, hashlib.file_digest(f, "sha256").hexdigest())


def restore_in_segments(src: str | os.PathLike[str], dst: str | os.PathLike[str], runner: Runner, settings: str, *,
                        segment_seconds: float = DEFAULT_SEGMENT_SECONDS, fresh: bool = False,
                        progress: Progress | None = None, on_record: Callable[[SegmentRecord], None] | None = None,
                        audio: bool = True) -> SegmentedResult:
    """Restore ``src`` into ``dst`` (H.264 MP4) segment by segment, resuming an interrupted run.

    ``runner``: :class:`LocalRunner` or the Ray one. ``settings``: :func:`settings_text` of what the runner restores
    with. ``on_record``: each segment's record, kept ones included. ``audio`` False: no sound (noted). InputError
    for an unusable input or another run's work folder; the runner's errors pass through, finished segments kept."""
    t0 = time.perf_counter()
    src_s, dst_p = os.path.abspath(os.fspath(src)), Path(dst)
    check_output(dst_p, src_s)  # also refuses the input itself: the join would replace it
    with PeakMeter(getattr(runner, "device", None)) as meter:
        with open_video(src_s)[0] as container:  # refused and noted as one pass is, before any segment is restored
            ahead = preflight(container, src_s, audio)
        prep = prepare(src_s, dst_p, settings, segment_seconds, fresh)
        try:
            prep.notes[:0] = ahead
            records = _run_pending(prep, runner, progress, on_record)
            t_join = time.perf_counter()
            joined = join_segments(src_s, prep.plan, prep.work.path, dst_p, audio=audio)
            join_s = time.perf_counter() - t_join
            left = prep.work.remove(len(prep.plan.segments))
        finally:
            prep.work.release()  # an error or a stop: the lock goes, the segments stay for the same command to resume
    plan, notes = prep.plan, prep.notes
    if left:
        notes.append(f"{prep.work.path} was kept: it holds files this run did not write ({', '.join(left[:5])})")
    notes.extend(joined.notes)
    ran = [r for r in records if not r.kept]
    frames_kept = sum(r.frames for r in records if r.kept)
    if len(ran) < len(records):
        notes.append(f"resumed: {len(records) - len(ran)} of {len(plan.segments)} segments ({frames_kept} frames) were "
                     "kept from an earlier run")
    upright, rotation = upright_geometry(src_s)
    # each said once, as one pass says them
    notes = list(dict.fromkeys([*notes, *(n for r in records for n in r.notes),
                                *_tally_notes(records, runner.options), *written_notes(upright, rotation)]))
    assert meter.peaks is not None
    frames = sum(r.frames for r in records)  # what the joined file holds, as its segments were checked or counted
    # seconds a frame are this run's over the frames it restored: kept segments' frames cost it nothing
    total_s = time.perf_counter() - t0
    container, written = open_video(dst_p)  # its size from the written file's header
    container.close()
    ordered = tuple(sorted(records, key=lambda r: r.index))
    mode = next((r.mode for r in ran if r.mode), "as the earlier run" if records else "")
    return SegmentedResult(
        output=str(dst_p), frames=frames, fps=frames / plan.duration_s if plan.duration_s > 0 else 0.0,
        duration_s=plan.duration_s, size=written.size, mode=mode,
        mode_reason=next((r.mode_reason for r in ran if r.mode_reason), ""), audio=joined.handling,
        crf=int(getattr(runner, "crf", 0)), seconds_per_frame=total_s / max(1, frames - frames_kept), total_s=total_s,
        faces_per_frame_max=max((r.faces_max for r in records), default=0), peaks=_with_workers(meter.peaks, ran),
        rotation=rotation, lookahead_frames=Steadier.lookahead, notes=tuple(notes),
        segments=len(plan.segments), segments_kept=len(records) - len(ran), frames_kept=frames_kept, join_s=join_s,
        records=ordered, runtimes=next((tuple(r.runtimes) for r in ran if r.runtimes), ()),
        identity=merged([r.identity for r in ordered]),
        planned_bytes=max((r.planned_bytes for r in ran if r.planned_bytes is not None), default=None),
    )


def _tally_notes(records: list[SegmentRecord], options: RestoreOptions) -> list[str]:
    """The notes with the clip's counts (max faces, identity limit, face check), once for the whole clip: each
    segment's tally summed, kept segments' from the plan."""
    tallies = [r.tally for r in records if r.tally is not None]
    uncounted = sum(1 for r in records if r.kept and r.tally is None)
    # "no face in any frame" only when every frame was counted
    notes = sum(tallies, Tally()).notes(options, whole=not uncounted) if tallies else []
    if uncounted and (tallies or all(r.kept for r in records)):
        many = uncounted != 1
        notes.append(f"{uncounted} segment{'s' if many else ''} kept from an earlier run {'are' if many else 'is'} not "
                     "counted in what the notes say of the faces found, max faces, the identity limit and the face check: the plan has no "
                     "counts for them (written by an earlier version, or the run was killed as they finished)")
    return notes


def _with_workers(peaks: Peaks, ran: list[SegmentRecord]) -> Peaks:
    """This process's peaks; where a segment worker (Ray: a process of its own) peaked higher, ``shared`` says so."""
    worker = max((r.peak_rss_bytes or 0 for r in ran), default=0)
    if worker <= peaks.rss_bytes:
        return peaks
    why = f"this process only; the highest segment worker's peak was {format_bytes(worker)}"
    return replace(peaks, shared="; ".join(x for x in (peaks.shared, why) if x))


def _run_pending(prep: StartedRun, runner: Runner, progress: Progress | None,
                 on_record: Callable[[SegmentRecord], None] | None) -> list[SegmentRecord]:
    """The kept segments' records, then the runner's as they finish (progress in frames), each finished
    file recorded in the plan as it finishes."""
    progress = progress or (lambda done, total: None)
    on_record = on_record or (lambda rec: None)
    plan, folder = prep.plan, prep.work.path
    kept, kept_records, why = finished(plan, folder)
    prep.notes.extend(why)
    if plan.finished != kept_records:  # the redone files' records forgotten, unrecorded kept ones recorded
        plan = replace(plan, finished=kept_records)
        write_plan(folder, plan)
    records = [SegmentRecord(s.index, s.frames, 0.0, kept=True, tally=f.tally) for s, f in zip(kept, kept_records)]
    count = [sum(s.frames for s in kept)]
    progress(count[0], plan.frames)
    for r in records:
        on_record(r)

    def on_frame() -> None:
        count[0] += 1
        progress(count[0], plan.frames)

    pending = [s for s in plan.segments if s not in kept]
    for rec in runner(plan, pending, folder, on_frame) if pending else ():
        # Recorded as it finishes, so a resume keeps this file only while it still holds these bytes.
        done = replace(file_record(folder / plan.segments[rec.index].file, rec.index), tally=rec.tally)
        plan = replace(plan, finished=(*plan.finished, done))
        write_plan(folder, plan)
        records.append(rec)
        on_record(rec)
    return records


def segment_record(src: str, rec: SegmentRecord) -> dict[str, Any]:
    """A segment's ``--json`` line, and its manifest.jsonl line once the manifest's writer adds ``run``."""
    return {"input": src, "segment": rec.index,
            "status": "kept" if rec.kept else "ok", "frames": rec.frames, "seconds": round(rec.seconds, 3),
            "faces_max": rec.faces_max,
            "peaks": {"rss_bytes": rec.peak_rss_bytes, "vram_reserved_bytes": rec.peak_vram_bytes},
            "planned_bytes": rec.planned_bytes, "worker": rec.worker, "notes": list(rec.notes),
            "tally": None if rec.tally is None else asdict(rec.tally),
            "identity": None if rec.identity is None else rec.identity.to_json()}