"""torch against OpenVINO for GPEN's 1024 px task generator (colorize / inpaint), in CPU seconds.

Its tables: docs/tasks.md, "OpenVINO at 1024 px" (and the 1024 px entries of the runtime defaults);
with ``--peaks``, "The hardware check measures the tasks" (peak RAM and seconds per face of the
task networks in each memory mode, on PyTorch: see ``PEAKS_DOC``).

    .venv/bin/python benchmarks/ov_1024.py                 # convert once, then 3 interleaved runs per path
    .venv/bin/python benchmarks/ov_1024.py --runs 5 --json out.json
    .venv/bin/python benchmarks/ov_1024.py --peaks --tasks colorize --modes balanced

GPEN-Colorization-1024 and GPEN-Inpainting-1024 share one architecture (1024 px, channel
multiplier 2, narrow 1), so one random-weight checkpoint of it stands for both: time and
memory do not depend on the values. Steps, each in its own process:

1. the conversion to OpenVINO IR (f32 and bf16 graphs), its seconds and the process's peak
   RSS (``VmHWM``), which is what a first ``auto`` request on OpenVINO would add;
2. the four paths (torch float32, torch bfloat16, OpenVINO f32, OpenVINO bf16) built in one
   process and called interleaved (p1 p2 p3 p4 p1 ...) after one warm-up each, timing both
   the process's CPU seconds (all its threads; what a shared machine makes comparable) and
   the wall seconds.

The bf16 paths run only where the CPU has native bf16 (AVX-512 BF16 / AMX).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "GPEN-Colorization-1024"


def _vmhwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _checkpoint(folder: Path) -> Path:
    import torch

    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    ckpt = folder / f"random-{MODEL}.pth"
    if not ckpt.exists():
        torch.save(random_state_dict(REGISTRY[MODEL].arch, seed=0), ckpt)
    return ckpt


def convert_worker(folder: Path, precision: str, out: Path) -> None:
    from gpen_core.runtimes.openvino import generator as ov

    ckpt = folder / f"random-{MODEL}.pth"
    before = _vmhwm()
    fwd = ov.load(ckpt, precision, models_dir=folder)  # type: ignore[arg-type]
    out.write_text(json.dumps({"precision": precision, "convert_s": fwd.convert_s, "load_s": fwd.load_s,
                               "peak_rss": _vmhwm(), "rss_before": before}))


def time_worker(folder: Path, paths: list[str], runs: int, threads: int, out: Path) -> None:
    import torch

    from gpen_core.networks.prepared import prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.runtimes.openvino import generator as ov
    from gpen_core.weights.lookup import REGISTRY

    torch.set_num_threads(threads)
    ckpt = folder / f"random-{MODEL}.pth"
    x32 = torch.rand(1, 3, 1024, 1024) * 2 - 1
    fwds = {}
    for p in paths:
        if p.startswith("ov"):
            fwds[p] = (ov.load(ckpt, "bf16" if p == "ov-bf16" else "f32", models_dir=folder), x32)
        else:
            plan = ForwardPlan(dtype="bfloat16" if p == "torch-bf16" else "float32")
            fwds[p] = (prepare(random_generator(REGISTRY[MODEL].arch, seed=0), plan), x32.to(plan.dtype_torch))
        fwds[p][0](fwds[p][1])  # warm-up
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    wall: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(runs):
        for p, (f, x) in fwds.items():
            c, w = time.process_time(), time.perf_counter()
            f(x)
            cpu[p].append(round(time.process_time() - c, 3))
            wall[p].append(round(time.perf_counter() - w, 3))
    out.write_text(json.dumps({"cpu": cpu, "wall": wall}))


# ------------------------------------------------ --peaks: the task networks' memory per mode

PEAKS_DOC = """Peak RAM and seconds per face of GPEN's task networks (colorize, inpaint) in each memory mode.

    .venv/bin/python benchmarks/ov_1024.py --peaks                       # colorize and inpaint, every mode with a plan
    .venv/bin/python benchmarks/ov_1024.py --peaks --tasks colorize --modes balanced

