"""The fast GPEN forward with its full-size level in strips of rows, against untiled: memory and CPU time.

    .venv/bin/python benchmarks/bench_strips.py                          # 512 f32, 512 bf16, 256 f32; rows 0 32 64 128; 3 runs
    .venv/bin/python benchmarks/bench_strips.py --models 512 --rows 0 64 --runs 5

``rows`` is ``FastGPEN.strip_rows`` (0: the untiled forward). Weights are synthetic
(``gpen_core.networks.synthetic``: the exact architectures, random values; memory and time
do not depend on the values). Every (model, rows) runs in its own fresh process, and the
processes are interleaved run by run (0, 32, 64, 128, 0, 32, ...), so a change in machine load
hits every setting alike. Each process: build and prepare the generator, drop the model, then

- memory: two forwards of one face, the kernel's high-water mark reset before each
  (``echo 5 > /proc/self/clear_refs``), each forward's VmHWM minus the process's RSS before
  the first forward (the loaded model), MiB;
- time: ``--timed`` more forwards, CPU seconds of the process per forward (``time.process_time``),
  the median; ``--threads`` torch threads (default 1: CPU seconds are what two busy cores
  measure reliably);
- tensors: one more forward under the profiler, the most tensor memory alive at once
  (allocator-independent; RSS adds glibc's retained heap on top).

Prints one table: per model and rows, the median tensor peak, the median and range over runs
of both RSS peaks and of the CPU seconds, and the ratio of the CPU seconds to the untiled ones of the same runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {"512": ("GPEN-BFR-512", "float32"), "512-bf16": ("GPEN-BFR-512", "bfloat16"), "256": ("GPEN-BFR-256", "float32")}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def hwm_peaks_mib(call, loaded_kib: int, times: int = 2):
    """``call()`` ``times`` times: each call's VmHWM (reset before it) above ``loaded_kib`` in MiB, and
    the last call's result (an earlier result is dropped before the next call, so it counts in no peak)."""
    peaks, last = [], None
    for _ in range(times):
        last = None
        Path("/proc/self/clear_refs").write_text("5")
        last = call()
        peaks.append((_status_kib("VmHWM") - loaded_kib) / 1024)
    return peaks, last


def span(v: list[float], fmt: str) -> str:
    """The median of ``v`` and its range, e.g. "293 (265-321)"."""
    return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"


def median_ratio(cpu: list[float], base: list[float]) -> str:
    """The median, over runs, of each run's CPU seconds over the same run's baseline ("-" without one)."""
    return f"{statistics.median(c / b for c, b in zip(cpu, base)):.3f}" if base else "-"


def worker(model: str, rows: int, timed: int, threads: int) -> dict:
    import ctypes
    import gc
    import time

    import torch

    from gpen_core.networks.arch import GPENConfig
    from gpen_core.networks.fast import prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_generator

    torch.set_num_threads(threads)
    name, dtype = MODELS[model]
    size = int(name.rsplit("-", 1)[1])
    cfg = GPENConfig(size) if size == 512 else GPENConfig(256, channel_multiplier=1, narrow=0.5)
    net_model = random_generator(cfg, seed=0)
    fwd = prepare(net_model, ForwardPlan(device="cpu", dtype=dtype))
    del net_model
    gc.collect()
    # Hand back the heap the random weights and the preparation left free, so the baseline is
    # the loaded network and a forward cannot hide in memory an earlier step left behind.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    fwd.net.strip_rows = rows
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0)) * 2 - 1
    loaded = _status_kib("VmRSS")
    peaks, _ = hwm_peaks_mib(lambda: fwd(x), loaded)
    seconds = []
    for _ in range(timed):
        t = time.process_time()
        fwd(x)
        seconds.append(time.process_time() - t)
    return {"model": model, "rows": rows, "loaded_mib": loaded / 1024, "peaks": peaks, "cpu_s": statistics.median(seconds),
            "hwm_mib": _status_kib("VmHWM") / 1024, "live_mib": _live_peak_mib(fwd, x)}


def _live_peak_mib(fwd, x) -> float:
    """The most tensor memory alive at once during one forward, above what was alive before it, MiB.

    From PyTorch's own allocation records (the profiler's memory events), so it does not
    depend on how glibc lays out its heap: the figure the code controls; RSS adds the heap's
    retained, fragmented memory on top.
    """
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fwd(x)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = [e for e in json.loads(Path(f.name).read_text())["traceEvents"] if e.get("name") == "[memory]"]
    start = events[0]["args"]["Total Allocated"] - events[0]["args"]["Bytes"]
    return (max(e["args"]["Total Allocated"] for e in events) - start) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rows", nargs="+", type=int, default=[0, 32, 64, 128], help="strip heights; 0 = untiled")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timed", type=int, default=3, help="timed forwards per process")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "ROWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.timed, args.threads)))
        return
    results: dict[tuple[str, int], list[dict]] = {}
    for run in range(args.runs):
        for model in args.models:
            for rows in args.rows:
                cmd = [sys.executable, __file__, "--worker", model, str(rows), "--timed", str(args.timed), "--threads", str(args.threads)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
                r = json.loads(out.strip().splitlines()[-1])
                results.setdefault((model, rows), []).append(r)
                print(f"run {run + 1}: {model} rows={rows}: peaks +{r['peaks'][0]:.0f}/+{r['peaks'][1]:.0f} MiB, "
                      f"{r['cpu_s']:.3f} CPU s (loaded {r['loaded_mib']:.0f} MiB, "
                      f"process peak over the timed forwards {r['hwm_mib']:.0f} MiB)", file=sys.stderr, flush=True)

    print("| model | rows | tensors alive at the peak, MiB | 1st forward RSS peak, MiB above loaded | 2nd forward "
          "| CPU s per forward | vs untiled (same runs) |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        base = [r["cpu_s"] for r in results.get((model, 0), [])]
        for rows in args.rows:
            rs = results[(model, rows)]
            cpu = [r["cpu_s"] for r in rs]
            ratio = median_ratio(cpu, base)
            print(f"| {MODELS[model][0]} {MODELS[model][1]} | {rows or 'untiled'} | {statistics.median(r['live_mib'] for r in rs):.0f} "
                  f"| {span([r['peaks'][0] for r in rs], '.0f')} "
                  f"| {span([r['peaks'][1] for r in rs], '.0f')} | {span(cpu, '.3f')} | {ratio} |")


if __name__ == "__main__":
    main()
