"""torch against OpenVINO for GPEN's 1024 px task generator (colorize / inpaint), in CPU seconds.

    .venv/bin/python benchmarks/ov_1024.py                 # convert once, then 3 interleaved runs per path
    .venv/bin/python benchmarks/ov_1024.py --runs 5 --json out.json

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

    from gpen_core.networks.fast import prepare
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


def main() -> int:
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
