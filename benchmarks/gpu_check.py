"""Everything the GPU path needs measured, in one run of a few minutes on a fresh GPU machine.

Its table: the GPU row of docs/performance.md's perf-table (``--readme``) and docs/gpu.md's figures.

    bash scripts/gpu_check.sh          # on a lent GPU machine as it is (docs/gpu.md)
    bash scripts/setup.sh && .venv/bin/python benchmarks/gpu_check.py --json gpu_check.json --readme

Steps (each under a shared time budget, default 330 s; a step that would start past
it is recorded as skipped, so the script ends in about 6 minutes at most):

1. ``selfcheck`` on the CUDA device: every network of every mode built, placed and run there.
2. Per face, the generator alone: GPEN-BFR-256 and -512 in float16 and float32
   (synthetic weights of the exact architecture): milliseconds per face (warm, CUDA
   events), peak VRAM allocated and reserved for load + forwards, as the engine runs
   them (float32 with TF32 off, ``cudnn.benchmark`` on); 512 float16 once more with
   ``cudnn.benchmark`` off, to measure what autotuning buys.
3. Per mode, in a fresh process each: one aligned 512 px face request and one
   4000×3000 JPEG request with one face, through ``Restorer.__call__`` on the GPU;
   the engine's own meter gives peak VRAM allocated / reserved and RAM.
4. The out-of-memory step-down: ``quality`` under ``torch.cuda.set_per_process_memory_fraction``
   set below its measured peak: the result must come from a lighter mode and say so.

Writes one JSON file; with ``--readme`` also the "GPU: 512 float16" row of docs/performance.md.
``--row-out FILE`` writes that row into a file. Needs only what ``requirements.txt``
installs; on a lent GPU machine that reaches no registry, ``bash scripts/gpu_check.sh`` runs
it with the machine's own python3 and facexlib from a carried wheel (docs/gpu.md). It first
imports everything the check runs; then, without a CUDA device, it says so and exits 2
(nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PERFORMANCE = ROOT / "docs" / "performance.md"  # the perf-table with the GPU row
GPU_ROW = "GPU: 512 float16"
GPU_TARGET = "≤ 1 GB VRAM, ≤ 25 ms per face (H200)"
NOT_MEASURED = "not measured yet (no GPU was lent; run `benchmarks/gpu_check.py --readme` on one)"
TARGET_MS = 25.0
TARGET_FACE_RESERVED = 1e9
TARGET_PHOTO_RESERVED = 1.5e9
NO_CUDA_EXIT = 2
MISSING_EXIT = 3  # as scripts/gpu_check.sh's exit for a missing wheel: something the check imports is absent


@dataclass
class Budget:
    """The shared time budget: steps ask before they start."""

    seconds: float
    t0: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)

    def allows(self, need_s: float) -> bool:
        return self.left() >= need_s


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / 1e6, 1)


# --------------------------------------------------------------------------- steps


def step_selfcheck(device: str) -> dict[str, Any]:
    from gpen_core.hwcheck.selfcheck import run_selfcheck

    t = time.perf_counter()
    report = run_selfcheck(device)
    return {**report.to_json(), "seconds": round(time.perf_counter() - t, 1)}


def step_forward(device: str, model: str, dtype: str, *, runs: int = 30, cudnn_benchmark: bool = False) -> dict[str, Any]:
    """ms per face (warm) and peak VRAM of one generator, loaded and run on ``device``."""
    import torch

    from gpen_core.networks.prepared import prepare
    from gpen_core.platform.meter import PeakMeter
    from gpen_core.networks.plan import choose_plan, cuda_numerics
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.weights.lookup import REGISTRY

    cpu_model = random_generator(REGISTRY[model].arch)
    plan, note = choose_plan(device, dtype)
    torch.cuda.empty_cache()
    exact = plan.dtype == "float32"
    # As a request runs it: float32 exact (TF32 off); cudnn.benchmark as asked (the engine turns it on).
    with cuda_numerics(device, exact_float32=exact, fixed_input=cudnn_benchmark):
        with PeakMeter(device) as meter:
            fwd = prepare(cpu_model, plan)
            del cpu_model
            s = fwd.size
            x = torch.rand(1, 3, s, s, device=device) * 2 - 1
            for _ in range(3):
                y = fwd(x)
            times, y = time_on_device(lambda: fwd(x), device, runs)
            finite = bool(torch.isfinite(y).all())
    p = meter.peaks
    assert p is not None
    del fwd, x, y
    torch.cuda.empty_cache()
    return {
        "model": model,
        "dtype": plan.dtype,
        "note": note,
        "tf32": False if exact else None,  # float32: off; float16 does not use TF32
        "cudnn_benchmark": cudnn_benchmark,
        "ms_median": round(statistics.median(times), 3),
        "ms_min": round(min(times), 3),
        "runs": runs,
        "vram_allocated_mb": _mb(p.vram_allocated_bytes),
        "vram_reserved_mb": _mb(p.vram_reserved_bytes),
        "output_finite": finite,
    }


def indexed(device: str) -> Any:
    """``device`` as a torch.device with its index ("cuda" → "cuda:<current>").

    Some torch.cuda calls refuse an index-less device (``set_per_process_memory_fraction``
    raises "Expected a torch.device with a specified index"); others read the current
    device, which is not the request's on ``--device cuda:1``.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def time_on_device(fn: Any, device: str, runs: int) -> tuple[list[float], Any]:
    """(milliseconds of each of ``runs`` calls of ``fn``, its last output), timed with CUDA events
    on ``device``'s current stream (where ``fn``'s kernels run), after a sync of that device."""
    import torch

    dev = indexed(device)
    y = None
    with torch.cuda.device(dev):
        stream = torch.cuda.current_stream(dev)
        torch.cuda.synchronize(dev)
        times = []
        for _ in range(runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            y = fn()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times, y


def cap_memory(fraction: float, device: str) -> None:
    """Cap this process's caching allocator on ``device`` at ``fraction`` of its memory."""
    import torch

    torch.cuda.set_per_process_memory_fraction(fraction, indexed(device))


def _inputs(tmp: Path) -> dict[str, Any]:
    from gpen_core.images.decode import encode_image
    from gpen_core.hwcheck.workloads import STANDARD, build, example_faces, face_boxes

    out: dict[str, Any] = {}
    for w in STANDARD:
        if w.name not in ("face", "photo"):
            continue
        img = build(w, portraits=example_faces()[:1]).image
        path = tmp / f"{w.name}.jpg"
        path.write_bytes(encode_image(img, "jpeg", quality=90))
        out[w.name] = {"path": str(path), "aligned": w.aligned, "boxes": face_boxes(w)}
    return out


def worker_mode(mode: str, inputs_json: Path, out: Path, memory_fraction: float | None, device: str = "cuda") -> None:
    """One mode in this (fresh) process: the aligned face, then the 4000×3000 photo; cold, then warm.

    ``device`` "cpu" is for testing this script on machines without a GPU (tests/test_selfcheck.py).
    """
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.hwcheck.workloads import template_detection

    if memory_fraction is not None:
        cap_memory(memory_fraction, device)
    inputs = json.loads(inputs_json.read_text())
    r = Restorer(device=device, synthetic_weights=True)
    rows = []
    for name, spec in inputs.items():
        boxes = None if spec["aligned"] else [template_detection(tuple(b)) for b in spec["boxes"]]
        opts = RestoreOptions(mode=mode, aligned=spec["aligned"])
        for run in range(3 if memory_fraction is None else 1):
            res = r(spec["path"], opts, detections=boxes)
            p = res.peaks
            rows.append(
                {
                    "workload": name,
                    "run": "cold" if run == 0 else "warm",
                    "mode_ran": res.mode.name,
                    "dtype": res.dtype,
                    "device": res.device,
                    "faces": len(res.faces),
                    "total_s": round(res.timings.total_s, 3),
                    "restore_s": round(res.timings.restore_s, 3),
                    "vram_allocated_mb": _mb(p.vram_allocated_bytes),
                    "vram_reserved_mb": _mb(p.vram_reserved_bytes),
                    "vram_device": p.vram_device,
                    "rss_above_idle_mb": _mb(p.rss_delta_bytes),
                    "shared": p.shared,
                    "notes": list(res.notes),
                    "attempts": [
                        {"mode": a.mode, "outcome": a.outcome, "vram_reserved_mb": _mb(a.peaks.vram_reserved_bytes)}
                        for a in getattr(res, "attempts", ())
                    ],
                }
            )
    out.write_text(json.dumps({"mode": mode, "memory_fraction": memory_fraction, "rows": rows}))


def _run_worker(mode: str, inputs_json: Path, tmp: Path, timeout_s: float, fraction: float | None = None, device: str = "cuda") -> dict[str, Any]:
    out = tmp / f"mode-{mode}-{fraction}.json"
    cmd = [sys.executable, __file__, "--worker", mode, str(inputs_json), str(out), "--device", device]
    if fraction is not None:
        cmd += ["--fraction", str(fraction)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout_s, 10))
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0 or not out.exists():
        return {"mode": mode, "error": (proc.stderr or proc.stdout)[-2000:]}
    data = json.loads(out.read_text())
    data["seconds"] = round(time.perf_counter() - t, 1)
    return data


