"""A long clip's segments on Ray (:class:`RayRunner`): a task per segment reading the input by its path, a Restorer
kept per worker; the driver writes the bytes each returns. docs/video-segments.md, "On Ray"."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpen_core.errors import GPENError
from gpen_core.options import RestoreOptions
from gpen_core.platform import durable
from gpen_core.scaleout.runtime import RaySettings, WorkerPool, worker_name
from gpen_core.video.output import disk_errors
from gpen_core.video.resumable import SegmentRecord
from gpen_core.video.segments import Segment, SegmentPlan

# Segments in flight beyond the workers' count: a small margin, as finished bytes wait in Ray's object store.
EXTRA_IN_FLIGHT = 1
# A worker that dies (killed, out of memory) has its segment tried once more before the run stops.
MAX_RETRIES = 1


class SegmentFailed(GPENError):
    """A segment's restore raised on a Ray worker; the message and exit code are the worker's error's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WorkerDied(GPENError):
    """A segment's worker process died on each of its tries (killed, most often by the kernel or Ray for memory),
    or Ray lost the node or the result: nothing wrong with the input, so the same command resumes."""

    exit_code = 4


# The per-task temp folders: ``gpen-seg-<pid>-…``, so the next task on the machine can tell a killed worker's.
SEGMENT_TEMP_PREFIX = "gpen-seg-"


@dataclass(frozen=True)
class SegmentJob:
    """What every segment task of one clip shares (pickled to each Ray worker with its segment)."""

    size: tuple[int, int]  # the clip's upright frame size, width × height
    options: RestoreOptions
    crf: int  # the segment files' x264 quality
    pool: WorkerPool  # its device, weights and torch threads


def segment_task(src: str, seg: Segment, job: SegmentJob) -> tuple[SegmentRecord | dict[str, Any], bytes]:
    """On a Ray worker: restore ``seg``, return (its record, the file's bytes); an error the user can act
    on as ``{"error", "exit_code"}`` with no bytes."""
    from gpen_core.platform.leftovers import sweep_folders
    from gpen_core.platform.meter import PeakMeter
    from gpen_core.video.engine_seam import FrameEngine
    from gpen_core.video.segment_run import restore_segment

    sweep_folders(Path(tempfile.gettempdir()), SEGMENT_TEMP_PREFIX)  # what killed workers left here
    try:
        restorer = job.pool.restorer()
        prefix = f"{SEGMENT_TEMP_PREFIX}{os.getpid()}-"
        with PeakMeter(restorer.device) as meter, tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            engine = FrameEngine(restorer, job.options, job.size)
            try:
                done = restore_segment(src, seg, Path(tmp) / seg.file, engine, job.crf)
            finally:
                engine.close()
            data = (Path(tmp) / seg.file).read_bytes()
    except GPENError as exc:
        return {"error": str(exc), "exit_code": exc.exit_code}, b""
    return done.measured(meter.peaks, worker_name()), data


@dataclass
class RayRunner:
    """Segments as Ray tasks where ``ray`` says (a local loopback Ray with its address None)."""

    options: RestoreOptions
    crf: int
    ray: RaySettings = RaySettings()
    used_workers: int = 0  # set by a run: how many tasks ran at once

    def __call__(self, plan: SegmentPlan, pending: list[Segment], folder: Path,
                 on_frame: Callable[[], None]) -> Iterator[SegmentRecord]:
        from gpen_core.platform.leftovers import sweep_folders
        from gpen_core.scaleout.batch import plan_pool
        from gpen_core.scaleout.runtime import import_ray, ray_session
        from gpen_core.video.resumable import upright_geometry

        ray = import_ray()
        sweep_folders(Path(tempfile.gettempdir()), SEGMENT_TEMP_PREFIX)  # killed local workers' leftovers
        size = upright_geometry(plan.input)[0]
        with ray_session(self.ray.address) as session:
            pool = plan_pool(session, self.ray, self.options.mode, len(pending))
            self.used_workers = pool.workers
            task = ray.remote(segment_task).options(**pool.reserves(), max_retries=MAX_RETRIES)
            job = SegmentJob(size, self.options, self.crf, pool)
            yield from _drain(ray, lambda seg: task.remote(plan.input, seg, job), pending, folder,
                              pool.workers + EXTRA_IN_FLIGHT, on_frame)


def _drain(ray: Any, submit: Callable[[Segment], Any], pending: list[Segment], folder: Path, limit: int,
           on_frame: Callable[[], None]) -> Iterator[SegmentRecord]:
    """Keep ``limit`` tasks in flight; write each finished segment into ``folder`` and yield its record."""
    todo = list(pending)
    running: dict[Any, Segment] = {}
    try:
        while todo or running:
            while todo and len(running) < limit:
                seg = todo.pop(0)
                running[submit(seg)] = seg
            ready, _ = ray.wait(list(running), num_returns=1)
            seg = running.pop(ready[0])
            rec, data = _result(ray, ready[0], seg)
            if isinstance(rec, dict):
                raise SegmentFailed(f"segment {seg.index} (from {seg.start_s:.1f} s): {rec['error']}", int(rec["exit_code"]))
            with disk_errors(folder, f"segment {seg.file}"):
                durable.write_bytes(folder / seg.file, data, sync=True)  # flushed: a resume trusts a finished segment
            for _ in range(rec.frames):
                on_frame()
            yield rec
    finally:
        for ref in running:  # an error or Ctrl-C: the rest is not wanted now (a resume redoes it)
            ray.cancel(ref, force=True)


def _result(ray: Any, ref: Any, seg: Segment) -> tuple[SegmentRecord | dict[str, Any], bytes]:
    """The task's (record, bytes); WorkerDied when its process died on every try or Ray lost it (a task's own
    bug, RayTaskError, passes: its traceback is what a report needs)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError:
        raise
    except ray.exceptions.RayError as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise WorkerDied(f"segment {seg.index} (from {seg.start_s:.1f} s): its Ray worker died on each of its "
                         f"{1 + MAX_RETRIES} tries ({type(exc).__name__}: {first}); most often that is memory: restore "
                         "with fewer --workers or a lighter --mode, or close other programs") from None

