"""GPEN's face parser (ParseNet) with its full-size layers in strips of rows, against whole: memory and CPU time.

    .venv/bin/python benchmarks/bench_parse_strips.py                    # 512 px float32; rows 0 32 64 128; 3 runs
    .venv/bin/python benchmarks/bench_parse_strips.py --rows 0 64 --runs 5 --dtype bfloat16

``rows`` is the strip height of :func:`gpen_core.networks.parsenet_strips.parse_in_strips`
(0: the whole forward, ``FaceParser(strips=False)``). Weights are random values of the
released architecture (memory and time do not depend on them). Every (rows) setting runs in
its own fresh process, interleaved run by run, so a change in machine load hits every setting
alike. Each process builds a :class:`~gpen_core.networks.parsenet.FaceParser` (channels-last,
as the engine runs it), then

- memory: two ``labels`` calls on one 512×512 face, the kernel's high-water mark reset before
  each (``echo 5 > /proc/self/clear_refs``), each call's VmHWM minus the process's RSS before
  the first call (the loaded parser), MiB;
- time: ``--timed`` more calls, CPU seconds of the process per call (``time.process_time``),
  the median, with ``--threads`` torch threads (default 1);
- labels: the share of pixels whose class equals the whole forward's (same weights, same face).
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_strips import _status_kib, hwm_peaks_mib, median_ratio, span  # noqa: E402  (the same VmHWM measure as the generator's strips)


def worker(rows: int, dtype: str, timed: int, threads: int) -> dict:
    import ctypes
    import time

    import numpy as np
    import torch

    from gpen_core.networks import parsenet_strips
    from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    parser = FaceParser(ParseNet(**RELEASED_CONFIG), dtype=getattr(torch, dtype), strips=rows > 0)
    if rows:
        parsenet_strips.STRIP_ROWS = rows
    face = np.random.default_rng(0).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    loaded = _status_kib("VmRSS")
    peaks, labels = hwm_peaks_mib(lambda: parser.labels(face), loaded)
    seconds = []
    for _ in range(timed):
        t = time.process_time()
        parser.labels(face)
        seconds.append(time.process_time() - t)
    parser.strips = False
    whole = parser.labels(face)
    return {"rows": rows, "loaded_mib": loaded / 1024, "peaks": peaks, "cpu_s": statistics.median(seconds),
            "same_labels": float(np.mean(labels == whole))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", type=int, default=[0, 32, 64, 128], help="strip heights; 0 = whole")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timed", type=int, default=3, help="timed calls per process")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", type=int, metavar="ROWS", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.dtype, args.timed, args.threads)))
        return
    results: dict[int, list[dict]] = {}
    for run in range(args.runs):
        for rows in args.rows:
            cmd = [sys.executable, __file__, "--worker", str(rows), "--dtype", args.dtype, "--timed", str(args.timed),
                   "--threads", str(args.threads)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[-1])
            results.setdefault(rows, []).append(r)
            print(f"run {run + 1}: rows={rows}: peaks +{r['peaks'][0]:.0f}/+{r['peaks'][1]:.0f} MiB, {r['cpu_s']:.3f} CPU s "
                  f"(loaded {r['loaded_mib']:.0f} MiB), labels {100 * r['same_labels']:.3f} % as whole", file=sys.stderr, flush=True)

    print(f"| ParseNet 512 px {args.dtype} | 1st call RSS peak, MiB above loaded | 2nd call | CPU s per call | vs whole (same runs) "
          "| labels as whole |")
    print("|---|---|---|---|---|---|")
    base = [r["cpu_s"] for r in results.get(0, [])]
    for rows in args.rows:
        rs = results[rows]
        cpu = [r["cpu_s"] for r in rs]
        ratio = median_ratio(cpu, base)
        print(f"| {f'strips of {rows} rows' if rows else 'whole'} | {span([r['peaks'][0] for r in rs], '.0f')} "
              f"| {span([r['peaks'][1] for r in rs], '.0f')} | {span(cpu, '.3f')} | {ratio} "
              f"| {100 * min(r['same_labels'] for r in rs):.3f} % |")


if __name__ == "__main__":
    main()
