"""``restore … --ray`` on a folder or object-store prefix: warmed Restorer actors restore what Ray Data reads; the
driver writes every output and a manifest.jsonl record per input. docs/ray.md."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from gpen_core.errors import GPENError, InputError
from gpen_core.images import outputs
from gpen_core.images.limits import IMAGE_SUFFIXES, NEITHER, SUBFOLDER
from gpen_core.result_json import passed_over_record, skipped_record
from gpen_core.scaleout.runtime import RaySettings, WorkerPool, worker_name

MANIFEST = "manifest.jsonl"
READ_CPUS = 0.25  # each read task: file reading is I/O, and it must always find a CPU slot
RESERVED_CPUS = 0.5  # never given to actors, so reads can run (the 2-core deadlock)
MAX_CPUS_PER_WORKER = 4.0  # more torch threads per photo stop paying off; more workers do

Record = dict[str, Any]


@dataclass(frozen=True)
class BatchConfig:
    """One ``restore --ray`` run."""

    # A local folder or file, or a URI Ray Data can read (s3://bucket/scans, gs://…).
    source: str
    # Folder for the restored files and manifest.jsonl (on the machine running the command).
    output: Path
    # What each photo asks for (mode, model, alpha, …); the same as the plain CLI's.
    options: Any = None  # RestoreOptions; None = defaults
    ray: RaySettings = RaySettings()  # where the actors run, how many, on which device, with which weights
    overwrite: bool = False


@dataclass(frozen=True)
class BatchSummary:
    """What a run did; ``records`` are the manifest's lines, in the order they finished."""

    records: list[Record] = field(default_factory=list)
    manifest: Path | None = None
    seconds: float = 0.0
    # This run's id: every record it appended to manifest.jsonl carries it as "run".
    run_id: str = ""
    workers: int = 0
    cpus_per_worker: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for r in self.records if r["status"] == status)

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, else the first failure's code (2 bad input, 3 weights, 4 memory, 1 other)."""
        return next((int(r.get("exit_code") or 1) for r in self.records if r["status"] == "error"), 0)


@dataclass(frozen=True)
class _Input:
    shown: str  # as the user would write it: the local path or the URI
    read_path: str  # what Ray Data reads with the filesystem below
    stem: str  # the output's name without extension: unique per input (images.outputs.output_stems)
    local: Path | None  # the file on this machine (the output must not be it); None for an object store


def list_inputs(source: str, output: Path | None = None) -> tuple[list[_Input], Any, list[tuple[str, str]]]:
    """The image files under ``source`` (sorted), the pyarrow filesystem to read them with, and (entry as the user
    would write it, why) for each of a folder's entries skipped. InputError for a folder holding videos."""
    from pyarrow import fs as pafs

    skipped: list[tuple[str, str]] = []
    if "://" in source:
        filesystem, listed, skipped = _list_uri(source, output)
    else:  # (as the user would write it, like the plain CLI's records; what Ray Data reads)
        p, filesystem = Path(source), pafs.LocalFileSystem()
        if p.is_dir():  # the plain CLI's rule
            found, skips = outputs.folder_inputs(p, output)
            photos = [q for q in found if q.suffix.lower() in IMAGE_SUFFIXES]
            _refuse_clips(source, "", [q.name for q in found if q not in photos])  # told by their bytes already
            listed = [(str(q), str(p.resolve() / q.name)) for q in photos]
            skipped = [(str(q), why) for q, why in skips]
        elif p.is_file():
            listed = [(source, str(p.resolve()))]
        else:
            raise InputError(f"input {p} does not exist")
    # The plain CLI's naming rule: same.jpg and same.png become same_jpg.* and same_png.*.
    stems = outputs.output_stems([PurePosixPath(path).name for _, path in listed])
    local = "://" not in source
    inputs = [_Input(shown, path, stem, Path(path) if local else None) for (shown, path), stem in zip(listed, stems)]
    return inputs, filesystem, skipped


