"""Running the hardware check: each mode's workloads through a fresh Restorer, in a worker process.

:func:`run_profile` measures every mode (lightest first) and saves the result
(:mod:`.store`). The first workload of a mode loads its models, as a first request
would; the others reuse them. Before the modes, on the CPU, the backend comparison
(:mod:`.backends`) times torch against OpenVINO and records it for ``auto``, so the
modes are measured with the backend a request will use. This is the only part of the
profile package that imports the Restorer; nothing heavy at import: torch and the engine
load inside :func:`run_profile`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.modes import MODES, MemoryMode, get_mode
from gpen_core.hwcheck.workloads import STANDARD, Workload, generator_source, idle_usage
from gpen_core.hwcheck.backends import plan as plan_backends
from gpen_core.hwcheck.isolated import ModeFailed, in_child
from gpen_core.hwcheck.steps import Steps, backend_kinds, task_kinds
from gpen_core.engine.profile_records import (
    DETECTOR_SYNTHETIC_NOTE,
    BackendCheck,
    TaskRow,
    GIVEN_BOXES_NOTE,
    SYNTHETIC_NOTE,
    ModeProfile,
    Profile,
    WorkloadRun,
    failed_mode,
    summarise,
)
from gpen_core.progress import Progress
from gpen_core.engine.profile_store import device_key, fingerprint, save_profile

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPENConfig



def _machine_facts(models_dir: str | os.PathLike[str] | None) -> dict[str, Any]:
    from gpen_core.hwcheck.info import collect_info

    info = collect_info(models_dir=models_dir)
    return {
        "cpu_model": info.cpu_model,
        "cpu_flags": list(info.cpu_flags),
        "cores_logical": info.cores_logical,
        "cores_physical": info.cores_physical,
        "ram_total_bytes": info.ram_total_bytes,
        "ram_available_bytes": info.ram_available_bytes,
        "gpu_name": info.cuda_name,
        "vram_total_bytes": info.cuda_vram_bytes,
        "cuda_runtime": info.cuda_runtime,
        "torch": info.torch,
        "torch_threads": info.torch_threads,
        "gpen_core": info.gpen_core,
        "python": info.python,
        "platform": info.platform,
    }


def _write_overrides(configs: dict[str, "GPENConfig"], folder: Path) -> dict[str, str]:
    """Random checkpoints for the model-config overrides (tests: tiny GPENs); name → path."""
    import torch

    from gpen_core.networks.synthetic import random_state_dict

    paths = {}
    for name, cfg in configs.items():
        p = folder / f"synthetic-{name}.pth"
        torch.save(random_state_dict(cfg, seed=0), p)
        paths[name] = str(p)
    return paths




@dataclass(frozen=True)
class CheckSpec:
    """What one hardware check measures and how: :func:`run_profile`'s arguments, gathered once
    (each field as documented there)."""

    wanted: list[MemoryMode]  # lightest first
    configs: dict[str, "GPENConfig"]  # model-config overrides, registry name → config
    synthetic: bool | None
    models_dir: str | os.PathLike[str] | None
    device: str  # resolved: "cpu", "cuda", "cuda:1"
    workloads: Sequence[Workload] = STANDARD
    isolate: bool = True
    backends: bool | None = None
    backend_runs: int = 3
    tasks: bool | None = None
    task_workloads: dict[str, Workload] | None = field(default=None)


def _plan_mode(mode: MemoryMode, check: CheckSpec, override_paths: dict[str, str], portraits: Sequence[Path]) -> dict[str, Any]:
    """The JSON-able spec :func:`measure_mode` runs for one mode (weights, face source, inputs).

    Raises WeightsError when ``synthetic=False`` and the mode's generator is missing.
    """
    from gpen_core.weights import lookup as weights
    from gpen_core.options import DETECTOR_WEIGHTS

    configs, synthetic, models_dir, device, workloads = check.configs, check.synthetic, check.models_dir, check.device, check.workloads
    notes: list[str] = []
    model_opt, kind = generator_source(mode.model, override_paths, synthetic, models_dir)
    if mode.model in override_paths:
        notes.append(f"{mode.model} replaced by a model-config override ({configs[mode.model]})")
    if kind == "synthetic":
        notes.append(SYNTHETIC_NOTE)
    det_present = weights.locate(DETECTOR_WEIGHTS[mode.detector], models_dir=models_dir) is not None
    # A real detector must find real faces: composite a portrait from examples/. Otherwise
    # the engine gets fixed boxes (and, with synthetic weights, still runs the detector
    # network for its cost).
    if det_present and not portraits and synthetic is not False:
        notes.append(
            f"no portrait in examples/ to composite: the {mode.detector} detector ran for its cost, "
            "fixed face boxes stood in for its detections"
        )
    torch = sys.modules.get("torch")
    return {
        "mode": mode.name,
        "model_opt": model_opt,
        "kind": kind,
        "use_detector": det_present and bool(portraits),
        "portraits": [str(p) for p in portraits],
        "notes": notes,
        "models_dir": None if models_dir is None else str(models_dir),
        "device": device,
        "synthetic_restorer": synthetic is not False,
        "workloads": [asdict(w) for w in workloads],
        # The engine runs with this process's thread count; the measurement should too.
        "threads": torch.get_num_threads() if torch is not None else None,
    }


def measure_mode(spec: dict[str, Any], report: Progress) -> ModeProfile:
    """Run one mode's workloads through a new Restorer in this process, and summarise.

    Zero is this process just before the first request: torch imported, the inputs built
    (a caller's photo is already in memory when it asks). The first workload loads the
    models, as a first request does; the rest reuse them.
    """
    import torch

    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.hwcheck.workloads import build

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    mode = get_mode(spec["mode"])
    wls = [Workload(**w) for w in spec["workloads"]]
    portraits = [Path(p) for p in spec["portraits"]] if spec["use_detector"] else []
    images = [build(w, portraits=portraits) for w in wls]
    restorer = Restorer(models_dir=spec["models_dir"], device=spec["device"], synthetic_weights=spec["synthetic_restorer"])
    dev = restorer.device
    if dev.startswith("cuda"):
        torch.zeros(1, device=dev)  # the CUDA context is the process's, not the mode's
    idle_rss, idle_alloc, idle_res = idle_usage(dev)
    runs: list[WorkloadRun] = []
    dtype = ""
    try:
        for i, (w, wi) in enumerate(zip(wls, images)):

            def inner(f: float, d: str, i: int = i, w: Workload = w) -> None:
                report((i + f) / len(wls), f"{mode.name}: {w.label}: {d}")

            given = None if (w.aligned or spec["use_detector"]) else list(wi.detections)
            opts = RestoreOptions(mode=mode.name, model=spec["model_opt"], aligned=w.aligned)
            res = restorer(wi.image, opts, inner, detections=given)
            runs.append(run_record(w, res, spec["use_detector"], idle_rss, idle_alloc, idle_res))
            dtype = res.dtype
    finally:
        restorer.unload()
    return summarise(mode, runs, dev, spec["kind"], dtype, (idle_rss, idle_alloc), list(spec["notes"]))


def _compare_backends(spec: dict[str, Any], check: BackendCheck, models_dir: str | None, isolate: bool, report: Progress) -> BackendCheck:
    """The backend comparison (in a worker process when ``isolate``), recorded for ``auto``.
    A failure is reported in the check, not raised: the memory check goes on."""
    from gpen_core.hwcheck.backends import failed, finish, measure

    report(0.0, "backends: torch vs OpenVINO")
    try:
        result = in_child(measure, spec, report) if isolate else measure(spec, report)
    except Exception as exc:
        return failed(check, f"{type(exc).__name__}: {exc}")
    return finish(check, spec, result, models_dir)


def _measure_modes(specs: Sequence[dict[str, Any]], isolate: bool, free_binding: int | None, steps: Steps) -> dict[str, ModeProfile]:
    """Each mode's spec measured (in a worker process when ``isolate``); a mode that runs out of memory is
    recorded as needing more than was free, and the check goes on."""
    from gpen_core.platform.oom import is_oom

    results: dict[str, ModeProfile] = {}
    for i, spec in enumerate(specs):
        step = steps.part(steps.first + i, 1)
        step(0.0, f"{spec['mode']}: starting")
        try:
            if isolate:
                results[spec["mode"]] = in_child(measure_mode, spec, step)
            else:
                results[spec["mode"]] = measure_mode(spec, step)
        except ModeFailed as exc:
            results[spec["mode"]] = failed_mode(spec, str(exc), free_binding)
        except Exception as exc:
            if isolate or not (is_oom(exc) or type(exc).__name__ == "ResourceError"):
                raise
            results[spec["mode"]] = failed_mode(spec, f"out of memory: {exc}", free_binding)
    return results


def _notes(results: dict[str, ModeProfile], configs: dict[str, Any], workloads: Sequence[Workload], isolate: bool,
           took_s: float) -> list[str]:
    notes: list[str] = []
    for note in (SYNTHETIC_NOTE, DETECTOR_SYNTHETIC_NOTE, GIVEN_BOXES_NOTE):
        if results and all(note in m.notes for m in results.values()):
            notes.append(note)
    if configs:
        notes.append("model-config overrides: not the released architectures (a test or an experiment)")
    if tuple(workloads) != STANDARD:
        notes.append("non-standard workloads")
    notes.append(
        "peaks are above the measuring process just before its first request (torch imported, inputs in memory); "
        + ("each mode ran in a fresh process" if isolate else "all modes ran in this process, one after another")
    )
    notes.append(f"the whole check took {took_s:.1f} s")
    return notes


def _wanted(modes: Iterable[str] | None) -> list[MemoryMode]:
    """The modes to measure, lightest first; InputError for an unknown name or none."""
    names = list(MODES) if modes is None else list(dict.fromkeys(modes))
    wanted: list[MemoryMode] = sorted((get_mode(n) for n in names), key=lambda m: m.rank)
    if not wanted:
        from gpen_core.errors import InputError

        raise InputError("no modes to measure; choose from: " + ", ".join(MODES))
    return wanted


def _measure_everything(
    check: CheckSpec, free_binding: int | None, report: Progress,
) -> tuple[list[dict[str, Any]], dict[str, ModeProfile], BackendCheck | None, list[TaskRow]]:
    """Plan and measure: the backend comparison first, then each mode, then the task rows (see :func:`run_profile`)."""
    from gpen_core.hwcheck.workloads import example_faces
    from gpen_core.hwcheck.task_rows import measure_all as measure_tasks, plan as task_plan

    wanted, configs, synthetic, models_dir, dev = check.wanted, check.configs, check.synthetic, check.models_dir, check.device
    workloads, tasks, task_workloads, isolate = check.workloads, check.tasks, check.task_workloads, check.isolate
    # One portrait, always the same file: a photo with several faces would multiply the count.
    portraits = example_faces()[:1]
    with tempfile.TemporaryDirectory(prefix="gpen-profile-") as tmp:
        override_paths = _write_overrides(configs, Path(tmp)) if configs else {}
        specs = [_plan_mode(m, check, override_paths, portraits) for m in wanted]
        do_tasks = tasks if tasks is not None else (not configs and tuple(workloads) == STANDARD)
        tspecs, task_rows = task_plan(wanted, synthetic, models_dir, override_paths, dev, task_workloads) if do_tasks else ([], [])
        mdir = None if models_dir is None else str(models_dir)
        bspec, bcheck = plan_backends(wanted, specs, configs, dev, check.backends, mdir, check.backend_runs)
        # Backends first: the modes are then measured with the backend `auto` now picks, and a
        # conversion they would need is already cached. Each network they time is a step.
        from gpen_core.runtimes.openvino.generator import speed_records

        first = backend_kinds(bspec, tuple(speed_records(mdir)))
        steps = Steps([*first, *(s["mode"] for s in specs), *task_kinds(tspecs)], len(first), report)
        if bspec is not None:
            bcheck = _compare_backends(bspec, bcheck, mdir, isolate, steps.part(0, len(first)))
        results = _measure_modes(specs, isolate, free_binding, steps)
        task_rows += measure_tasks(tspecs, isolate, free_binding, steps.part(steps.first + len(specs), len(tspecs)))
    return specs, results, bcheck, task_rows


def run_profile(
    modes: Iterable[str] | None = None,
    models_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    synthetic: bool | None = None,
    *,
    device: str | None = None,
    workloads: Sequence[Workload] = STANDARD,
    model_configs: dict[str, "GPENConfig"] | None = None,
    isolate: bool = True,
    save: bool = True,
    command: str = "",
    backends: bool | None = None,
    backend_runs: int = 3,
    tasks: bool | None = None,
    task_workloads: dict[str, Workload] | None = None,
) -> Profile:
    """Measure every mode in ``modes`` (default: all, lightest first) on this machine.

    ``synthetic``: True forces random weights for every generator; False requires the
    real ones (WeightsError names the missing file); None uses each mode's real
    generator when present and random weights otherwise. Detectors are real when their
    file is present (with a portrait from ``examples/`` composited for them to find);
    otherwise the workloads' fixed boxes are given. ``device``: "cpu", "cuda" or None
    (the engine's default). ``progress(fraction, description)`` is called as it goes.

    ``isolate`` (default) measures each mode in a fresh Python process: the figure is
    what a first request costs, independent of what earlier modes left in the allocator
    (in one process, a mode measured after others came out up to 4 % lower than in a
    fresh one), and a mode that exhausts memory kills only its worker: it is recorded as
    needing more than was free and the check goes on. ``isolate=False`` runs everything
    here (faster to start; for tests).

    ``backends``: on the CPU, first time the generator of each (face size, dtype) the
    modes use with torch and with OpenVINO (where installed), converting on first use,
    and record the medians (``backend_runs`` calls each) for ``--backend auto``
    (:mod:`.backends`); the modes are then measured with the backend ``auto`` picks.
    None (default): for the released generators, not for model-config overrides;
    True: also for overrides; False: skip (``--no-backends``).

    ``tasks``: after the modes, measure GPEN's other tasks in each measured mode that has a
    plan for them (:mod:`.task_rows`; a mode without one gets the engine's refusal). None
    (default): for the standard check only (standard workloads, no overrides); True: also
    with overrides (a task generator named in ``model_configs`` is built from it; ``task_workloads``,
    task → Workload, replaces the standard task workloads); False: skip (``--no-tasks``).

    ``workloads`` and ``model_configs`` (registry name → GPENConfig, built with random
    weights) exist for tests and experiments; the standard check uses neither. ``save``
    writes the result to the measurements store (``measurements.json``) in the models folder.

    Raises InputError for an unknown mode, WeightsError as described, RuntimeError when a
    worker fails for another reason.
    """
    from gpen_core.engine.budget import free_memory
    from gpen_core.restorer import Restorer

    t_start = time.perf_counter()
    report = progress or (lambda f, d: None)
    wanted = _wanted(modes)
    configs = dict(model_configs or {})

    report(0.0, "reading the machine")
    machine = _machine_facts(models_dir)
    dev = Restorer(device=device).device
    free0 = free_memory(dev)
    free_binding = free0.vram_bytes if dev.startswith("cuda") else free0.ram_bytes
    check = CheckSpec(wanted, configs, synthetic, models_dir, dev, workloads, isolate, backends, backend_runs, tasks, task_workloads)
    specs, results, bcheck, task_rows = _measure_everything(check, free_binding, report)
    any_synthetic = any(s["kind"] == "synthetic" for s in specs)
    notes = _notes(results, configs, workloads, isolate, time.perf_counter() - t_start)
    prof = Profile(created=time.strftime("%Y-%m-%dT%H:%M:%S"), device=device_key(dev), synthetic=any_synthetic,
                   fingerprint=fingerprint(dev, models_dir, any_synthetic), machine=machine,
                   free_at_start={"ram_bytes": free0.ram_bytes, "vram_bytes": free0.vram_bytes}, isolated=isolate,
                   workloads=tuple(asdict(w) for w in workloads), modes=results, notes=tuple(notes), command=command,
                   backends=bcheck, tasks=tuple(task_rows))
    if save:
        save_profile(prof, models_dir)
    report(1.0, "done")
    return prof


def run_record(w: Workload, res: Any, real_detector: bool, idle_rss: int, idle_alloc: int | None, idle_res: int | None) -> WorkloadRun:
    p = res.peaks
    notes = list(res.notes)
    if real_detector and not w.aligned and len(res.faces) != w.faces:
        notes.append(f"the {res.detector} detector found {len(res.faces)} of the {w.faces} faces placed")
    if getattr(res, "backend", "torch") == "openvino":
        notes.append(f"the generator ran on OpenVINO ({res.backend_reason})")
    vram_a = None if p.vram_allocated_bytes is None or idle_alloc is None else max(0, p.vram_allocated_bytes - idle_alloc)
    vram_r = None if p.vram_reserved_bytes is None or idle_res is None else max(0, p.vram_reserved_bytes - idle_res)
    n = len(res.faces)
    return WorkloadRun(
        workload=w.name,
        faces=n,
        processed_size=tuple(res.processed_size),  # type: ignore[arg-type]
        peak_ram_bytes=max(0, p.rss_bytes - idle_rss),
        peak_vram_bytes=vram_a,
        peak_vram_reserved_bytes=vram_r,
        ram_method=p.method,
        total_s=round(res.timings.total_s, 4),
        restore_s=round(res.timings.restore_s, 4),
        load_s=round(res.timings.load_s, 4),
        seconds_per_face=round(res.timings.restore_s / n, 4) if n else None,
        ran_mode=res.mode.name,
        detector=res.detector,
        notes=tuple(notes),
    )
