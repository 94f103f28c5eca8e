"""Peak RAM and seconds per face of GPEN's task networks (colorize, inpaint) in each memory mode.

    .venv/bin/python benchmarks/task_peaks.py                       # colorize and inpaint, every mode with a plan
    .venv/bin/python benchmarks/task_peaks.py --tasks colorize --modes balanced

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

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = ("aligned", "group")


def worker(task: str, mode: str, workload: str, models: Path, out: Path) -> None:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["colorize", "inpaint"], choices=("colorize", "inpaint"))
    ap.add_argument("--modes", nargs="+", default=["faces-only", "balanced", "quality"])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=5, metavar=("TASK", "MODE", "WORKLOAD", "MODELS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        t, m, w, models, out = args.worker
        worker(t, m, w, Path(models), Path(out))
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
                    p = subprocess.run([sys.executable, __file__, "--worker", task, mode, w, str(models), str(out)],
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


if __name__ == "__main__":
    raise SystemExit(main())
