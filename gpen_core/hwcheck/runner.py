"""Running the hardware check (:func:`run_profile`): the CPU backend comparison, each mode's workloads, then a row
per (task, mode) of GPEN's other tasks, each through a fresh Restorer in a worker process."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpen_core import errors
from gpen_core.errors import InputError
from gpen_core.modes import MODES, TASKS, MemoryMode, get_mode
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions
from gpen_core.platform import worker
from gpen_core.weights import lookup as weights
from gpen_core.hwcheck.workloads import (
    STANDARD, TASK_WORKLOADS, Workload, build, damage_strokes, example_faces, fresh_restorer, generator_source,
    request_figures, restorer_spec, synthetic_checkpoint,
)
from gpen_core.hwcheck.backends import finish as finish_backends, measure as measure_backends, plan as plan_backends
from gpen_core.hwcheck.info import machine_facts
from gpen_core.hwcheck.eta import REFERENCE, Eta, backend_kinds, task_kinds
from gpen_core.engine.profile_records import (
    DETECTOR_SYNTHETIC_NOTE, GIVEN_BOXES_NOTE, SYNTHETIC_NOTE, BackendCheck, ModeProfile, Profile, TaskRow, WorkloadRun,
    binding_peak, failed_mode, summarise,
)
from gpen_core.progress import Progress
from gpen_core.engine.profile_store import device_key, fingerprint, save_profile

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPENConfig

T = TypeVar("T")


class ModeFailed(Exception):
    """One measurement ran out of memory (an error, or the kernel's killer): the check goes on with the others."""


def run_measure(measure: Callable[[dict[str, Any], Progress], T], spec: dict[str, Any], report: Progress,
                isolate: bool) -> T:
    """``measure(spec, report)``, in a fresh process when ``isolate``. Out of memory raises :class:`ModeFailed`;
    from a worker, a :class:`~gpen_core.errors.GPENError` is raised again as itself, anything else as RuntimeError."""
    if not isolate:
        from gpen_core.platform.oom import is_oom

        try:
            return measure(spec, report)
        except Exception as exc:
            # ResourceError itself (the engine's "no lighter mode"), not its kinds: an OpenVINO cache problem is none
            if is_oom(exc) or type(exc) is errors.ResourceError:
                raise ModeFailed(f"out of memory: {exc}") from exc
            raise
    out = worker.run(measure, spec, worker.report, on_event=worker.forward_progress(report))
    if isinstance(out, worker.Done):
        return out.value
    if out.oom:
        if out.how == "raised":
            raise ModeFailed(f"out of memory: {out.message}")
        raise ModeFailed(f"the measuring process was killed by signal {-(out.exitcode or 0)} "
                         "(most likely the kernel's out-of-memory killer)")
    if out.how == "raised":
        cls = getattr(errors, out.error_type, None)
        if isinstance(cls, type) and issubclass(cls, errors.GPENError):
            raise cls(out.message)
        raise RuntimeError(f"measuring {spec['mode']} failed in its worker process: {out.error_type}: {out.message}")
    raise RuntimeError(f"measuring {spec['mode']} failed: its worker process {out.message}")


@dataclass(frozen=True)
class CheckSpec:
    """:func:`run_profile`'s arguments, gathered once."""

    wanted: list[MemoryMode]  # lightest first
    configs: dict[str, "GPENConfig"]  # model-config overrides, registry name → config
    synthetic: bool | None
    models_dir: str | os.PathLike[str] | None
    device: str  # resolved: "cpu", "cuda", "cuda:1"
    workloads: Sequence[Workload]
    isolate: bool
    backends: bool | None
    tasks: bool | None
    task_workloads: dict[str, Workload] | None


def _plan_mode(mode: MemoryMode, check: CheckSpec, override_paths: dict[str, str], portraits: Sequence[Path]) -> dict[str, Any]:
    """The spec :func:`measure_mode` runs for ``mode``; WeightsError when ``synthetic=False`` lacks its generator."""
    notes: list[str] = []
    model_opt, kind = generator_source(mode.model, override_paths, check.synthetic, check.models_dir)
    if mode.model in override_paths:
        notes.append(f"{mode.model} replaced by a model-config override ({check.configs[mode.model]})")
    if kind == "synthetic":
        notes.append(SYNTHETIC_NOTE)
    det_present = weights.locate(DETECTOR_WEIGHTS[mode.detector], models_dir=check.models_dir) is not None
    # A real detector must find real faces: a portrait from examples/ is pasted in. Without one the engine
    # gets fixed boxes (and, with synthetic weights, still runs the detector network for its cost).
    if det_present and not portraits and check.synthetic is not False:
        notes.append(f"no portrait in examples/ to composite: the {mode.detector} detector ran for its cost, "
                     "fixed face boxes stood in for its detections")
    return {
        "mode": mode.name, "label": mode.name, "model_opt": model_opt, "kind": kind, "use_detector": det_present and bool(portraits),
        "portraits": [str(p) for p in portraits], "notes": notes, "workloads": [asdict(w) for w in check.workloads],
        **restorer_spec(check.models_dir, check.device, check.synthetic),
    }


def measure_mode(spec: dict[str, Any], report: Progress) -> ModeProfile:
    """One mode's workloads through a new Restorer in this process, summarised; zero is this process just before
    the first request (torch imported, inputs built), so the first workload's peak includes loading the models."""
    mode = get_mode(spec["mode"])
    wls = [Workload(**w) for w in spec["workloads"]]
    portraits = [Path(p) for p in spec["portraits"]] if spec["use_detector"] else []
    images = [build(w, portraits=portraits) for w in wls]
    restorer, idle = fresh_restorer(spec)
    runs: list[WorkloadRun] = []
    dtype = ""
    try:
        for i, (w, wi) in enumerate(zip(wls, images)):

            def inner(f: float, d: str, i: int = i, w: Workload = w) -> None:
                report((i + f) / len(wls), f"{mode.name}: {w.label}: {d}")

            given = None if (w.aligned or spec["use_detector"]) else list(wi.detections)
            opts = RestoreOptions(mode=mode.name, model=spec["model_opt"], aligned=w.aligned)
            res = restorer(wi.image, opts, inner, detections=given)
            runs.append(run_record(w, res, spec, idle))
            dtype = res.dtype
    finally:
        restorer.unload()
    return summarise(mode, runs, restorer.device, spec["kind"], dtype, idle[:2], list(spec["notes"]))


def run_record(w: Workload, res: Any, spec: dict[str, Any], idle: tuple[int, int | None, int | None]) -> WorkloadRun:
    """One workload's request ``res`` in :func:`measure_mode`'s ``spec`` as a :class:`WorkloadRun`, its peaks above ``idle``."""
    missed = spec["use_detector"] and not w.aligned and len(res.faces) != w.faces
    notes = [f"the {res.detector} detector found {len(res.faces)} of the {w.faces} faces placed"] if missed else []
    return WorkloadRun(
        workload=w.name, faces=len(res.faces), processed_size=tuple(res.processed_size),  # type: ignore[arg-type]
        ram_method=res.peaks.method, restore_s=round(res.timings.restore_s, 4), detector=res.detector,
        notes=request_notes(res, spec["mode"], notes), **request_figures(res, idle),
    )


def request_notes(res: Any, asked: str, notes: Sequence[str] = ()) -> tuple[str, ...]:
    """A measured request's notes, for a mode's workload and a task's row alike: ``notes``, the engine's own (a precision
    change), the generator's runtime when not torch, the mode it ran when not ``asked`` (not ``asked``'s figures)."""
    out = [*notes, *res.notes]
    if res.backend == "openvino":
        out.append(f"the generator ran on OpenVINO ({res.backend_reason})")
    if res.mode.name != asked:
        out.append(f"the engine ran {res.mode.name} instead of {asked} (it did not fit): {asked} was not measured")
    return tuple(dict.fromkeys(out))


def refusal(task: str, mode: str, aligned: bool = False) -> str | None:
    """What the engine answers a ``task`` request in ``mode`` (its InputError), or None when it runs it."""
    try:
        RestoreOptions(mode=mode, task=task, aligned=aligned or TASKS[task].aligned_only).validated()
    except InputError as exc:
        return str(exc)
    return None


def plan_tasks(check: CheckSpec, override_paths: dict[str, str]) -> tuple[list[dict[str, Any]], list[TaskRow]]:
    """(specs to measure, refused rows) for every task × mode; ``override_paths`` (name → file) replace generators."""
    specs: list[dict[str, Any]] = []
    refused: list[TaskRow] = []
    warmed: set[str] = set()  # architectures whose OpenVINO conversion a first unmeasured run makes (random
    # weights of one architecture share one conversion: engine.network_loads.load_openvino_generator)
    for name, task in TASKS.items():
        if task.model is None:  # restoration: the modes' own rows
            continue
        w = (check.task_workloads or TASK_WORKLOADS)[name]
        for mode in check.wanted:
            why = refusal(name, mode.name, w.aligned)
            if why is not None:
                refused.append(TaskRow(task=name, mode=mode.name, model=task.model, workload=w.label, weights="", refused=why))
                continue
            model_opt, kind = generator_source(task.model, override_paths, check.synthetic, check.models_dir)
            overridden = task.model in override_paths
            shared = repr(weights.REGISTRY[task.model].arch) if kind == "synthetic" else str(model_opt)
            warm = not overridden and shared not in warmed and _runs_openvino(task.model, mode, check)
            if warm:
                warmed.add(shared)
            specs.append({
                "warm": warm, "label": f"{name} in {mode.name}", "gpen_task": name, "mode": mode.name, "model": task.model, "model_opt": model_opt,
                "kind": kind, "workload": asdict(w),
                "notes": [f"{task.model} replaced by a model-config override"] if overridden else [],
                **restorer_spec(check.models_dir, check.device, check.synthetic),
            })
    return specs, refused


def _runs_openvino(model: str, mode: MemoryMode, check: CheckSpec) -> bool:
    """Whether ``auto`` puts ``model`` on OpenVINO in ``mode`` here: its first use converts it (a minute or more
    at 1024 px), not a request's cost once cached, so an unmeasured run converts it first."""
    from gpen_core.networks.plan import choose_plan
    from gpen_core.runtimes.openvino.generator import choose_mode_backend

    arch, device = weights.REGISTRY[model].arch, check.device
    dtype = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)[0].dtype
    size = arch.size if arch is not None else 0
    choice = choose_mode_backend(mode, "auto", size, dtype, models_dir=check.models_dir, device=device)
    return choice.runtime == "openvino"


