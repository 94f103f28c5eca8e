"""The usual memory advice for GPEN, measured on this machine: each tip (:mod:`.advice_table`) as a before/after
pair on the hardware check's workloads, each side in its own fresh process (:mod:`.advice_child`; one side's
allocator state cannot flatter the other), interleaved, repeated. A tip that cannot be measured here says why.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import psutil

from gpen_core.hwcheck.advice_child import measure, workload_of
from gpen_core.hwcheck.eta import Eta
from gpen_core.hwcheck.info import host_facts
from gpen_core.hwcheck.report import host_text
from gpen_core.modes import MODES
from gpen_core.progress import Progress
from gpen_core.hwcheck.advice_table import (  # noqa: F401  (the tips, the verdict, the report: importable from here)
    TIPS, AdviceReport, Side, Tip, TipResult, format_table, load_report, report_from_dict, save_report, verdict,
)
from gpen_core.platform import worker
from gpen_core.platform.leftovers import sweep_folders
from gpen_core.platform.meter import format_bytes

# The thread variables a tip's side sets; unset in every child unless the side sets them.
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def run_side(spec: dict[str, Any], env: dict[str, str] | None = None) -> Side | None:
    """One side of a tip (:func:`gpen_core.hwcheck.advice_child.measure`) in a fresh process; RuntimeError when it fails."""
    child_env: dict[str, str | None] = {**dict.fromkeys(_THREAD_VARS), **(env or {})}
    out = worker.run(measure, spec, env=child_env, timeout=600)
    if isinstance(out, worker.Failed):
        what = f"{out.error_type}: {out.message}" if out.error_type else f"its process {out.message}"
        raise RuntimeError(f"the measurement child failed ({spec.get('kind')}): {what}")
    return out.value


SCRATCH_PREFIX = "gpen-advice-"


def sweep_scratch(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove (and return) the scratch folders of this user's tips runs whose process is gone (a kill, a restart)."""
    return sweep_folders(Path(root or tempfile.gettempdir()), SCRATCH_PREFIX)


def _side(label: str, outs: Sequence[Side]) -> Side:
    """One side's medians over its runs (one a process), and the spread of their process peaks."""
    pp = [o.process_peak_bytes for o in outs]
    med = statistics.median(pp)
    vr = [o.vram_reserved_bytes for o in outs if o.vram_reserved_bytes is not None]
    return Side(label=label, process_peak_bytes=int(med),
                request_peak_bytes=int(statistics.median([o.request_peak_bytes for o in outs])),
                seconds=float(statistics.median([o.seconds for o in outs])),
                vram_reserved_bytes=int(statistics.median(vr)) if vr else None, runs=len(outs),
                spread=(max(pp) - min(pp)) / med if med else 0.0)


def progress_text(k: int, n: int, tip: Tip) -> str:
    """'tip 7 (3 of 9): JPEG q95 output instead of PNG', code marks dropped (a progress bar shows no Markdown)."""
    return f"tip {tip.number} ({k + 1} of {n}): {tip.tip.replace('`', '')}"


Spec = tuple[dict[str, Any], "dict[str, str] | None"]


@dataclass
class TipPlan:
    """What measuring one tip runs: its sides' (spec, env), their labels, the metric that judges it."""

    tip: Tip
    specs: list[Spec]
    labels: tuple[str, ...]
    metric: Literal["process", "request", "vram"]
    setup: Callable[[], None] | None = None  # builds the tip's input files before its first run
    warm_ups: list[Spec] = field(default_factory=list)  # unmeasured first loads (see :func:`plan_tips`)

    def steps(self, repeats: int) -> list[str]:
        """The kind of each child process it starts, in order (what :class:`~gpen_core.hwcheck.eta.Eta` plans)."""
        return ["warm-up " + _kind(s) for s, _ in self.warm_ups] + [_kind(s) for _ in range(repeats) for s, _ in self.specs]


def _kind(spec: dict[str, Any]) -> str:
    return f"{spec['kind']}:{spec.get('mode') or spec.get('op') or spec.get('format') or ''}"


def _make_cache(root: Path, n_files: int) -> None:
    """A ModelScope-like cache with many small files (other models' snapshots), no GPEN weights."""
    per = 200
    for i in range(0, n_files, per):
        d = root / "models" / f"someone--model{i // per}" / "snapshots" / "master" / "sub"
        d.mkdir(parents=True, exist_ok=True)
        for j in range(min(per, n_files - i)):
            (d / f"f{j}.json").write_bytes(b"{}")