def _list_uri(source: str, output: Path | None) -> tuple[Any, list[tuple[str, str]], list[tuple[str, str]]]:
    """An object store's (filesystem, (URI, path) of each image sorted, (URI, why) of each entry skipped) for
    ``source``, a file or a prefix; a file:// one's ``output`` folder is not said."""
    from pyarrow import fs as pafs

    try:
        filesystem, base = pafs.FileSystem.from_uri(source)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for unknown schemes and credentials
        raise InputError(f"cannot open {source} ({exc}); Ray Data reads local paths, s3://, gs:// and hdfs:// URIs") from None
    scheme = source.split("://", 1)[0] + "://"
    info = filesystem.get_file_info(base)
    if info.type == pafs.FileType.File:
        return filesystem, [(scheme + info.path, info.path)], []
    if info.type != pafs.FileType.Directory:
        raise InputError(f"input {source} does not exist")
    entries = filesystem.get_file_info(pafs.FileSelector(base, recursive=False))
    photo = {f.path: PurePosixPath(f.path).suffix.lower() in IMAGE_SUFFIXES for f in entries}
    files = sorted(f.path for f in entries if f.type == pafs.FileType.File and photo[f.path])
    others = sorted(f.path for f in entries if f.type == pafs.FileType.File and not photo[f.path])
    _refuse_clips(source, scheme, _clips(filesystem, others))
    # Said in the plain CLI's words (images.outputs.folder_inputs); hidden entries and the run's output are nobody's.
    local = isinstance(filesystem, pafs.LocalFileSystem) and output is not None
    folders = [(f.path, "a folder, not a file" if photo[f.path] else SUBFOLDER) for f in entries
               if f.type == pafs.FileType.Directory and (photo[f.path] or f.base_name[:1] != "." and not (
                   local and outputs.same_file(Path(f.path), Path(output))))]
    if not files:
        raise InputError(f"folder {source} has no images ({', '.join(IMAGE_SUFFIXES)})")
    neither = [(p, NEITHER) for p in others if not PurePosixPath(p).name.startswith(".")]
    skipped = sorted((scheme + p, why) for p, why in [*folders, *neither])
    return filesystem, [(scheme + p, p) for p in files], skipped


# Containers looks_like_video tells: such a name is a clip without a read (one round trip each in an object store).
CLIP_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".ts", ".mts", ".m2ts", ".mpg", ".mpeg",
                           ".flv", ".ogv"})
SNIFF_THREADS = 16  # the other files' first bytes read at once: an object store answers each after a round trip


def _clips(filesystem: Any, others: list[str]) -> list[str]:
    """The videos among ``others`` (paths in ``filesystem``, not photos by name): by a video suffix, else by their
    first bytes as the plain CLI tells them, read in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    from gpen_core.images.limits import VIDEO_HEAD_BYTES, looks_like_video

    def is_clip(path: str) -> bool:
        try:
            with filesystem.open_input_stream(path) as f:
                return looks_like_video(f.read(VIDEO_HEAD_BYTES))
        except OSError:  # unreadable: Ray Data could not read it either; it is said as skipped
            return False

    shown = [p for p in others if not PurePosixPath(p).name.startswith(".")]  # hidden: left out, as a local folder's
    named = [p for p in shown if PurePosixPath(p).suffix.lower() in CLIP_SUFFIXES]
    unknown = [p for p in shown if PurePosixPath(p).suffix.lower() not in CLIP_SUFFIXES]
    with ThreadPoolExecutor(max_workers=SNIFF_THREADS) as pool:
        sniffed = [p for p, clip in zip(unknown, pool.map(is_clip, unknown)) if clip]
    return sorted(named + sniffed)


def _refuse_clips(source: str, scheme: str, clips: list[str]) -> None:
    """InputError naming a folder's ``clips`` (their paths), in an object store too: the batch restores photos only,
    and a clip left out would be in no record."""
    if clips:
        names = [PurePosixPath(p).name for p in clips]
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        how = (f"restore each video on its own (`python -m gpen_core restore {Path(source) / names[0]} -o OUT.mp4 --ray`: "
               "segments on Ray workers)" if not scheme else
               f"copy each video to this machine and restore it on its own ({scheme}{clips[0]} → `python -m gpen_core "
               f"restore {names[0]} -o OUT.mp4 --ray`: segments on Ray workers)")
        raise InputError(f"folder {source} holds {len(clips)} video{'s' if len(clips) > 1 else ''} ({shown}), and --ray "
                         f"on a folder restores its photos only: {how}, or move them out")


class RestoreWorker:
    """One Ray Data actor, a warmed Restorer: rows ``{"bytes", "path"}`` → ``{"record": JSON, "encoded": bytes}``.
    A photo's error is its record, never a raise (that would abort the whole job)."""

    def __init__(self, options: Any, pool: WorkerPool) -> None:
        self.options, self.worker = options, worker_name()
        self.restorer, self.warm_error, warmup_s = pool.warm(options)
        self.warmup_s = round(warmup_s, 3)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        done = [self.restore_one(bytes(data), str(path)) for data, path in zip(batch["bytes"], batch["path"])]
        return {"record": np.array([json.dumps(rec) for rec, _ in done], dtype=object),
                "encoded": np.array([out for _, out in done], dtype=object)}

    def restore_one(self, data: bytes, path: str) -> tuple[Record, bytes]:
        from gpen_core.result_json import peaks_record, result_record
        from gpen_core.platform.meter import PeakMeter

        rec: Record = {"path": path, "worker": self.worker, "worker_warmup_s": self.warmup_s}
        t = time.perf_counter()
        meter: PeakMeter | None = None
        try:
            if self.warm_error is not None:
                raise self.warm_error
            meter = PeakMeter(self.restorer.device)  # VRAM on the worker's own device; may raise InputError
            with meter:
                result = self.restorer(data, self.options)
        except GPENError as exc:
            rec.update(status="error", error=str(exc), error_type=type(exc).__name__, exit_code=exc.exit_code)
        except Exception as exc:  # a bug or a decoder crash: still this file's record, never the job's end
            rec.update(status="error", error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__, exit_code=1)
        else:
            rec.update(status="ok", **result_record(result))
            return rec, result.encoded
        peaks = meter.peaks if meter is not None else None
        rec["peaks"] = None if peaks is None else peaks_record(peaks)
        rec["timings"] = {"total_s": round(time.perf_counter() - t, 4)}
        return rec, b""


