"""This CPU's measured arithmetic peak: the most GFLOP/s a direct convolution reaches here.

Its figures: the floors docs/performance.md quotes under "Targets, per face and per request";
``bench_forward.py --layers`` runs its conv probe in the same process as its per-layer table
("Where balanced's time goes on the Intel Xeon with AMX").

    .venv/bin/python benchmarks/matmul_peak.py [--threads 2] [--n 4096] [--runs 7]

Times, after a warm-up, ``torch.mm`` on two n×n matrices (2·n³ FLOPs a call; torch's BLAS)
and a 3×3 convolution of GPEN's 64 px level (512 → 512 channels, channels-last; oneDNN, the
library OpenVINO's CPU plugin is built on), in float32, and in bfloat16 where the CPU has
native bfloat16 (AVX-512 BF16 or AMX). Prints the best and the median GFLOP/s of each with the
CPU's name. docs/performance.md divides a face's FLOPs (GPEN-BFR-512: 276 GFLOP,
``torch.utils.flop_counter``) by the higher of the two to find the fastest a face can run on
this CPU without fewer multiplies.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rate(call, flops: float, runs: int) -> tuple[float, float]:
    """(best, median) GFLOP/s of ``call()`` doing ``flops``, after one warm-up call."""
    call()  # warm-up: the library picks and prepares its kernel
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - t)
    return flops / min(seconds) / 1e9, flops / statistics.median(seconds) / 1e9


def matmul_peak(dtype, n: int, runs: int) -> tuple[float, float]:
    """(best, median) GFLOP/s of ``torch.mm`` on n×n matrices of ``dtype``."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    return _rate(lambda: torch.mm(a, b), 2 * n**3, runs)


def conv_peak(dtype, runs: int, side: int = 64, channels: int = 512) -> tuple[float, float]:
    """(best, median) GFLOP/s of a 3×3 convolution, ``channels`` → ``channels`` on side×side, channels-last."""
    import torch
    from torch.nn import functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, channels, side, side, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, channels, 3, 3, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        return _rate(lambda: F.conv2d(x, w, padding=1), 2 * side * side * channels * channels * 9, runs)


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
    print(f"{info.cpu_model} ({', '.join(info.cpu_flags)}); {args.threads} threads; torch {torch.__version__}; {args.runs} runs each")
    dtypes = [torch.float32] + ([torch.bfloat16] if cpu_features()["native_bf16"] else [])
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        for what, (best, median) in ((f"torch.mm {args.n}²", matmul_peak(dtype, args.n, args.runs)),
                                     ("conv 3×3 512→512 at 64 px", conv_peak(dtype, args.runs))):
            print(f"{name:>9} {what:>26}: best {best:6.1f} GFLOP/s, median {median:6.1f} GFLOP/s")
    if len(dtypes) == 1:
        print(" bfloat16: not native on this CPU (emulated; not a peak)")


if __name__ == "__main__":
    main()