def machine_facts() -> dict[str, Any]:
    """:func:`gpen_core.hwcheck.info.machine_facts`, asked of a child so this process never imports torch or
    creates a CUDA context; a child that fails or runs past 120 s: the host's facts, no GPU, bf16 by the flags."""
    out = worker.run("gpen_core.hwcheck.info:machine_facts", timeout=120, quiet=True)
    return out.value if isinstance(out, worker.Done) else host_facts()


def measure_tips(
    *,
    workload: str = "photo",
    repeats: int = 3,
    tips: Sequence[int] | None = None,
    cache_files: int = 50_000,
    progress: Progress | None = None,
) -> AdviceReport:
    """Measure every tip that can be measured here on ``workload`` ("photo": 12 MP, one face; or "tiny"), with
    the time left (:mod:`.eta`); every child shares one scratch folder, removed however this ends."""
    report = progress or (lambda f, d: None)
    wanted = [t for t in TIPS if tips is None or t.number in tips]
    machine = machine_facts()
    has_cuda = machine.get("gpu_name") is not None
    tiny = workload == "tiny"
    results: list[TipResult] = []
    sweep_scratch()
    # Named by this process's pid, so a later run can tell a leftover of this one.
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        base = {"workload": workload, "repeats": 2 if not tiny else 1, "scratch": str(scratch)}
        plans = plan_tips(wanted, base, has_cuda, cache_files if not tiny else 2_000, tiny, scratch)
        eta = Eta([k for p in plans if isinstance(p, TipPlan) for k in p.steps(repeats)], guess_from_all=False,
                  report=report)
        eta.start()
        for k, (tip, plan) in enumerate(zip(wanted, plans)):
            text = progress_text(k, len(wanted), tip)
            eta.say(len(eta.finished), text)
            if isinstance(plan, TipPlan):  # each child process that ends is a step done
                plan = _measure_plan(plan, repeats, lambda text=text: eta.say(len(eta.finished) + 1, text))
            results.append(plan)
    report(1.0, "done")
    return AdviceReport(
        machine=host_text(machine), created=datetime.now().isoformat(timespec="seconds"),
        workload=workload_of(workload).label, repeats=repeats, results=tuple(results), notes=(
            "Synthetic weights of the exact architectures: memory and time as the real ones, no restoration.",
            "Each network is loaded (and converted) once, unmeasured, before its measured runs, so both sides "
            "load the same converted files."),
    )


def plan_tips(wanted: Sequence[Tip], base: dict[str, Any], has_cuda: bool, cache_files: int, tiny: bool,
              scratch: Path) -> list[TipPlan | TipResult]:
    """Each tip's plan, or its result when it cannot be measured here. A restore whose (mode, model)
    no earlier tip loaded gets one unmeasured warm-up first: the shared scratch folder then holds its
    synthetic checkpoint and converted networks, so no measured side pays a conversion the other does not."""
    warmed: set[tuple[str, ...]] = set()
    out: list[TipPlan | TipResult] = []
    for tip in wanted:
        plan = _unmeasurable(tip, has_cuda) or _tip_plan(tip, base, tiny, cache_files, scratch)
        if isinstance(plan, TipPlan):
            for spec, env in plan.specs:
                nets = _networks(spec)
                if not nets <= warmed:
                    warmed |= nets
                    plan.warm_ups.append((spec, env))
        out.append(plan)
    return out


def _networks(spec: dict[str, Any]) -> set[tuple[str, ...]]:
    """What a restore spec loads that a first load writes to the scratch folder (a synthetic checkpoint,
    a conversion): its generator in its dtype and its parser. Nothing for the other kinds."""
    if spec.get("kind") != "restore":
        return set()
    mode = MODES[spec["mode"]]
    nets = {("generator", str(spec.get("model") or mode.model), mode.cpu_dtype)}
    return nets | ({("parser", str(mode.parse_input))} if mode.parsing else set())


def _unmeasurable(tip: Tip, has_cuda: bool) -> TipResult | None:
    n = tip.number
    if n == 10:
        return TipResult(tip, "not measurable here", "needs a running Jupyter kernel or IDE; neither is part of this app")
    if n == 11:
        if not psutil.swap_memory().total:
            return TipResult(tip, "not measurable here", "this machine has no swap, so swappiness changes nothing here")
        return TipResult(tip, "not measurable here", "changing vm.swappiness needs root and affects the whole machine; not done by a benchmark")
    if n in (4, 5) and not has_cuda:
        return TipResult(tip, "not measurable here", "needs a CUDA GPU (on a CPU float16 is hundreds of times slower and "
                                                     "CUDA graphs do not exist); `benchmarks/gpu_check.py` measures it where one is lent")
    return None


