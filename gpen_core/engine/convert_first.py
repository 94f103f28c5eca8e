"""Convert before a long run: a folder or a clip whose expected work on torch outlasts converting its generator
converts it first, in a child process whose memory is handed back (docs/performance.md, "A long run converts first")."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpen_core.modes import AUTO, MODES, MemoryMode

# Seconds a first-use conversion of the generator takes, per face size, where this machine has not measured
# one: docs/performance.md, "4 strips, to_openvino"; 1024 px: benchmarks/ov_1024.py on 2 shared Zen 4 cores.
CONVERT_S_BUILT_IN = {256: 3.4, 512: 9.3, 1024: 112.0}
BUILT_IN_SOURCE = "an estimate: measured on the project's machines, docs/performance.md"


@dataclass(frozen=True)
class Figure:
    """A figure a decision rests on, and where it comes from (shown beside it)."""

    value: float
    source: str


@dataclass(frozen=True)
class Pending:
    """The run's generator: ``auto`` runs it on OpenVINO here, and it is not converted yet."""

    model: str
    size: int
    dtype: str
    ram: int  # bytes the conversion's child needs: its measured peak above the imports, plus the imports (oom.ENGINE_IMPORT)
    ram_measured: bool  # False: the conversion's peak is estimated from the file size


@dataclass(frozen=True)
class ConvertFirst:
    """What converting before the run came to: ``note`` for stderr and the results' notes, ``seconds`` when it ran."""

    outcome: Literal["nothing to convert", "short run", "no memory", "converted", "failed", "stopped"]
    note: str = ""
    seconds: float | None = None

    @property
    def notes(self) -> list[str]:
        return [self.note] if self.note else []


def pending_generator(mode: MemoryMode, models_dir: str | os.PathLike[str] | None) -> Pending | None:
    """``mode``'s generator when ``auto`` runs it on OpenVINO on this CPU, its weights are here and it is not
    converted yet; else None (nothing to convert first)."""
    from gpen_core.networks.plan import choose_plan
    from gpen_core.platform.oom import engine_import_figures
    from gpen_core.runtimes.openvino import generator as ov
    from gpen_core.weights import lookup as weights

    spec = weights.REGISTRY.get(mode.model)
    path = weights.locate(mode.model, models_dir=models_dir)
    if spec is None or spec.arch is None or path is None or ov.openvino_version() is None:
        return None
    size, dtype = spec.arch.size, choose_plan("cpu", mode.cpu_dtype)[0].dtype
    if ov.choose_mode_backend(mode, "auto", size, dtype, models_dir=models_dir).runtime != "openvino":
        return None
    precision = ov.choose_precision(dtype)[0]
    if ov.graph_is_current(ov.cache_key(Path(path), precision), models_dir):
        return None
    need, measured = ov.conversion_ram(size, Path(path))
    return Pending(mode.model, size, dtype, need + engine_import_figures()["rss"], measured)


def conversion_seconds(p: Pending, models_dir: str | os.PathLike[str] | None) -> Figure:
    """Seconds converting ``p`` takes: this machine's hardware check's measurement, else the built-in estimate."""
    from gpen_core.engine.profile_store import load_profile

    try:
        prof = load_profile("cpu", models_dir)
    except (OSError, ValueError):  # an unreadable store: the estimate says so instead
        prof = None
    rows = prof.backends.rows if prof is not None and prof.backends is not None else ()
    for row in rows:
        if row.model == p.model and row.convert_s:
            return Figure(row.convert_s, f"measured on this machine ({prof.created[:10]})")  # type: ignore[union-attr]
    return Figure(CONVERT_S_BUILT_IN.get(p.size, CONVERT_S_BUILT_IN[512] * (p.size / 512) ** 2), BUILT_IN_SOURCE)


