"""Soak test: many sequential restores through one engine; does resident memory keep growing?

Its figures: the soak row of docs/performance.md's perf-table (``bench.py --soak``).

    .venv/bin/python benchmarks/soak.py                      # 200 requests, low mode
    .venv/bin/python benchmarks/soak.py --n 60 --json soak.json

A server keeps one :class:`~gpen_core.restorer.Restorer` for its whole life, so a
small leak per request becomes an out-of-memory after a day. This script makes the
same kind of setup the tests use, by itself, in a temporary models folder:

- the mode's generator with random weights of its exact architecture, saved under
  the registry's file name (so it is resolved and loaded like the real file);
- the real RetinaFace detector from ``../shared/weights`` when it is there (the
  example photo's face is then really detected). Without it the engine runs with
  ``synthetic_weights=True`` (the detector network still runs, with random weights)
  and a fixed face box is given with ``detections=``.

The folder is written by a child process, so the soak process holds only what the
engine holds (making 75 MB of random weights leaves ~250 MB of allocator pools behind).

It then restores the same photo (a file path: decode, detect, restore, paste,
encode every time) ``--n`` times, one after another in one worker thread, as the app's
queue runs them (``--main-thread``: in the main thread, as the CLI does; glibc and
OpenMP keep per-thread state, so the two can differ), records the process's RSS after each request and
the meter's peak during it, and prints a small table and the growth after the
warm-up: the highest RSS of the last 10 requests minus the highest of the first 10
(the first requests fill caches and allocator pools; the target is ≤ 50 MB). Highest
of a window, not one request's value: glibc keeps or returns a request's ~50 MB of
buffers from one request to the next, so RSS after a single request flips between two
levels; a leak raises both. The least-squares trend after request 10 is printed too.
Exit status 1 when the growth is over ``--target-mb``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shlex
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from gpen_core.platform.meter import current_rss, format_bytes  # noqa: E402
from gpen_core.modes import MODES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_WEIGHTS = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared")) / "weights"
DEFAULT_INPUT = ROOT / "examples" / "astronaut_low_resolution.jpg"
WARM_UP = 10  # growth is measured from the end of this request on


def make_models_dir(folder: Path, mode_name: str) -> tuple[bool, str]:
    """Fill ``folder`` for ``mode_name``: random generator, real detector if ../shared has it.

    Returns (real detector present, one line describing the setup).
    """
    import torch

    from gpen_core.options import DETECTOR_WEIGHTS
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    mode = MODES[mode_name]
    gen = REGISTRY[mode.model]
    torch.save(random_state_dict(gen.arch, seed=0), folder / gen.filename)
    det = REGISTRY[DETECTOR_WEIGHTS[mode.detector]]
    source = SHARED_WEIGHTS / det.filename
    if source.is_file():
        (folder / det.filename).symlink_to(source)
        return True, f"random-weights {mode.model} + real {mode.detector} detector ({source})"
    return False, f"random-weights {mode.model} + synthetic {mode.detector} detector with a given face box ({source} not found)"


def central_face(path: Path) -> list[Any]:
    """One template detection on the middle half of the photo (cost is what matters, not the face)."""
    from gpen_core.images.decode import decode_image
    from gpen_core.hwcheck.workloads import template_detection

    w, h = decode_image(path).size
    side = min(w, h) // 2
    x0, y0 = (w - side) // 2, (h - side) // 2
    return [template_detection((x0, y0, x0 + side, y0 + side))]


def soak(n: int, mode_name: str, image: Path, *, main_thread: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run ``n`` sequential restores of ``image`` in a fresh engine; the per-request figures and a summary.

    Requests run one at a time in a single worker thread (``main_thread``: in this thread).
    """
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    with tempfile.TemporaryDirectory(prefix="gpen-soak-") as tmp:
        folder = Path(tmp)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            real_detector, setup = pool.apply(make_models_dir, (folder, mode_name))
        restorer = Restorer(models_dir=folder, device="cpu", synthetic_weights=not real_detector)
        given = None if real_detector else central_face(image)
        options = RestoreOptions(mode=mode_name)
        rss_start = current_rss()
        rows: list[dict[str, Any]] = []
        worker = ThreadPoolExecutor(1, thread_name_prefix="soak-worker")
        t_all = time.perf_counter()
        for i in range(1, n + 1):
            if main_thread:
                res = restorer(str(image), options, detections=given)
            else:
                res = worker.submit(restorer, str(image), options, detections=given).result()
            rows.append({
                "request": i,
                "rss_after_bytes": current_rss(),
                "peak_rss_bytes": res.peaks.rss_bytes,
                "baseline_rss_bytes": res.peaks.baseline_rss_bytes,
                "total_s": round(res.timings.total_s, 4),
                "faces": len(res.faces),
            })  # fmt: skip
            if progress:
                print(f"\r{i}/{n} RSS {format_bytes(rows[-1]['rss_after_bytes'])}", end="", file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
        wall = time.perf_counter() - t_all
        worker.shutdown()
    return {"setup": setup, "mode": mode_name, "input": str(image), "n": n, "rss_start_bytes": rss_start,
            "thread": "main" if main_thread else "one worker thread",
            "wall_s": round(wall, 2), "requests": rows, "summary": summarize(rows)}  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth after the warm-up (highest RSS of the last 10 minus highest of the first 10, and the
    worst single point after the warm-up), plus the per-request trend."""
    rss = [r["rss_after_bytes"] for r in rows]
    ref = max(rss[:WARM_UP])
    after = rss[WARM_UP:] or rss[-1:]
    # Least-squares slope over the requests after the warm-up: a leak shows as a steady climb.
    xs = list(range(len(after)))
    mx, my = sum(xs) / len(xs), sum(after) / len(after)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, after)) / var if var else 0.0
    totals = sorted(r["total_s"] for r in rows)
    return {
        "rss_after_first_bytes": rss[0],
        "rss_max_first_10_bytes": ref,
        "rss_max_last_10_bytes": max(rss[-WARM_UP:]),
        "rss_end_bytes": rss[-1],
        "growth_after_warm_up_bytes": max(rss[-WARM_UP:]) - ref,
        "worst_growth_after_warm_up_bytes": max(after) - ref,
        "slope_bytes_per_request": round(slope),
        "peak_rss_max_bytes": max(r["peak_rss_bytes"] for r in rows),
        "median_total_s": totals[len(totals) // 2],
        "faces": sorted({r["faces"] for r in rows}),
    }


def table(rows: list[dict[str, Any]], lines: int = 10) -> str:
    """Markdown rows at request 1, 10 and evenly spaced to the end."""
    n = len(rows)
    picks = sorted({1, min(WARM_UP, n), n, *(round(1 + k * (n - 1) / (lines - 1)) for k in range(lines))})
    out = ["| request | RSS after | peak during | seconds |", "|---:|---:|---:|---:|"]
    for i in picks:
        r = rows[i - 1]
        out.append(f"| {i} | {format_bytes(r['rss_after_bytes'])} | {format_bytes(r['peak_rss_bytes'])} | {r['total_s']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="number of sequential requests (default 200)")
    ap.add_argument("--mode", default="low", choices=tuple(MODES), help="memory mode (default low)")
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="photo restored every time (default: the smallest example)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every request's figures here")
    ap.add_argument("--main-thread", action="store_true", help="run the requests in the main thread (default: one worker thread, as the app)")
    ap.add_argument("--target-mb", type=float, default=50.0, help="allowed RSS growth after request 10, MB (default 50)")
    args = ap.parse_args(argv)
    if args.n < WARM_UP + 1:
        ap.error(f"--n must be more than the {WARM_UP} warm-up requests")
    command = "python benchmarks/soak.py" + "".join(" " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))

    out = soak(args.n, args.mode, args.input, main_thread=args.main_thread)
    s = out["summary"]
    growth = s["growth_after_warm_up_bytes"]
    ok = growth <= args.target_mb * 1e6
    out |= {"command": command, "target_bytes": int(args.target_mb * 1e6), "passed": ok,
            "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version(), "platform": platform.platform()}}  # fmt: skip
    print(f"Soak: {args.n} requests, mode {args.mode}, {out['setup']}; input {args.input.name}; "
          f"{out['thread']}; {out['wall_s']:.0f} s wall, "
          f"median {s['median_total_s']:.2f} s a request, faces {s['faces']}")
    print(table(out["requests"]))
    print(f"\nRSS before the first request {format_bytes(out['rss_start_bytes'])}, after it {format_bytes(s['rss_after_first_bytes'])}; "
          f"highest of requests 1-{WARM_UP} {format_bytes(s['rss_max_first_10_bytes'])}, of the last {WARM_UP} "
          f"{format_bytes(s['rss_max_last_10_bytes'])}; at the end {format_bytes(s['rss_end_bytes'])}")
    print(f"Growth after request {WARM_UP}: {growth / 1e6:+.1f} MB (worst single point {s['worst_growth_after_warm_up_bytes'] / 1e6:+.1f} MB, "
          f"trend {s['slope_bytes_per_request'] / 1e3:+.1f} kB a request); target ≤ {args.target_mb:.0f} MB: {'PASS' if ok else 'FAIL'}")
    print(f"Generated by `{command}`.")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