def _tip_plan(tip: Tip, base: dict[str, Any], tiny: bool, cache_files: int, scratch: Path) -> TipPlan:
    n = tip.number
    restore = {**base, "kind": "restore", "mode": "balanced"}
    if n == 1:
        return TipPlan(tip, [(restore, None), (restore, {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"})],
                       ("threads unset", "both set to 2"), "process")
    if n == 2:  # the tip says removing the copy helps: "before" is with it
        return TipPlan(tip, [({**restore, "display_copy": True}, None), (restore, None)],
                       ("with a display copy", "no display copy"), "request")
    if n == 3:  # 512 vs 256 in quality (float32) so that only the tip's change differs
        return TipPlan(tip, [({**restore, "mode": "quality", "model": m}, None) for m in ("GPEN-BFR-512", "GPEN-BFR-256")],
                       ("GPEN-BFR-512", "GPEN-BFR-256"), "process")
    if n in (4, 5):
        fw = {"kind": "forward", "device": "cuda", "size": 512, "repeats": 10}
        if n == 5:
            return TipPlan(tip, [(fw, None), ({**fw, "half": True}, None)], ("float32", "model.half()"), "vram")
        return TipPlan(tip, [({**fw, "half": True}, None), ({**fw, "half": True, "compile": True}, None)],
                       ("float16 eager", "float16 compiled (reduce-overhead)"), "vram")
    if n == 6:
        return TipPlan(tip, [(restore, None), ({**restore, "mode": "faces-only"}, None)],
                       ("balanced (paste-back)", "faces-only"), "process")
    if n == 7:
        enc = {**base, "kind": "encode", "repeats": 3}
        return TipPlan(tip, [({**enc, "format": "png"}, None), ({**enc, "format": "jpeg"}, None)], ("PNG", "JPEG q95"), "request")
    if n == 8:
        side = 2048 if not tiny else 320
        return TipPlan(tip, [({**restore, "as_jpeg": True}, None), ({**restore, "as_jpeg": True, "preshrink": side}, None)],
                       ("full size", f"shrunk to {side} px"), "process")
    if n == 9:
        full, empty, models = scratch / "cache-full", scratch / "cache-empty", scratch / "cache-models"
        locate = {"kind": "cache", "op": "locate", "models_dir": str(models), "repeats": 3}

        def setup() -> None:
            for p in (full, empty, models):
                p.mkdir(exist_ok=True)
            _make_cache(full, cache_files)

        # the full cache is "before": the tip says cleaning it helps
        return TipPlan(tip, [(locate, {"MODELSCOPE_CACHE": str(full)}), (locate, {"MODELSCOPE_CACHE": str(empty)}),
                             ({"kind": "cache", "op": "walk", "root": str(full), "repeats": 3}, None)],
                       (f"cache of {cache_files:,} files", "empty cache", f"os.walk of {cache_files:,} files"),
                       "request", setup)
    raise ValueError(f"no measurement for tip {n}")  # pragma: no cover - TIPS and this table are kept together


def _measure_plan(plan: TipPlan, repeats: int, step: Callable[[], None]) -> TipResult:
    """The plan's warm-ups, then each side ``repeats`` times, alternating, a fresh process each time (``step()``
    after each), and the verdict on their medians."""
    if plan.setup is not None:
        plan.setup()
    for spec, env in plan.warm_ups:
        run_side({**spec, "warm_up": True}, env)
        step()
    outs: list[list[Side]] = [[] for _ in plan.specs]
    for _ in range(repeats):
        for i, (spec, env) in enumerate(plan.specs):
            out = run_side(spec, env)
            assert out is not None  # only a warm-up returns nothing
            outs[i].append(out)
            step()
    before, after = _side(plan.labels[0], outs[0]), _side(plan.labels[1], outs[1])
    v, why = verdict(before, after, plan.metric, plan.tip.claims)
    if plan.tip.number == 9:
        walk = _side(plan.labels[2], outs[2])
        why = (f"{why}; finding the weights here never walks the cache. A full {walk.label}: "
               f"{format_bytes(walk.request_peak_bytes)} above idle, {walk.seconds:.2f} s")
    return TipResult(plan.tip, v, why, before, after)