def step_oom(modes: dict[str, dict[str, Any]], inputs_json: Path, tmp: Path, timeout_s: float, device: str = "cuda") -> dict[str, Any]:
    """quality under a memory cap between low's and quality's measured peaks: must step down, and say so."""
    import torch

    def peak(mode: str) -> float | None:
        rows = [r for r in modes.get(mode, {}).get("rows", []) if r["vram_reserved_mb"] is not None]
        return max((r["vram_reserved_mb"] for r in rows), default=None)

    q, low = peak("quality"), peak("low")
    if q is None or low is None:
        return {"skipped": "needs the measured peaks of quality and low first"}
    total = torch.cuda.get_device_properties(torch.device(device)).total_memory / 1e6
    # CUDA context and cuDNN workspaces sit outside the caching allocator's cap; aim between the two peaks.
    cap_mb = max(low * 1.3, (low + q) / 2)
    if cap_mb >= q:
        return {"skipped": f"low ({low:.0f} MB) and quality ({q:.0f} MB) peaks are too close to separate with a cap"}
    fraction = cap_mb / total
    data = _run_worker("quality", inputs_json, tmp, timeout_s, fraction, device=device)
    rows = data.get("rows", [])
    stepped = [r for r in rows if r["mode_ran"] != "quality"]
    said = [r for r in stepped if any("out of memory" in n for n in r["notes"])]
    return {
        **data,
        "cap_mb": round(cap_mb, 1),
        "ok": bool(rows) and len(stepped) == len(rows) and len(said) == len(rows),
    }


