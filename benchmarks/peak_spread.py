"""How steady a request's measured peak is from one fresh process to the next.

Its figures: docs/performance.md, "The same request, peaking higher now and then".

    nice -n 10 .venv/bin/python benchmarks/peak_spread.py [--modes faces-only balanced] [--runs 10]

Runs ``tests/test_mode_ordering.py``'s own child (its generated checkpoints of the released
architectures, the hardware check's 12 MP photo, one torch thread, the engine's meter), ``--runs``
fresh processes per mode, two at a time, modes alternating. Prints every peak as it comes, then per
mode the lowest, median and highest, and how many runs peaked more than ``--above`` MB over the
median. Memory, not time: the machine's load does not move these figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["faces-only", "balanced"])
    ap.add_argument("--runs", type=int, default=10, help="fresh processes per mode")
    ap.add_argument("--above", type=float, default=50.0, help="MB over the mode's median that counts as an outlier")
    args = ap.parse_args()

    from tests.test_mode_ordering import MB, _run_mode, _unsaturated_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gen256 = _unsaturated_checkpoint(folder / "random-GPEN-BFR-256.pth", "GPEN-BFR-256", seed=1)
        gen512 = _unsaturated_checkpoint(folder / "random-GPEN-BFR-512.pth", "GPEN-BFR-512", seed=2)
        jobs = [(mode, i) for i in range(args.runs) for mode in args.modes]

        def one(job: tuple[str, int]) -> tuple[str, float]:
            mode, i = job
            run = _run_mode(mode, gen256 if mode == "low" else gen512, folder, str(i))
            print(f"{mode} {run.peak / MB:.0f} MB ({run.dtype})", flush=True)
            return mode, run.peak / MB

        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(one, jobs))
    for mode in args.modes:
        peaks = [p for m, p in done if m == mode]
        mid = statistics.median(peaks)
        high = sum(p > mid + args.above for p in peaks)
        print(f"{mode}: {len(peaks)} runs, {min(peaks):.0f} / {mid:.0f} / {max(peaks):.0f} MB (lowest / median / "
              f"highest), {high} more than {args.above:.0f} MB over the median")


if __name__ == "__main__":
    main()
