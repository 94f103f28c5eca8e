"""What Ray costs and gives on this machine: the figures in docs/ray.md.

Its table: docs/ray.md's measured figures (batch and Serve against the plain CLI).

    .venv/bin/python benchmarks/bench_ray.py --models-dir DIR [--photos 12] [--mode low] [--workers 1]

DIR must hold what ``--mode`` loads (low: GPEN-BFR-256.pth and
detection_mobilenet0.25_Final.pth; random generator weights give the same time and
memory). Measures, one after the other in this process:

- plain: the CLI's loop (one Restorer, photos one after another), end to end and steady state;
- ray batch: ``run_batch`` on a local loopback Ray (start-up included), end to end and steady state;
- ray serve: Ray start-up, deployment ready (warm-up included), idle PSS of every Ray
  process, and the per-request overhead (handle round trip minus the replica's own total).

Wall-clock figures on a shared machine are inflated by whatever else runs; memory is not.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = sorted((ROOT / "examples").glob("*.jpg"))


def _folder(n: int) -> Path:
    src = Path(tempfile.mkdtemp(prefix="bench-ray-in-"))
    for i in range(n):
        ex = EXAMPLES[i % len(EXAMPLES)]
        shutil.copy(ex, src / f"{i:03d}_{ex.name}")
    return src


def _steady(stamps: list[float]) -> float:
    """Photos per second between the first and the last result (start-up and warm-up excluded)."""
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else float("nan")


def bench_plain(src: Path, mode: str, models_dir: str) -> dict:
    from gpen_core import RestoreOptions
    from gpen_core import Restorer

    t0 = time.perf_counter()
    r = Restorer(models_dir=models_dir)
    stamps = []
    for p in sorted(src.iterdir()):
        r(p, RestoreOptions(mode=mode))
        stamps.append(time.perf_counter())
    n = len(stamps)
    return {"photos": n, "wall_s": round(stamps[-1] - t0, 2), "photos_per_s_end_to_end": round(n / (stamps[-1] - t0), 3),
            "photos_per_s_steady": round(_steady(stamps), 3)}


def bench_batch(src: Path, mode: str, models_dir: str, workers: int | None) -> dict:
    from gpen_core import RestoreOptions
    from gpen_core.scaleout.batch import BatchConfig, run_batch
    from gpen_core.scaleout.runtime import RaySettings

    out = Path(tempfile.mkdtemp(prefix="bench-ray-out-"))
    stamps: list[float] = []
    t0 = time.perf_counter()
    settings = RaySettings(workers=workers, models_dir=models_dir)
    s = run_batch(BatchConfig(source=str(src), output=out, options=RestoreOptions(mode=mode), ray=settings),
                  on_record=lambda rec, d, t: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    ok = s.count("ok")
    shutil.rmtree(out, ignore_errors=True)
    return {"photos": ok, "workers": s.workers, "cpus_per_worker": s.cpus_per_worker, "wall_s": round(wall, 2),
            "photos_per_s_end_to_end": round(ok / wall, 3), "photos_per_s_steady": round(_steady(stamps), 3),
            "first_result_after_s": round(stamps[0] - t0, 2)}


def bench_serve(mode: str, models_dir: str, requests: int) -> dict:
    import psutil
    from ray import serve

    from gpen_core import RestoreOptions
    from gpen_core.scaleout.runtime import RaySettings, ray_session
    from gpen_core.scaleout.serve import ServeConfig, deploy

    t0 = time.perf_counter()
    with ray_session() as session:
        t_ray = time.perf_counter() - t0
        t1 = time.perf_counter()
        one = RaySettings(workers=1, models_dir=models_dir)
        handle = deploy(ServeConfig(ray=one, num_cpus=1, warm_mode=mode, port=7931))
        handle.status.remote().result()
        t_ready = time.perf_counter() - t1
        time.sleep(5)
        procs = psutil.Process().children(recursive=True)
        pss = 0
        for p in procs:
            try:
                pss += p.memory_full_info().pss
            except (psutil.Error, AttributeError):
                pass
        data = EXAMPLES[0].read_bytes()
        over = []
        for _ in range(requests):
            t = time.perf_counter()
            served = handle.restore.remote(data, RestoreOptions(mode=mode)).result()
            over.append(time.perf_counter() - t - served.unwrap().timings.total_s)
        peaks = served.unwrap().peaks
        serve.shutdown()
    return {"ray_start_s": round(t_ray, 1), "deployment_ready_s": round(t_ready, 1), "cluster_cpus": session.cpus,
            "idle_pss_bytes_ray_processes": pss, "ray_processes": len(procs),
            "request_overhead_s_median": round(statistics.median(over), 3), "request_overhead_s_max": round(max(over), 3),
            "replica_baseline_rss_bytes": peaks.baseline_rss_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--photos", type=int, default=12)
    ap.add_argument("--mode", default="low")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--skip", nargs="*", default=(), choices=("plain", "batch", "serve"))
    a = ap.parse_args()
    src = _folder(a.photos)
    out = {}
    if "plain" not in a.skip:
        out["plain"] = bench_plain(src, a.mode, a.models_dir)
        print(json.dumps({"plain": out["plain"]}), flush=True)
    if "batch" not in a.skip:
        out["ray_batch"] = bench_batch(src, a.mode, a.models_dir, a.workers)
        print(json.dumps({"ray_batch": out["ray_batch"]}), flush=True)
    if "serve" not in a.skip:
        out["ray_serve"] = bench_serve(a.mode, a.models_dir, a.requests)
        print(json.dumps({"ray_serve": out["ray_serve"]}), flush=True)
    shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main()