def measure_task(spec: dict[str, Any], report: Progress) -> TaskRow:
    """Run one (task, mode) spec in this process: its workload once, as a first request, zero as for the modes;
    fixed face boxes stand in for detections (the detector's cost is in the modes' rows)."""
    w = Workload(**spec["workload"])
    built = build(w)
    mask = damage_strokes(w) if spec["gpen_task"] == "inpaint" else None
    restorer, idle = fresh_restorer(spec)
    opts = RestoreOptions(mode=spec["mode"], task=spec["gpen_task"], model=spec["model_opt"], aligned=w.aligned)
    try:
        res = restorer(built.image, opts, lambda f, d: report(f, f"{spec['label']}: {d}"),
                       detections=None if w.aligned else list(built.detections), mask=mask)
    finally:
        restorer.unload()
    figures = request_figures(res, idle)
    peak = binding_peak(restorer.device, *(figures[f"peak_{k}_bytes"] for k in ("ram", "vram", "vram_reserved")))
    return TaskRow(
        task=spec["gpen_task"], mode=spec["mode"], model=spec["model"], workload=w.label, weights=spec["kind"],
        dtype=res.dtype, backend=res.backend, peak_bytes=peak, covered_pixels=int(res.processed_size[0] * res.processed_size[1]),
        notes=request_notes(res, spec["mode"], spec["notes"]), **figures,
    )