Each (task, mode, workload) runs in its own process (a clean peak), through the real
engine (``Restorer.__call__``). The generator is a checkpoint file on disk with random
weights of the released architecture (GPEN-Colorization-1024 / GPEN-Inpainting-1024:
1024 px, channel multiplier 2, narrow 1): time and memory do not depend on the values.
Workloads: one aligned 1024×1024 face; the standard group photo (3000×2000, 4 faces,
boxes given, so no detector weights are needed; inpainting gets a white stroke across
every face). "Above idle" is the peak minus the RSS just before the request, after a
warm-up request that loaded the models (what a server pays per request); "cold" is the
first request of the process, loading included (what a one-shot CLI run pays).
The generator runs on PyTorch (the figures behind ``auto``'s built-in estimates); what ``auto``
runs on this machine, OpenVINO included, is the hardware check's task rows
(``python -m gpen_core profile``). Prints a Markdown table; ``--json PATH`` also writes the rows.
"""

WORKLOADS = ("aligned", "group")


def peaks_worker(task: str, mode: str, workload: str, models: Path, out: Path) -> None:
    import numpy as np

    from gpen_core.engine.pipeline import import_engine
    from gpen_core.hwcheck.workloads import STANDARD, build, face_boxes, template_detection
    from gpen_core.modes import TASKS
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.weights.lookup import REGISTRY

    import_engine()
    ckpt = models / REGISTRY[TASKS[task].model].filename
    r = Restorer(models_dir=models, device="cpu")
    if workload == "aligned":
        rng = np.random.default_rng(0)
        image = rng.integers(0, 256, (1024, 1024, 3), dtype=np.uint8)
        image[300:330, 200:800] = 255  # a stroke for inpainting
        boxes = None
        opts = RestoreOptions(mode=mode, model=str(ckpt), aligned=True, task=task, backend="torch")
    else:
        group = next(w for w in STANDARD if w.name == "group")
        built = build(group)
        image = built.image.copy()
        boxes = [template_detection(b) for b in face_boxes(group)]
        for x0, y0, x1, y1 in face_boxes(group):
            cy = (y0 + y1) // 2
            image[cy - 4 : cy + 4, x0 + 20 : x1 - 20] = 255
        opts = RestoreOptions(mode=mode, model=str(ckpt), task=task, backend="torch")
    cpu0 = time.process_time()
    cold = r(image, opts, detections=boxes)
    cold_cpu = time.process_time() - cpu0
    cpu0 = time.process_time()
    warm = r(image, opts, detections=boxes)
    warm_cpu = time.process_time() - cpu0
    out.write_text(json.dumps({
        "task": task, "mode": mode, "workload": workload, "dtype": warm.dtype, "backend": warm.backend,
        "faces": len(warm.faces),
        "cold_peak": cold.peaks.rss_bytes - cold.peaks.baseline_rss_bytes, "cold_s": cold.timings.total_s, "cold_cpu_s": cold_cpu,
        "warm_peak": warm.peaks.rss_bytes - warm.peaks.baseline_rss_bytes, "warm_s": warm.timings.total_s, "warm_cpu_s": warm_cpu,
        "restore_s": warm.timings.restore_s, "notes": list(warm.notes),
    }))


def peaks_main(argv: list[str]) -> int:
    """``--peaks``: peak RAM and seconds per face of the task networks in each memory mode."""
    ap = argparse.ArgumentParser(description="ov_1024.py --peaks: " + PEAKS_DOC.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["colorize", "inpaint"], choices=("colorize", "inpaint"))
    ap.add_argument("--modes", nargs="+", default=["faces-only", "balanced", "quality"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=5, metavar=("TASK", "MODE", "WORKLOAD", "MODELS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        t, m, w, models, out = args.worker
        peaks_worker(t, m, w, Path(models), Path(out))
        return 0
    import torch

    from gpen_core.modes import TASKS
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        for task in args.tasks:
            spec = REGISTRY[TASKS[task].model]
            torch.save(random_state_dict(spec.arch, seed=0), models / spec.filename)
        for task in args.tasks:
            for mode in args.modes:
                for w in args.workloads:
                    out = models / f"{task}-{mode}-{w}.json"
                    p = subprocess.run([sys.executable, __file__, "--peaks", "--worker", task, mode, w, str(models), str(out)],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        print(p.stderr[-2000:], file=sys.stderr)
                        continue
                    rows.append(json.loads(out.read_text()))
                    r = rows[-1]
                    print(f"{task} {mode} {w}: {r['dtype']} warm {r['warm_peak'] / 1e6:.0f} MB, cold {r['cold_peak'] / 1e6:.0f} MB, "
                          f"{r['warm_cpu_s']:.1f} CPU s", file=sys.stderr, flush=True)
    print("| task | mode | workload | dtype | peak above idle (warm) | cold request peak | CPU s per request (warm) | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['mode']} | {r['workload']} ({r['faces']} face{'s' if r['faces'] != 1 else ''}) | {r['dtype']} | "
              f"{r['warm_peak'] / 1e6:.0f} MB | {r['cold_peak'] / 1e6:.0f} MB | {r['warm_cpu_s']:.1f} | {r['warm_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main() -> int:
    if "--peaks" in sys.argv[1:]:
        return peaks_main([a for a in sys.argv[1:] if a != "--peaks"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--convert-worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--time-worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.convert_worker:
        folder, prec, out = args.convert_worker
        convert_worker(Path(folder), prec, Path(out))
        return 0
    if args.time_worker:
        folder, runs, threads, out, *paths = args.time_worker
        time_worker(Path(folder), paths, int(runs), int(threads), Path(out))
        return 0
    from gpen_core.platform.cpuinfo import cpu_model
    from gpen_core.runtimes.openvino.base import capabilities

    bf16 = "BF16" in capabilities()
    result: dict = {"cpu": cpu_model(), "threads": args.threads, "runs": args.runs, "convert": []}
    with tempfile.TemporaryDirectory(prefix="gpen-ov1024-") as tmp:
        folder = Path(tmp)
        _checkpoint(folder)
        for prec in ("f32", "bf16") if bf16 else ("f32",):
            out = folder / f"convert-{prec}.json"
            subprocess.run([sys.executable, __file__, "--convert-worker", tmp, prec, str(out)], check=True)
            result["convert"].append(json.loads(out.read_text()))
            print(result["convert"][-1], file=sys.stderr, flush=True)
        paths = ["torch-f32", "ov-f32"] + (["torch-bf16", "ov-bf16"] if bf16 else [])
        out = folder / "times.json"
        subprocess.run([sys.executable, __file__, "--time-worker", tmp, str(args.runs), str(args.threads), str(out), *paths],
                       check=True)
        times = json.loads(out.read_text())
    result["median_cpu_s"] = {p: statistics.median(v) for p, v in times["cpu"].items()}
    result["median_wall_s"] = {p: statistics.median(v) for p, v in times["wall"].items()}
    result["times"] = times
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
