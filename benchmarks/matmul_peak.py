"""This CPU's matrix-multiply peak: the most GFLOP/s a direct convolution can reach here.

    .venv/bin/python benchmarks/matmul_peak.py [--threads 2] [--n 4096] [--runs 7]

Times ``torch.mm`` on two n×n matrices (2·n³ FLOPs a call) in float32, and in bfloat16 where
the CPU has native bfloat16 (AVX-512 BF16 or AMX), after a warm-up, and prints the best and
the median GFLOP/s with the CPU's name. docs/performance.md divides a face's FLOPs
(GPEN-BFR-512: 276 GFLOP, ``torch.utils.flop_counter``) by this peak to find the fastest
a face can run on this CPU without fewer multiplies.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def peak(dtype, n: int, runs: int) -> tuple[float, float]:
    """(best, median) GFLOP/s of ``torch.mm`` on n×n matrices of ``dtype``."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    torch.mm(a, b)  # warm-up: the library picks and prepares its kernel
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        torch.mm(a, b)
        seconds.append(time.perf_counter() - t)
    flops = 2 * n**3
    return flops / min(seconds) / 1e9, flops / statistics.median(seconds) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()

    import torch

    from gpen_core.hwcheck.info import collect_info
    from gpen_core.networks.plan import cpu_features

    torch.set_num_threads(args.threads)
    info = collect_info()
    print(f"{info.cpu_model} ({', '.join(info.cpu_flags)}); {args.threads} threads; torch {torch.__version__}; torch.mm on {args.n}×{args.n}, {args.runs} runs")
    dtypes = [torch.float32] + ([torch.bfloat16] if cpu_features()["native_bf16"] else [])
    for dtype in dtypes:
        best, median = peak(dtype, args.n, args.runs)
        print(f"{str(dtype).removeprefix('torch.'):>9}: best {best:6.1f} GFLOP/s, median {median:6.1f} GFLOP/s")
    if len(dtypes) == 1:
        print(" bfloat16: not native on this CPU (emulated; not a peak)")


if __name__ == "__main__":
    main()