def _compare_backends(spec: dict[str, Any], check: BackendCheck, models_dir: str | None, isolate: bool, report: Progress) -> BackendCheck:
    """The backend comparison, recorded for ``auto``; a failure is reported in the check, not raised."""
    report(0.0, "backends: torch vs OpenVINO")
    try:
        result = run_measure(measure_backends, spec, report, isolate)
    except Exception as exc:  # its worker died: said in the report, nothing recorded
        return replace(check, skipped=f"the comparison failed: {type(exc).__name__}: {exc}")
    return finish_backends(check, spec, result, models_dir)


def _measure_each(specs: Sequence[dict[str, Any]], measure: Callable[[dict[str, Any], Progress], T],
                  failed: Callable[[dict[str, Any], str], T], isolate: bool, steps: Eta, start: int) -> list[T]:
    """Each spec's ``measure``, one step each from ``start``; one out of memory is ``failed(spec, why)``. A ``warm``
    spec first runs unmeasured (its OpenVINO conversion is cached: not a request's cost), sharing its step."""
    out = []
    for i, spec in enumerate(specs):
        measured = steps.part(start + i, 1)
        measured(0.0, f"{spec['label']}: starting")
        try:
            if spec.get("warm"):
                warm, measured = steps.part(start + i, 0.5), steps.part(start + i + 0.5, 0.5)
                warm(0.0, f"{spec['gpen_task']}: converting {spec['model']} to OpenVINO (first use, not measured)")
                run_measure(measure, spec, warm, isolate)
            out.append(run_measure(measure, spec, measured, isolate))
        except ModeFailed as exc:
            out.append(failed(spec, str(exc)))
    return out