def torch_seconds(p: Pending, models_dir: str | os.PathLike[str] | None) -> Figure | None:
    """The generator's seconds a face on torch: this CPU's speed record, else a CPU of its kind's; None without either."""
    from gpen_core.runtimes.openvino import generator as ov
    from gpen_core.runtimes.openvino.defaults import default_measured, machine

    key = ov.speed_key("gpen", p.size, p.dtype)
    rec = ov.speed_records(models_dir).get(key)
    if rec is not None:
        return Figure(rec.torch_s, f"measured on this machine ({rec.measured_at[:10]})")
    kind = default_measured(key)
    return None if kind is None else Figure(kind.torch_s, f"measured on an {machine(kind.source)}, a CPU of this kind")


def decide(p: Pending, faces: int, per_face: Figure | None, convert: Figure, free_ram: int) -> ConvertFirst | None:
    """Whether to convert ``p`` before a run of ``faces`` expected faces: None to convert now, else why not."""
    from gpen_core.engine.runtime_choice import convert_ahead_advice
    from gpen_core.platform.meter import format_bytes

    if per_face is None:
        return ConvertFirst("short run", f"{p.model} was not converted for OpenVINO before this run: this CPU has no "
                            "measured torch time for it to weigh the run against (`python -m gpen_core profile` measures it)")
    if faces * per_face.value <= convert.value:
        return ConvertFirst("short run", f"{p.model} was not converted for OpenVINO before this run: its expected work "
                            f"(~{faces} faces × {per_face.value:.2f} s on torch, {per_face.source}) is not longer than "
                            f"the conversion (~{convert.value:.0f} s, {convert.source})")
    if free_ram < p.ram:
        peak = "measured" if p.ram_measured else "estimated from the file size"
        return ConvertFirst("no memory", f"{p.model} was not converted for OpenVINO before this run: converting it in a "
                            f"separate process needs ~{format_bytes(p.ram)} of RAM (the conversion's {peak} peak and "
                            f"torch's imports) and {format_bytes(free_ram)} is free, so the run stays on torch; "
                            + convert_ahead_advice(False))
    return None


def convert_first(mode: MemoryMode, faces: int, *, models_dir: str | os.PathLike[str] | None = None,
                  say: Callable[[str], None] = lambda line: None,
                  starting: Callable[[str, Figure], None] = lambda model, seconds: None,
                  stop: threading.Event | None = None) -> ConvertFirst:
    """Convert ``mode``'s generator in a child process when ``faces`` faces on torch outlast it and the child fits
    the free RAM. ``stop`` set kills the child (its unfinished files removed). One conversion at a time per
    process, none beside the background preparation's of the same generator: a second caller waits."""
    from gpen_core.engine.budget import free_memory
    from gpen_core.runtimes.openvino.base import CONVERSION_LOCK

    p = pending_generator(mode, models_dir)
    if p is None:
        return ConvertFirst("nothing to convert")
    per_face, convert = torch_seconds(p, models_dir), conversion_seconds(p, models_dir)
    why_not = decide(p, faces, per_face, convert, free_memory("cpu").ram_bytes)
    if why_not is not None or per_face is None:  # decide() goes ahead only with a per-face figure
        return why_not or ConvertFirst("short run")
    say(f"converting {p.model} for OpenVINO before the first face (~{convert.value:.0f} s, {convert.source}): the run's "
        f"~{faces} faces × {per_face.value:.2f} s on torch ({per_face.source}) outlast it")
    starting(p.model, convert)
    if not _my_turn(p.model, stop):
        return ConvertFirst("stopped", f"stopped before converting {p.model} for OpenVINO")
    try:
        if pending_generator(mode, models_dir) is None:  # the one before converted it meanwhile
            return ConvertFirst("nothing to convert")
        t0 = time.perf_counter()
        failed = _in_child(mode, models_dir, stop)
        seconds = time.perf_counter() - t0
    finally:
        CONVERSION_LOCK.release()
    if stop is not None and stop.is_set():
        return ConvertFirst("stopped", f"converting {p.model} for OpenVINO was stopped after {seconds:.0f} s", seconds)
    if failed:
        return ConvertFirst("failed", f"converting {p.model} for OpenVINO before this run failed ({failed}), "
                            "so the run stays on torch", seconds)
    say(f"converting {p.model} for OpenVINO: {seconds:.0f} s, once")
    return ConvertFirst("converted", f"{p.model} was converted for OpenVINO before the first face, in a separate "
                        f"process ({seconds:.0f} s, once), because the run's expected work on torch (~{faces} faces × "
                        f"{per_face.value:.2f} s) outlasts it, so that this run loads it on OpenVINO from the cache", seconds)


