"""Whole-request time and peak RSS per memory mode: a 4000×3000 JPEG with one face.

    .venv/bin/python benchmarks/bench_request.py                  # every mode, 5 runs each after a warm-up
    .venv/bin/python benchmarks/bench_request.py --modes low quality --runs 3
    .venv/bin/python benchmarks/bench_request.py --json out.json

Each mode runs in its own process (a clean peak RSS), through the real engine
(``Restorer.__call__`` on the JPEG file: decode, detect, align, restore, paste,
encode). Generator weights are synthetic (the exact architecture, random values:
time and memory do not depend on them). The detector network of each mode runs
for its real cost: with the real weights when they are in the models folder (or
../shared/weights for mobilenet0.25), else with synthetic weights; the face box
is the known one from the workload either way, so every run restores one face.

Peak RSS is the process's kernel high-water mark during the request (the engine's
meter), "above idle" subtracts the RSS just before the request (torch, OpenCV and
facexlib are imported and the models are loaded by then: the warm-up request).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED_MOBILENET = ROOT.parent / "shared" / "weights" / "detection_mobilenet0.25_Final.pth"


def worker(mode: str, runs: int, models: Path, jpeg: Path, out: Path) -> None:
    from gpen_core.restorer import Restorer, RestoreOptions
    from gpen_core.workloads import STANDARD, template_detection, face_boxes

    photo = next(w for w in STANDARD if w.name == "photo")
    boxes = [template_detection(b) for b in face_boxes(photo)]
    from gpen_core.meter import current_rss
    from gpen_core.restorer import _import_engine

    _import_engine()
    import_rss = current_rss()  # torch, torchvision, OpenCV, facexlib imported; no model yet
    r = Restorer(models_dir=models, synthetic_weights=True)
    first = r(jpeg, RestoreOptions(mode=mode), detections=boxes)  # loads models: the cold request
    rows = []
    for _ in range(runs):
        res = r(jpeg, RestoreOptions(mode=mode), detections=boxes)
        rows.append(
            {
                "total_s": res.timings.total_s,
                "stages": res.timings.stages(),
                "rss": res.peaks.rss_bytes,
                "baseline": res.peaks.baseline_rss_bytes,
                "method": res.peaks.method,
            }
        )
    out.write_text(
        json.dumps(
            {
                "mode": mode,
                "import_rss": import_rss,
                "first_total_s": first.timings.total_s,
                "first_rss": first.peaks.rss_bytes,
                "detector": res.detector,
                "checkpoint": res.checkpoint,
                "dtype": res.dtype,
                "processed": list(res.processed_size),
                "faces": len(res.faces),
                "rows": rows,
            }
        )
    )


def _make_inputs(tmp: Path) -> tuple[Path, Path]:
    from gpen_core.imageio import encode_image
    from gpen_core.workloads import STANDARD, build, example_faces

    photo = next(w for w in STANDARD if w.name == "photo")
    img = build(photo, portraits=example_faces()[:1]).image
    jpeg = tmp / "photo_4000x3000.jpg"
    jpeg.write_bytes(encode_image(img, "jpeg", quality=90))
    models = tmp / "models"
    models.mkdir()
    home = Path(os.environ.get("GPEN_HOME", Path.home() / ".cache" / "gpen"))
    for name in ("detection_mobilenet0.25_Final.pth", "detection_Resnet50_Final.pth", "parsing_parsenet.pth"):
        src = home / name
        if not src.exists() and name == SHARED_MOBILENET.name and SHARED_MOBILENET.exists():
            src = SHARED_MOBILENET
        if src.exists():
            (models / name).symlink_to(src)
    return jpeg, models


def format_table(results: list[dict]) -> str:
    """Markdown: one row per mode (medians over the timed runs), then the stage medians."""
    lines = [
        "| mode | detector | generator dtype | processed | median s | min s | peak RSS | above idle | cold request s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        tot = [row["total_s"] for row in r["rows"]]
        rss = statistics.median(row["rss"] for row in r["rows"])
        above = statistics.median(row["rss"] - row["baseline"] for row in r["rows"])
        lines.append(
            f"| {r['mode']} | {r['detector']} | {r['dtype']} | {r['processed'][0]}×{r['processed'][1]} | "
            f"{statistics.median(tot):.2f} | {min(tot):.2f} | {rss / 1e9:.2f} GB | {above / 1e6:.0f} MB | {r['first_total_s']:.1f} |"
        )
    stages = "; ".join(
        f"{r['mode']}: " + ", ".join(f"{k} {statistics.median(row['stages'][k] for row in r['rows']):.2f}" for k in r["rows"][0]["stages"] if k != "load")
        for r in results
    )
    imports = max(r["import_rss"] for r in results) if results else 0
    return "\n".join(
        [
            *lines,
            "",
            f"Stage medians (s): {stages}.",
            f"Peak RSS is the whole process; of it, {imports / 1e6:.0f} MB is there after importing torch, torchvision, "
            "OpenCV and facexlib, before any model loads. \"Above idle\" is what the request added to the process with its models loaded.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    from gpen_core.modes import MODES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", nargs=4, metavar=("MODE", "RUNS", "MODELS", "JPEG_OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        mode, runs, models, pair = args.worker
        jpeg, out = pair.split("::")
        worker(mode, int(runs), Path(models), Path(jpeg), Path(out))
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="gpen-bench-") as t:
        tmp = Path(t)
        jpeg, models = _make_inputs(tmp)
        for mode in args.modes:
            out = tmp / f"{mode}.json"
            cmd = [sys.executable, __file__, "--worker", mode, str(args.runs), str(models), f"{jpeg}::{out}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{mode}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            results.append(json.loads(out.read_text()))

    print(format_table(results))
    print(f"\n`{' '.join(['.venv/bin/python', 'benchmarks/bench_request.py', *(argv or sys.argv[1:])])}`, {args.runs} runs per mode after a warm-up, RAM method {results[0]['rows'][0]['method'] if results else '?'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