def _failed_task(spec: dict[str, Any], why: str, free_binding: int | None) -> TaskRow:
    """The row of a (task, mode) that ran out of memory: what was free then is a lower bound."""
    lower = int(free_binding or 0)
    return TaskRow(task=spec["gpen_task"], mode=spec["mode"], model=spec["model"], workload=spec["workload"]["label"],
                   weights=spec["kind"], peak_bytes=lower, peak_ram_bytes=lower, ran_mode=spec["mode"], failed=why)


def _notes(results: dict[str, ModeProfile], check: CheckSpec, took_s: float) -> list[str]:
    notes = [n for n in (SYNTHETIC_NOTE, DETECTOR_SYNTHETIC_NOTE, GIVEN_BOXES_NOTE)
             if results and all(n in m.notes for m in results.values())]
    if check.configs:
        notes.append("model-config overrides: not the released architectures (a test or an experiment)")
    if tuple(check.workloads) != STANDARD:
        notes.append("non-standard workloads")
    where = "each mode ran in a fresh process" if check.isolate else "all modes ran in this process, one after another"
    notes.append("peaks are above the measuring process just before its first request (torch imported, inputs in "
                 f"memory); {where}")
    return [*notes, f"the whole check took {took_s:.1f} s"]


def _wanted(modes: Iterable[str] | None) -> list[MemoryMode]:
    """The modes to measure, lightest first; InputError for an unknown name or none."""
    names = list(MODES) if modes is None else list(dict.fromkeys(modes))
    wanted: list[MemoryMode] = sorted((get_mode(n) for n in names), key=lambda m: m.rank)
    if not wanted:
        raise InputError("no modes to measure; choose from: " + ", ".join(MODES))
    return wanted


