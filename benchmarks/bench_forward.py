"""Per-face latency of the GPEN forward paths on the CPU, against plain eager.

Its tables: the per-face rows of docs/performance.md's perf-table (through bench.py) and the
per-CPU forward tables under "One request per process" there; ``--sizes 1024`` docs/tasks.md's
"OpenVINO at 1024 px" (the CPU s column).

    .venv/bin/python benchmarks/bench_forward.py                 # 256 and 512, 5 runs, 2 threads
    .venv/bin/python benchmarks/bench_forward.py --compile       # + torch.compile variants
    .venv/bin/python benchmarks/bench_forward.py --quick         # smoke run: 256 only, 2 runs
    .venv/bin/python benchmarks/bench_forward.py --sizes 1024 --paths fast fast-bf16 ov ov-bf16 --runs 3 --no-memory

Weights are random (``gpen_core.networks.synthetic``): time and memory do not depend on
their values. 1024 px is GPEN's task architecture (GPEN-Colorization-1024 and
GPEN-Inpainting-1024 share it). The input is a real face from ../shared when present (else a smooth
synthetic one).

Per size, one fresh process builds every path and times them interleaved
(plain, fast, ..., plain, fast, ...) after one warm-up call each, so a change in
machine load hits every path alike; the ratio to plain eager comes from the same
rounds. Each path then runs alone in a fresh process for its peak RSS during one
forward (and what the forward added to it). The table gives median and min seconds
per face, the ratio, max |Δ| and PSNR against plain eager (PSNR on the raw float
outputs over GPEN's [-1, 1] range), the memory, the first call's seconds
(compile included for compiled paths), and the process's CPU seconds per call (all its
threads, median: on a shared machine the figure that compares). With OpenVINO paths the
conversion runs first in a process of its own, which reports its seconds and peak RSS
(``VmHWM``: what a first ``auto`` request on OpenVINO adds).

Paths:
  plain         our arch with the official generic FIR (``set_fir_impl(m, "native")``), eager float32: the reference
  depthwise     our arch with its default depthwise FIR, eager float32
  fast          ``gpen_core.networks.prepared.prepare`` float32 (the exact path)
  fast-bf16     the same with bfloat16 convolutions (skipped where the CPU has no native bf16 unless --bf16 force)
  fast-compile  float32 + torch.compile (--compile); first call includes the compile
  fast-bf16-compile
  ov            the OpenVINO backend (``gpen_core.runtimes.openvino.generator``), float32; converted once per run into a
                temporary cache (the conversion is reported, not timed as a call)
  ov-bf16       the same compiled for bf16 (only where OpenVINO lists BF16 for this CPU)

``--record`` also stores, for this CPU, the median seconds of fast vs ov (and fast-bf16 vs
ov-bf16) in the models folder, which is what ``--backend auto`` follows.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {256: "GPEN-BFR-256", 512: "GPEN-BFR-512", 1024: "GPEN-Colorization-1024"}
PATHS = ("plain", "depthwise", "fast", "fast-bf16", "fast-compile", "fast-bf16-compile", "ov", "ov-bf16")
OV_CACHE_ENV = "GPEN_BENCH_OV_CACHE"  # the run's conversion cache, shared by its worker processes


# --------------------------------------------------------------------- worker


def _input(size: int):
    import numpy as np
    import torch

    from gpen_core.networks.tensors import to_tensor

    face = ROOT.parent / "shared" / "faces" / "ffhq_00000_512.png"
    if face.exists():
        from PIL import Image

        rgb = np.array(Image.open(face).convert("RGB").resize((size, size), Image.BICUBIC))
    else:  # a smooth colour gradient with a little texture
        yy, xx = np.mgrid[0:size, 0:size] / size
        rgb = np.stack([xx, yy, 0.5 + 0.3 * np.sin(12 * xx * yy)], -1)
        rgb = (np.clip(rgb, 0, 1) * 255).astype(np.uint8)
    return to_tensor(rgb, dtype=torch.float32)


def _forward(path: str, size: int):
    import torch

    from gpen_core.networks.arch import set_fir_impl
    from gpen_core.networks.prepared import prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.weights.lookup import REGISTRY

    model = random_generator(REGISTRY[MODELS[size]].arch, seed=0)
    if path.startswith("ov"):
        from gpen_core.runtimes.openvino import generator as ov_backend

        cache = Path(os.environ.get(OV_CACHE_ENV) or tempfile.mkdtemp(prefix="gpen-ov-"))
        ckpt = cache / f"random-{MODELS[size]}.pth"
        if not ckpt.exists():  # the same file for every worker of the run: converted once
            tmp = ckpt.with_suffix(".tmp")
            torch.save(model.state_dict(), tmp)
            os.replace(tmp, ckpt)
        del model
        fwd = ov_backend.load(ckpt, "bf16" if path == "ov-bf16" else "f32", models_dir=cache)
        if fwd.convert_s is not None:
            print(f"converted {ckpt.name} to OpenVINO in {fwd.convert_s:.1f} s", file=sys.stderr)
        return fwd, torch.float32
    if path in ("plain", "depthwise"):
        set_fir_impl(model, "native" if path == "plain" else "depthwise")

        def run(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return model(x)

        return run, torch.float32
    plan = ForwardPlan(dtype="bfloat16" if "bf16" in path else "float32", compile=path.endswith("compile"))
    fwd = prepare(model, plan)
    del model  # only the prepared network's tensors stay (for float32 it shares the big ones)
    return fwd, plan.dtype_torch


def time_worker(size: int, paths: list[str], runs: int, threads: int, out: Path) -> None:
    """All paths in one process, runs interleaved (p1 p2 p3 p1 p2 p3 ...): load drifts hit every path alike."""
    import torch

    torch.set_num_threads(threads)
    x32 = _input(size)
    fwds, first, outputs = {}, {}, {}
    for path in paths:
        fwd, dtype = _forward(path, size)
        x = x32.to(dtype)
        t = time.perf_counter()
        y = fwd(x)
        first[path] = time.perf_counter() - t
        fwds[path] = (fwd, x)
        outputs[path] = y.float().cpu()
    times: dict[str, list[float]] = {p: [] for p in paths}
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(runs):
        for path, (fwd, x) in fwds.items():
            c, t = time.process_time(), time.perf_counter()
            fwd(x)
            times[path].append(time.perf_counter() - t)
            cpu[path].append(time.process_time() - c)
    torch.save(outputs, out.with_suffix(".pt"))
    out.write_text(json.dumps({"times": times, "cpu": cpu, "first_s": first}))


def convert_worker(size: int, out: Path) -> None:
    """The OpenVINO conversion (and float32 compile) of the random-weight checkpoint, alone in a
    fresh process: its seconds and the process's peak RSS (``VmHWM``)."""
    fwd, _ = _forward("ov", size)
    hwm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    out.write_text(json.dumps({"convert_s": fwd.convert_s, "load_s": fwd.load_s, "peak_rss": hwm}))