@dataclass(frozen=True)
class Run:
    """A run about to start, as its caller asked it: ``mode`` a name, or "auto" (the mode auto picks for inputs
    of ``size``, width and height); ``faces`` expected (one a photo or a frame: a floor)."""

    mode: str
    faces: int
    size: tuple[int, int]
    device: str
    backend: str = "auto"


def convert_before(run: Run, *, models_dir: str | os.PathLike[str] | None = None,
                   say: Callable[[str], None] = lambda line: None,
                   starting: Callable[[str, Figure], None] = lambda model, seconds: None,
                   stop: threading.Event | None = None) -> ConvertFirst:
    """:func:`convert_first` for ``run`` of at least one face under the ``auto`` backend on the CPU."""
    from gpen_core.engine.budget import choose
    from gpen_core.weights import lookup as weights  # here, not at import: `python -m gpen_core --help` stays quick

    if run.faces < 1 or run.backend != "auto" or not run.device.startswith("cpu"):
        return ConvertFirst("nothing to convert")
    if run.mode != AUTO:
        mode = MODES[run.mode]
    else:  # the mode auto picks for inputs of this size now
        present = lambda m: weights.locate(m.model, models_dir=models_dir) is not None  # noqa: E731
        size = run.size if min(run.size) > 0 else (1024, 1024)
        mode = choose(run.device, size, Path(models_dir) if models_dir else None, available=present).mode
    return convert_first(mode, run.faces, models_dir=models_dir, say=say, starting=starting, stop=stop)


def _my_turn(model: str, stop: threading.Event | None) -> bool:
    """Wait for CONVERSION_LOCK and for the background preparation's conversion of ``model``; True once the lock
    is held, False when ``stop`` was set meanwhile."""
    from gpen_core.engine.prepare import converting, token
    from gpen_core.runtimes.openvino.base import CONVERSION_LOCK

    while stop is None or not stop.is_set():
        if converting(token("generator", model)):
            time.sleep(0.1)
        elif CONVERSION_LOCK.acquire(timeout=0.1):
            return True
    return False


def _in_child(mode: MemoryMode, models_dir: str | os.PathLike[str] | None, stop: threading.Event | None = None) -> str:
    """Convert ``mode``'s networks in the preparation's child process; "" when the generator is ready, else why not.
    A child killed by ``stop`` leaves its unfinished conversion folder: swept here (its pid is gone)."""
    from gpen_core.engine.prepare import prepare_in_child
    from gpen_core.platform import worker
    from gpen_core.runtimes.openvino.base import cache_root, clean_stale_conversions

    root = cache_root(models_dir)
    before = set(root.iterdir()) if root.is_dir() else None
    out = worker.run(prepare_in_child, os.fspath(models_dir) if models_dir else None, (mode,), stop=stop)
    if isinstance(out, worker.Failed) and out.how == "stopped":
        clean_stale_conversions(root)
        made = sorted(set(root.iterdir()) - (before or set())) if root.is_dir() else []
        for folder in [*made, *([root] if before is None else [])]:
            with contextlib.suppress(OSError):  # only what the child made, and only when empty (a file stays too)
                folder.rmdir()
    if not isinstance(out, worker.Done):
        return f"the conversion's process {out.message}"
    report = out.value
    if any(label.startswith(mode.model) for label in report.converted + report.cached):
        return ""
    return "; ".join(report.failed + report.skipped) or "nothing was converted"