def _measure_everything(
    check: CheckSpec, free_binding: int | None, report: Progress,
) -> tuple[list[dict[str, Any]], dict[str, ModeProfile], BackendCheck | None, list[TaskRow]]:
    """Plan and measure: the backend comparison, each mode, the task rows."""
    from gpen_core.runtimes.openvino.generator import speed_records

    configs, models_dir, isolate = check.configs, check.models_dir, check.isolate
    # One portrait, always the same file: a photo with several faces would multiply the count.
    portraits = example_faces()[:1]
    with tempfile.TemporaryDirectory(prefix="gpen-profile-") as tmp:
        override_paths = {name: synthetic_checkpoint(name, tmp, cfg) for name, cfg in configs.items()}
        specs = [_plan_mode(m, check, override_paths, portraits) for m in check.wanted]
        do_tasks = check.tasks if check.tasks is not None else (not configs and tuple(check.workloads) == STANDARD)
        tspecs, rows = plan_tasks(check, override_paths) if do_tasks else ([], [])
        mdir = None if models_dir is None else str(models_dir)
        bspec, bcheck = plan_backends(check.wanted, specs, configs, check.device, check.backends, mdir)
        # Backends first: the modes are then measured with the backend `auto` now picks, and a
        # conversion they would need is already cached. Each network they time is a step.
        first = backend_kinds(bspec, tuple(speed_records(mdir)))
        steps = Eta([*first, *(s["mode"] for s in specs), *task_kinds(tspecs)], REFERENCE, report=report)
        steps.start()
        if bspec is not None:
            bcheck = _compare_backends(bspec, bcheck, mdir, isolate, steps.part(0, len(first)))
        modes = _measure_each(specs, measure_mode, partial(failed_mode, free_binding=free_binding), isolate, steps,
                              len(first))
        rows += _measure_each(tspecs, measure_task, partial(_failed_task, free_binding=free_binding), isolate, steps,
                              len(first) + len(specs))
    return specs, {m.mode: m for m in modes}, bcheck, rows


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
    tasks: bool | None = None,
    task_workloads: dict[str, Workload] | None = None,
) -> Profile:
    """Measure every mode in ``modes`` (default: all, lightest first) on this machine; saved unless ``save`` is False.

    ``synthetic``: True forces random weights for every generator, False requires the real ones (WeightsError
    names the missing file), None uses each real generator present. Detectors are real when their file is
    present (a portrait from ``examples/`` pasted in for them to find), else the workloads' fixed boxes are given.
    ``isolate`` (default) measures each mode in a fresh process: what a first request costs (in one process a later
    mode read up to 4 % lower), and a mode that exhausts memory kills only its worker (recorded as needing more
    than was free). ``backends`` (:mod:`.backends`, CPU only) and ``tasks`` (the task rows): None for the
    released generators and standard workloads only, True always, False never. ``workloads``,
    ``model_configs`` (registry name → GPENConfig, random weights) and ``task_workloads`` are for tests and
    experiments. Raises InputError for an unknown mode, RuntimeError when a worker fails for another reason.
    """
    from gpen_core.engine.budget import free_memory
    from gpen_core.restorer import Restorer

    t_start = time.perf_counter()
    report = progress or (lambda f, d: None)
    wanted = _wanted(modes)
    report(0.0, "reading the machine")
    machine = machine_facts()
    dev = Restorer(device=device).device
    free0 = free_memory(dev)
    free_binding = free0.vram_bytes if dev.startswith("cuda") else free0.ram_bytes
    check = CheckSpec(wanted, dict(model_configs or {}), synthetic, models_dir, dev, workloads, isolate, backends,
                      tasks, task_workloads)
    specs, results, bcheck, rows = _measure_everything(check, free_binding, report)
    any_synthetic = any(s["kind"] == "synthetic" for s in specs)
    prof = Profile(created=time.strftime("%Y-%m-%dT%H:%M:%S"), device=device_key(dev), synthetic=any_synthetic,
                   fingerprint=fingerprint(dev, models_dir, any_synthetic), machine=machine,
                   free_at_start={"ram_bytes": free0.ram_bytes, "vram_bytes": free0.vram_bytes}, isolated=isolate,
                   workloads=tuple(asdict(w) for w in workloads), modes=results,
                   notes=tuple(_notes(results, check, time.perf_counter() - t_start)), command=command,
                   backends=bcheck, tasks=tuple(rows))
    if save:
        save_profile(prof, models_dir)
    report(1.0, "done")
    return prof