def memory_worker(size: int, path: str, threads: int, out: Path) -> None:
    """One path alone in a fresh process: peak RSS of one forward after a warm-up call."""
    import torch

    from gpen_core.platform.meter import PeakMeter

    torch.set_num_threads(threads)
    fwd, dtype = _forward(path, size)
    x = _input(size).to(dtype)
    fwd(x)
    with PeakMeter(cuda=False) as meter:
        fwd(x)
    p = meter.peaks
    out.write_text(json.dumps({"peak_rss": p.rss_bytes, "fwd_rss": p.rss_delta_bytes, "rss_method": p.method}))


def _ov_unavailable(paths: list[str]) -> dict[str, str]:
    """{path: why} for the OpenVINO paths this machine cannot run."""
    wanted = [p for p in paths if p.startswith("ov")]
    if not wanted:
        return {}
    from gpen_core.runtimes.openvino import generator as ov_backend

    why = ov_backend.unavailable_reason()
    if why:
        return {p: f"skipped the OpenVINO paths: {why}" for p in wanted}
    if "ov-bf16" in wanted and "BF16" not in ov_backend.capabilities():
        return {"ov-bf16": "skipped ov-bf16: OpenVINO has no BF16 on this CPU (needs AVX-512 BF16 or AMX)"}
    return {}


