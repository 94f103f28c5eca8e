"""The hardware check's rows for GPEN's other tasks (colorize, inpaint, seg2face), one per (task, mode): the
task's workload once through a fresh Restorer in a worker process, as a first request (real weights when
present); a mode without a plan (``low``) records what the engine answers. ``auto`` reads the rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from gpen_core.engine.profile_records import TaskRow, jsonable
from gpen_core.errors import InputError
from gpen_core.hwcheck.isolated import ModeFailed, run_measure
from gpen_core.hwcheck.workloads import (
    TASK_WORKLOADS, Workload, build, damage_strokes, fresh_restorer, generator_source, request_figures, restorer_spec,
)
from gpen_core.modes import TASKS, MemoryMode
from gpen_core.options import RestoreOptions
from gpen_core.progress import Progress
from gpen_core.weights.lookup import REGISTRY

WORKER_KIND = "task-row"  # the worker spec's "task" key (the runner's dispatch), not a GPEN task


def refusal(task: str, mode: str, aligned: bool = False) -> str | None:
    """What the engine answers a ``task`` request in ``mode`` (its InputError), or None when it runs it."""
    try:
        RestoreOptions(mode=mode, task=task, aligned=aligned or TASKS[task].aligned_only).validated()
    except InputError as exc:
        return str(exc)
    return None


def plan(
    modes: Sequence[MemoryMode],
    synthetic: bool | None,
    models_dir: str | os.PathLike[str] | None,
    override_paths: dict[str, str],
    device: str,
    workloads: dict[str, Workload] | None = None,
) -> tuple[list[dict[str, Any]], list[TaskRow]]:
    """(worker specs to measure, rows already known: the refusals), for every task × ``modes``.
    ``override_paths`` (registry name → checkpoint) replace a task's generator, ``workloads`` (task → workload)
    :data:`TASK_WORKLOADS`; ``synthetic`` as in :func:`gpen_core.hwcheck.runner.run_profile`."""
    specs: list[dict[str, Any]] = []
    refused: list[TaskRow] = []
    warmed: set[str] = set()  # architectures whose OpenVINO conversion a first unmeasured run makes (random
    # weights of one architecture share one conversion: engine.network_loads.load_openvino_generator)
    for name, task in TASKS.items():
        if task.model is None:  # restoration: the modes' own rows
            continue
        w = (workloads or TASK_WORKLOADS)[name]
        for mode in modes:
            why = refusal(name, mode.name, w.aligned)
            if why is not None:
                refused.append(TaskRow(task=name, mode=mode.name, model=task.model, workload=w.label, weights="", refused=why))
                continue
            notes: list[str] = []
            model_opt, kind = generator_source(task.model, override_paths, synthetic, models_dir)
            if task.model in override_paths:
                notes.append(f"{task.model} replaced by a model-config override")
            shared = repr(REGISTRY[task.model].arch) if kind == "synthetic" else str(model_opt)
            warm = task.model not in override_paths and shared not in warmed and _runs_openvino(task.model, mode, models_dir, device)
            if warm:
                warmed.add(shared)
            specs.append({
                "warm": warm, "task": WORKER_KIND, "gpen_task": name, "mode": mode.name, "model": task.model,
                "model_opt": model_opt, "kind": kind, "workload": asdict(w), "notes": notes,
                **restorer_spec(models_dir, device, synthetic),
            })
    return specs, refused


def _runs_openvino(model: str, mode: MemoryMode, models_dir: str | os.PathLike[str] | None, device: str) -> bool:
    """Whether ``auto`` puts ``model`` on OpenVINO in ``mode`` here: its first use converts it (a minute or more
    at 1024 px), not a request's cost once cached, so an unmeasured run converts it first."""
    from gpen_core.networks.plan import choose_plan
    from gpen_core.runtimes.openvino.generator import choose_backend

    spec = REGISTRY[model]
    dtype = choose_plan(device, mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype)[0].dtype
    size = spec.arch.size if spec.arch is not None else 0
    return choose_backend("auto", size, dtype, models_dir=models_dir, device=device).runtime == "openvino"