def plan_resources(cluster_cpus: float, cluster_gpus: float, workers: int | None, gpus_per_worker: float,
                   cpus_per_worker: float | None, memory_per_worker: float = 0.0,
                   cluster_memory: float = math.inf) -> tuple[int, float]:
    """(actors, CPUs per actor) leaving RESERVED_CPUS free for reading; InputError naming what would fit
    when it cannot (Ray waits for ever, without an error, for an actor it cannot place)."""
    from gpen_core.platform.meter import format_bytes

    if gpus_per_worker < 0 or (workers is not None and workers < 1):
        raise InputError("--workers must be at least 1 and --gpus-per-worker at least 0")
    if gpus_per_worker > 0 and cluster_gpus < gpus_per_worker:
        raise InputError(f"--gpus-per-worker {gpus_per_worker} asks for a GPU, but the Ray cluster has {cluster_gpus:g} GPUs")
    fit_memory = int(cluster_memory // memory_per_worker) if memory_per_worker > 0 and cluster_memory < math.inf else None
    if fit_memory == 0:
        raise InputError(f"one worker reserves {format_bytes(int(memory_per_worker))} (idle size + the mode's peak) and "
                         f"the Ray cluster offers {format_bytes(int(cluster_memory))}: use --mode low or a bigger node")
    if workers is None:
        workers = int(cluster_gpus // gpus_per_worker) if gpus_per_worker > 0 else int(cluster_cpus // 2)
        workers = max(1, min(workers, fit_memory or workers))
    elif fit_memory is not None and workers > fit_memory:
        raise InputError(f"{workers} workers reserve {format_bytes(int(workers * memory_per_worker))} and the Ray cluster "
                         f"offers {format_bytes(int(cluster_memory))}: use --workers {fit_memory} or fewer")
    usable = cluster_cpus - RESERVED_CPUS
    if cpus_per_worker is None:
        cpus_per_worker = min(MAX_CPUS_PER_WORKER, usable / workers)
        cpus_per_worker = math.floor(cpus_per_worker * 4) / 4  # quarter CPUs: tidy numbers in the records
    if cpus_per_worker <= 0 or workers * cpus_per_worker > usable + 1e-9:
        raise InputError(
            f"{workers} workers do not fit in {cluster_cpus:g} CPUs while leaving {RESERVED_CPUS} for reading "
            f"(Ray would hang with no error); use --workers {max(1, int(usable // 0.25))} or fewer"
        )
    return workers, cpus_per_worker


def plan_pool(session: Any, settings: RaySettings, mode: str, jobs: int) -> WorkerPool:
    """The pool for ``jobs`` photos or segments in ``mode`` on ``session``, as ``settings`` asks, never more workers
    than jobs (idle ones only cost start-up and memory). InputError as plan_resources."""
    from gpen_core.scaleout.runtime import worker_pool

    pool = worker_pool(settings, 0, 0.0, mode)
    plan = dict(gpus_per_worker=pool.gpus, cpus_per_worker=None, memory_per_worker=pool.memory,
                cluster_memory=session.memory)
    n, cpus = plan_resources(session.cpus, session.gpus, settings.workers, **plan)
    n, cpus = plan_resources(session.cpus, session.gpus, jobs, **plan) if n > jobs else (n, cpus)
    return replace(pool, workers=n, cpus=cpus)


@contextmanager
def appended_manifest(folder: Path) -> Iterator[tuple[Callable[[Record], Record], str]]:
    """``(write, run id)``: ``write(record)`` appends ``record`` to ``folder``/manifest.jsonl under this run's id and
    returns it as written. Appended, never rewritten: a resumed run must not turn the first run's records into
    "skipped". The id: the run's UTC start (sortable, readable) and a random tail (two runs in one second)."""
    import uuid

    outputs.check_output_file(folder / MANIFEST)  # a folder or a pipe by its name: said, never written into
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    with open(folder / MANIFEST, "a", encoding="utf-8") as mf:

        def write(rec: Record) -> Record:
            rec = {"run": run_id, **rec}
            mf.write(json.dumps(rec) + "\n")
            mf.flush()
            return rec

        yield write, run_id


def run_batch(config: BatchConfig, on_record: Callable[[Record, int, int], None] | None = None) -> BatchSummary:
    """Every image under ``config.source`` into ``config.output``, one record per input, ``on_record(record, done,
    total)`` as each is written. InputError / WeightsError only for the whole run; a bad photo is an "error" record."""
    from gpen_core.scaleout.runtime import import_ray, ray_session

    ray = import_ray()  # Ray missing: say how to install it before anything else (pyarrow comes with it)
    t0 = time.perf_counter()
    inputs, filesystem, skipped = list_inputs(config.source, config.output)
    out_dir = Path(config.output)
    if out_dir.suffix.lower() in IMAGE_SUFFIXES or out_dir.is_file():
        raise InputError(f"--ray writes into a folder; {out_dir} is a file name. Give a folder for -o")
    manifest = out_dir / MANIFEST
    # The plain CLI's checks, before Ray starts: never the input itself, nor a folder in the way (exit 2 at once).
    outputs.check_result_paths((item.local, out_dir / item.stem, None) for item in inputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    records: list[Record] = []
    total = len(inputs) + len(skipped)
    with appended_manifest(out_dir) as (append, run_id):

        def write(rec: Record) -> None:
            records.append(append(rec))
            if on_record is not None:
                on_record(records[-1], len(records), total)

        for shown, why in skipped:  # said and recorded, as the plain CLI says them
            write(passed_over_record(shown, why))
        todo: list[_Input] = []
        for item in inputs:
            done = None if config.overwrite else outputs.existing_result(out_dir / item.stem, None)
            if done is not None:
                write(skipped_record(item.shown, done))
            else:
                todo.append(item)
        if not todo:
            return BatchSummary(records, manifest, time.perf_counter() - t0, run_id=run_id)
        with ray_session(config.ray.address) as session:
            pool = plan_pool(session, config.ray, getattr(config.options, "mode", "auto"), len(todo))
            by_path = {i.read_path: i for i in todo}
            seen: set[str] = set()
            for row_rec, encoded in _stream(ray, config, todo, filesystem, pool):
                path = row_rec.pop("path")
                seen.add(path)
                item = by_path[path]
                write(_written({"input": item.shown, **row_rec}, out_dir / item.stem, encoded))
            for path in by_path.keys() - seen:  # any input Ray returned no row for still gets its record
                write({"input": by_path[path].shown, "status": "error", "error": "Ray Data returned no result for this file",
                       "error_type": "LostRow", "exit_code": 1, "peaks": None, "timings": None})
            return BatchSummary(records, manifest, time.perf_counter() - t0, run_id, pool.workers, pool.cpus)


def _written(rec: Record, base: Path, encoded: bytes) -> Record:
    """``rec`` once its bytes are written beside ``base``; a failed write is this photo's error, not the run's end."""
    if rec["status"] == "ok":
        dst = outputs.result_path(base, None, rec["format"])
        try:
            outputs.write_atomic(dst, encoded)
        except InputError as exc:
            return {**rec, "status": "error", "error": str(exc), "error_type": "InputError", "exit_code": exc.exit_code}
        rec["output"] = str(dst)
    return rec


def _stream(ray: Any, config: BatchConfig, todo: list[_Input], filesystem: Any,
            pool: WorkerPool) -> Iterator[tuple[Record, bytes]]:
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # the CLI draws its own, per photo
    ctx.print_on_execution_start = False
    ds = ray.data.read_binary_files(
        [i.read_path for i in todo],
        include_paths=True,
        filesystem=filesystem,
        num_cpus=READ_CPUS,
        override_num_blocks=len(todo),  # one photo per block: results stream as each finishes
    )
    ds = ds.map_batches(
        RestoreWorker,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=pool.workers),
        **pool.reserves(),  # memory: see runtime.worker_memory_bytes: our step-down acts before Ray's OOM monitor
        fn_constructor_kwargs={"options": config.options, "pool": pool},
    )
    for row in ds.iter_rows():
        yield json.loads(row["record"]), bytes(row["encoded"])