# --------------------------------------------------------------------------- docs/performance.md


def readme_row(result: dict[str, Any] | None) -> str:
    """The perf-table row (docs/performance.md) for the GPU target, from a gpu_check result (None: not measured)."""
    if not result:
        return f"| {GPU_ROW} | {GPU_TARGET} | {NOT_MEASURED} | – |"
    fwd = next((f for f in result.get("forward", []) if f["model"] == "GPEN-BFR-512" and f["dtype"] == "float16" and f["cudnn_benchmark"]), None)
    face = _mode_row(result, "balanced", "face")
    photo = _mode_row(result, "balanced", "photo")
    if fwd is None or face is None:
        return f"| {GPU_ROW} | {GPU_TARGET} | {NOT_MEASURED} | – |"
    parts = [f"{fwd['ms_median']:.1f} ms per face (warm, generator alone)", f"{face['vram_reserved_mb']:.0f} MB VRAM reserved for a one-face request (balanced)"]
    if photo is not None:
        parts.append(f"{photo['vram_reserved_mb']:.0f} MB for a 4000×3000 photo with one face")
    parts.append(f"on {result['gpu']}, {result['date']}")
    met = fwd["ms_median"] <= TARGET_MS and face["vram_reserved_mb"] * 1e6 <= TARGET_FACE_RESERVED
    if photo is not None:
        met = met and photo["vram_reserved_mb"] * 1e6 <= TARGET_PHOTO_RESERVED
    return f"| {GPU_ROW} | {GPU_TARGET} | {'; '.join(parts)} | {'yes' if met else '**no**'} |"


def _mode_row(result: dict[str, Any], mode: str, workload: str) -> dict[str, Any] | None:
    rows = [r for r in result.get("modes", {}).get(mode, {}).get("rows", []) if r["workload"] == workload and r["run"] == "warm"]
    rows = [r for r in rows if r["vram_reserved_mb"] is not None]
    return max(rows, key=lambda r: r["vram_reserved_mb"]) if rows else None