def _record(results: list[dict]) -> None:
    """Store torch-vs-OpenVINO medians for this CPU (see gpen_core.runtimes.openvino.generator.record_speed)."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    by = {(r["size"], r["path"]): r["median_s"] for r in results}
    for size in sorted({r["size"] for r in results}):
        for torch_path, ov_path, dtype in (("fast", "ov", "float32"), ("fast-bf16", "ov-bf16", "bfloat16")):
            if (size, torch_path) in by and (size, ov_path) in by:
                f = ov_backend.record_speed(size, dtype, by[(size, torch_path)], by[(size, ov_path)], source="benchmarks/bench_forward.py")
                print(f"recorded {size} px {dtype}: torch {by[(size, torch_path)]:.3f} s, OpenVINO {by[(size, ov_path)]:.3f} s -> {f}")


def _run(args: list[str], env: dict[str, str], out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args, "--out", str(out)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[:300]}
    return json.loads(out.read_text())


def _compare(ref, out) -> tuple[float, float]:
    """(max |Δ|, PSNR in dB) of ``out`` against ``ref``, both float N×3×S×S.

    PSNR over the generator's nominal [-1, 1] range (peak-to-peak 2), on the raw
    floats: random weights drive much of the output past ±1, where uint8 images
    would clip both to the same value and hide the difference.
    """
    import math

    d = (out.double() - ref.double())
    mse = float(d.pow(2).mean())
    return float(d.abs().max()), (math.inf if mse == 0 else 10 * math.log10(2.0**2 / mse))


def _machine(threads: int) -> str:
    import platform

    import torch

    from gpen_core.networks.plan import cpu_features

    model = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    from gpen_core.runtimes.openvino import generator as ov_backend

    feats = ",".join(k for k, v in cpu_features().items() if v) or "none"
    ov = ov_backend.openvino_version()
    ov_text = f"OpenVINO {ov.split('-')[0]} ({','.join(ov_backend.capabilities())})" if ov and not ov_backend.unavailable_reason() else "no OpenVINO"
    return (
        f"{model}; {os.cpu_count()} cpus, {threads} threads; torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); "
        f"{ov_text}; features: {feats}; load average {os.getloadavg()[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512], choices=sorted(MODELS))
    ap.add_argument("--paths", nargs="+", choices=PATHS, help="default: plain depthwise fast fast-bf16 (+ compiled with --compile)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per path after one warm-up call (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="add the torch.compile paths (first call compiles)")
    ap.add_argument("--bf16", choices=("auto", "force", "skip"), default="auto", help="auto: only where the CPU has native bf16")
    ap.add_argument("--thp", action="store_true", help="run every path with THP_MEM_ALLOC_ENABLE=1 (transparent huge pages for torch's CPU buffers)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 256 only, 2 runs, plain and fast")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--record", action="store_true", help="store fast-vs-ov seconds for this CPU in the models folder (read by --backend auto)")
    ap.add_argument("--time-worker", nargs="+", metavar="SIZE PATH", help=argparse.SUPPRESS)
    ap.add_argument("--memory-worker", nargs=2, metavar=("SIZE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--convert-worker", type=int, metavar="SIZE", help=argparse.SUPPRESS)
    ap.add_argument("--no-memory", action="store_true", help="skip the per-path peak-RSS processes")
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.time_worker:
        time_worker(int(args.time_worker[0]), args.time_worker[1:], args.runs, args.threads, args.out)
        return 0
    if args.memory_worker:
        memory_worker(int(args.memory_worker[0]), args.memory_worker[1], args.threads, args.out)
        return 0
    if args.convert_worker:
        convert_worker(args.convert_worker, args.out)
        return 0

    from gpen_core.networks.plan import cpu_features

    if args.quick:
        args.sizes, args.runs = [256], 2
    paths = list(args.paths or (["plain", "fast"] if args.quick else ["plain", "depthwise", "fast", "fast-bf16"]))
    if args.compile and not args.paths:
        paths += ["fast-compile", "fast-bf16-compile"]
    native_bf16 = cpu_features()["native_bf16"]
    skipped = []
    if args.bf16 == "skip" or (args.bf16 == "auto" and not native_bf16):
        skipped = [p for p in paths if "bf16" in p]
        paths = [p for p in paths if "bf16" not in p]
    ov_missing = _ov_unavailable(paths)
    if ov_missing:
        skipped += [p for p in paths if p.startswith("ov") and p in ov_missing]
        print("; ".join(sorted(set(ov_missing.values()))))
        paths = [p for p in paths if p not in ov_missing]
    if "plain" not in paths:
        paths.insert(0, "plain")

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    ov_cache = tempfile.TemporaryDirectory(prefix="gpen-bench-ov-")
    env[OV_CACHE_ENV] = ov_cache.name
    if args.thp:
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    print(_machine(args.threads))
    if skipped:
        print(f"skipped {', '.join(skipped)}: this CPU has no native bfloat16 (use --bf16 force to time the emulation)")
    print(
        f"{args.runs} timed runs per path after 1 warm-up, interleaved across paths in one process; "
        "peak RSS from a separate process per path" + (", THP on" if args.thp else "")
    )
    header = (
        f"{'size':>4}  {'path':<18} {'median s':>9} {'min s':>8} {'x plain':>8} {'max|Δ|':>9} {'PSNR dB':>8} "
        f"{'peak RSS':>9} {'fwd +RSS':>9} {'1st call s':>10} {'CPU s':>7}"
    )
    print(header)
    print("-" * len(header))
    import torch

    results = []
    with tempfile.TemporaryDirectory(prefix="gpen-bench-") as tmp:
        for size in args.sizes:
            load0 = os.getloadavg()[0]
            if any(p.startswith("ov") for p in paths):
                c = _run(["--convert-worker", str(size)], env, Path(tmp) / f"convert_{size}.json")
                print(f"{size:>4}  OpenVINO conversion in a fresh process: " + (f"{c['convert_s']:.1f} s, compile {c['load_s']:.1f} s, "
                      f"peak RSS {c['peak_rss'] / 2**20:.0f} MiB" if "peak_rss" in c else f"failed: {c['error']}"), flush=True)
            out = Path(tmp) / f"time_{size}.json"
            r = _run(["--time-worker", str(size), *paths, "--runs", str(args.runs), "--threads", str(args.threads)], env, out)
            if "error" in r:
                print(f"{size:>4}  timing failed: {r['error']}")
                continue
            outputs = torch.load(out.with_suffix(".pt"), weights_only=True)
            base = statistics.median(r["times"]["plain"])
            for path in paths:
                ts = r["times"][path]
                med, best = statistics.median(ts), min(ts)
                dev, psnr = _compare(outputs["plain"], outputs[path])
                mem = {} if args.no_memory else _run(["--memory-worker", str(size), path, "--threads", str(args.threads)], env, Path(tmp) / f"mem_{size}_{path}.json")
                rss = f"{mem['peak_rss'] / 1e6:>7.0f}MB {mem['fwd_rss'] / 1e6:>7.0f}MB" if "peak_rss" in mem else f"{'n/a':>9} {'n/a':>9}"
                print(
                    f"{size:>4}  {path:<18} {med:>9.3f} {best:>8.3f} {base / med:>7.2f}x {dev:>9.2e} {psnr:>8.1f} "
                    f"{rss} {r['first_s'][path]:>10.2f} {statistics.median(r['cpu'][path]):>7.2f}",
                    flush=True,
                )
                results.append(
                    {"size": size, "path": path, "median_s": med, "min_s": best, "times": ts, "ratio": base / med,
                     "cpu_median_s": statistics.median(r["cpu"][path]),
                     "max_abs_dev": dev, "psnr_db": psnr, "first_s": r["first_s"][path], **mem}
                )
            print(f"{'':>4}  (load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    ov_cache.cleanup()
    if args.record:
        _record(results)
    if args.json:
        args.json.write_text(json.dumps({"machine": _machine(args.threads), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