def measure(spec: dict[str, Any], report: Progress) -> dict[str, Any]:
    """Run one (task, mode) spec in this process: its :class:`TaskRow` as a JSON-able dict. Zero as for the
    modes; fixed face boxes stand in for detections (the detector's cost is in the modes' rows)."""
    w = Workload(**spec["workload"])
    built = build(w)
    mask = damage_strokes(w) if spec["gpen_task"] == "inpaint" else None
    restorer, idle = fresh_restorer(spec)
    opts = RestoreOptions(mode=spec["mode"], task=spec["gpen_task"], model=spec["model_opt"], aligned=w.aligned)
    try:
        res = restorer(built.image, opts, lambda f, d: report(f, f"{spec['gpen_task']} in {spec['mode']}: {d}"),
                       detections=None if w.aligned else list(built.detections), mask=mask)
    finally:
        restorer.unload()
    figures = request_figures(res, idle)
    ram, vram_a, vram_r = figures["peak_ram_bytes"], figures["peak_vram_bytes"], figures["peak_vram_reserved_bytes"]
    binding = (vram_r if vram_r is not None else vram_a) if restorer.device.startswith("cuda") else ram
    notes = list(spec["notes"])
    if res.mode.name != spec["mode"]:
        notes.append(f"the engine ran {res.mode.name} instead of {spec['mode']} (it did not fit): {spec['mode']} was not measured")
    row = TaskRow(
        task=spec["gpen_task"], mode=spec["mode"], model=spec["model"], workload=w.label, weights=spec["kind"],
        dtype=res.dtype, backend=res.backend, peak_bytes=int(binding if binding is not None else ram),
        covered_pixels=int(res.processed_size[0] * res.processed_size[1]), notes=tuple(dict.fromkeys(notes)), **figures,
    )
    return jsonable(asdict(row))


def failed_row(spec: dict[str, Any], why: str, free_binding: int | None) -> TaskRow:
    """The row of a (task, mode) whose worker ran out of memory: what was free then is a lower bound."""
    lower = int(free_binding or 0)
    return TaskRow(task=spec["gpen_task"], mode=spec["mode"], model=spec["model"], workload=spec["workload"]["label"],
                   weights=spec["kind"], peak_bytes=lower, peak_ram_bytes=lower, ran_mode=spec["mode"], failed=why)


def measure_all(specs: Sequence[dict[str, Any]], isolate: bool, free_binding: int | None, report: Progress) -> list[TaskRow]:
    """Every spec measured, in a worker process each when ``isolate``; one that runs out of memory becomes a
    failed row and the check goes on; any other failure propagates."""
    rows = []
    for i, spec in enumerate(specs):

        def step(f: float, d: str, i: int = i) -> None:
            report(min(1.0, (i + f) / len(specs)), d)

        step(0.0, f"{spec['gpen_task']} in {spec['mode']}: starting")
        try:
            measured = step
            if spec.get("warm"):  # converts the generator to OpenVINO (cached); its figures are not a request's
                # The two runs share the step's progress, half each: it never goes back, and the step
                # ends when the measured run does (the check's time left counts steps: .steps).
                warm = lambda f, d, step=step: step(0.5 * f, d)  # noqa: E731
                measured = lambda f, d, step=step: step(0.5 + 0.5 * f, d)  # noqa: E731
                warm(0.0, f"{spec['gpen_task']}: converting {spec['model']} to OpenVINO (first use, not measured)")
                run_measure(measure, spec, warm, isolate)
            rows.append(TaskRow.from_dict(run_measure(measure, spec, measured, isolate)))
        except ModeFailed as exc:
            rows.append(failed_row(spec, str(exc), free_binding))
    return rows