def replace_gpu_row(text: str, row: str) -> str:
    """``text`` with its "GPU: 512 float16" table row replaced by ``row``; ValueError when there is none."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line.startswith(f"| {GPU_ROW} |")]
    if len(hits) != 1:
        raise ValueError(f"expected one '| {GPU_ROW} |' row in the performance table, found {len(hits)}")
    lines[hits[0]] = row
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def import_dependencies() -> dict[str, str]:
    """Import everything the check runs (the engine with facexlib, the restorer, the selfcheck,
    the workloads); {package: "version (folder)"} for the log. An ImportError here names what
    is missing before any GPU time is spent (scripts/gpu_check.sh carries facexlib as a wheel)."""
    import importlib

    import cv2
    import numpy
    import psutil
    import torch

    from gpen_core.engine.pipeline import import_engine

    import_engine()  # torch, OpenCV and facexlib's detection, as a request imports them
    for name in ("gpen_core.restorer", "gpen_core.hwcheck.selfcheck", "gpen_core.hwcheck.workloads",
                 "gpen_core.networks.fast", "gpen_core.networks.synthetic", "gpen_core.images.decode"):
        importlib.import_module(name)
    import facexlib

    mods = {"torch": torch, "numpy": numpy, "cv2": cv2, "psutil": psutil, "facexlib": facexlib}
    return {k: f"{getattr(m, '__version__', '?')} ({Path(m.__file__ or '?').parent})" for k, m in mods.items()}


# The import name of what the check needs, and what installs it (requirements.txt pins them).
_PACKAGES = {"cv2": "opencv-python-headless", "torch": "torch", "numpy": "numpy", "psutil": "psutil", "facexlib": "facexlib",
             "PIL": "pillow", "torchvision": "torchvision", "scipy": "scipy", "skimage": "scikit-image"}


def missing_module_message(exc: ImportError) -> str:
    """One plain line for an import that failed: which module, which package brings it, and the fix."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if not name:
        return (f"gpu_check: this Python ({sys.executable}) could not import what the check runs: {exc}. "
                "Install requirements.txt into it (bash scripts/setup.sh), or point GPU_CHECK_PYTHON at one that has it.")
    package = _PACKAGES.get(name, name)
    return (f"gpu_check: this Python ({sys.executable}) has no module {name!r} (package {package}), which the check needs. "
            f"Install it (pip install {package}, or bash scripts/setup.sh), or point GPU_CHECK_PYTHON at a Python that has it. "
            "Nothing was measured or written.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=Path("gpu_check.json"), help="where to write the results (default ./gpu_check.json)")
    ap.add_argument("--readme", action="store_true", help="also rewrite the 'GPU: 512 float16' row of docs/performance.md")
    ap.add_argument("--row-out", type=Path, default=None, help="also write the GPU row to this file")
    ap.add_argument("--budget-s", type=float, default=330.0, help="time budget for all steps (default 330 s)")
    ap.add_argument("--device", default="cuda", help="the CUDA device to check (default cuda)")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "INPUTS", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--fraction", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_mode(args.worker[0], Path(args.worker[1]), Path(args.worker[2]), args.fraction, args.device)
        return 0

    try:
        imported = import_dependencies()
    except ImportError as exc:
        print(missing_module_message(exc), file=sys.stderr)
        return MISSING_EXIT
    for name, where in imported.items():
        print(f"gpu_check: imported {name} {where}", flush=True)
    import torch

    if not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device here (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'}). Nothing was measured or written. "
            "Run it on a machine with an NVIDIA GPU after `bash scripts/setup.sh`.",
            file=sys.stderr,
        )
        return NO_CUDA_EXIT
    from gpen_core.modes import MODES

    budget = Budget(args.budget_s)
    props = torch.cuda.get_device_properties(torch.device(args.device))
    result: dict[str, Any] = {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB)",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": args.device,
        "budget_s": args.budget_s,
        "skipped": [],
    }

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - budget.t0:6.1f} s] {msg}", flush=True)

    log(f"selfcheck on {args.device}")
    result["selfcheck"] = step_selfcheck(args.device)
    log("selfcheck " + ("all ok" if result["selfcheck"]["ok"] else "FAILED"))

    result["forward"] = []
    for model in ("GPEN-BFR-512", "GPEN-BFR-256"):
        # cudnn.benchmark on is what the engine runs for the generator; off once, for the comparison.
        for dtype, bench in (("float16", True), ("float32", True), ("float16", False)):
            if not bench and model != "GPEN-BFR-512":
                continue
            if not budget.allows(20):
                result["skipped"].append(f"forward {model} {dtype}")
                continue
            try:
                row = step_forward(args.device, model, dtype, cudnn_benchmark=bench)
            except Exception as exc:  # record and go on: one failure must not hide the rest
                row = {"model": model, "dtype": dtype, "cudnn_benchmark": bench, "error": f"{type(exc).__name__}: {exc}"}
            result["forward"].append(row)
            log(f"forward {row}")

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp_s:
        tmp = Path(tmp_s)
        inputs_json = tmp / "inputs.json"
        inputs_json.write_text(json.dumps(_inputs(tmp)))
        result["modes"] = {}
        for mode in MODES:
            if not budget.allows(40):
                result["skipped"].append(f"mode {mode}")
                continue
            log(f"mode {mode}")
            result["modes"][mode] = _run_worker(mode, inputs_json, tmp, min(150, budget.left()), device=args.device)
        if budget.allows(40):
            log("out-of-memory step-down")
            result["oom_step_down"] = step_oom(result["modes"], inputs_json, tmp, min(120, budget.left()), args.device)
        else:
            result["skipped"].append("oom step-down")
    result["seconds"] = round(time.perf_counter() - budget.t0, 1)
    result["readme_row"] = readme_row(result)
    args.json.write_text(json.dumps(result, indent=1))
    log(f"wrote {args.json}")
    print(result["readme_row"])
    if args.row_out is not None:
        args.row_out.write_text(result["readme_row"] + "\n", encoding="utf-8")
        log(f"wrote the GPU row to {args.row_out}")
    if args.readme:
        PERFORMANCE.write_text(replace_gpu_row(PERFORMANCE.read_text(encoding="utf-8"), result["readme_row"]), encoding="utf-8")
        log(f"updated the '{GPU_ROW}' row of {PERFORMANCE}")
    return 0 if result["selfcheck"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
