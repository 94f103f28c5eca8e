"""Whole-request time and peak RSS per memory mode: a 4000×3000 JPEG with one face.

Its tables: the whole-request rows of docs/performance.md's perf-table (through bench.py) and
"Where a 12 MP request's memory goes" there (``--stages``); with ``--task-peaks``, docs/tasks.md's
"The hardware check measures the tasks" table (GPEN's 1024 px task networks per mode); with
``--collections``, "Garbage collection in the app" there (the app's requests with and without its start's freeze).

    .venv/bin/python benchmarks/bench_request.py                  # every mode, 5 runs each after a warm-up
    .venv/bin/python benchmarks/bench_request.py --modes low quality --runs 3
    .venv/bin/python benchmarks/bench_request.py --json out.json
    .venv/bin/python benchmarks/bench_request.py --modes low quality --one-shot   # as the CLI runs one photo
    .venv/bin/python benchmarks/bench_request.py --task-peaks                      # colorize and inpaint, every mode with a plan
    .venv/bin/python benchmarks/bench_request.py --task-peaks --tasks colorize --modes balanced
    .venv/bin/python benchmarks/bench_request.py --collections                     # low and balanced, alternated, 3 pairs

Each mode runs in its own process (a clean peak RSS), through the real engine
(``Restorer.__call__`` on the JPEG file: decode, detect, align, restore, paste,
encode). Every network is a file in the models folder, as a user who put the weights
there by hand has it: the real detector and parser when they are in ``$GPEN_HOME``
(or ../shared/weights for mobilenet0.25), else random weights of the exact released
architecture written as that file (time and memory do not depend on the values); the
generators are always random weights of the released architectures. Nothing is converted
for OpenVINO beforehand unless asked (``--backend openvino``, ``--fresh``): ``--one-shot``
is then the first run of ``python -m gpen_core restore`` on a fresh, offline install. The
face box is the known one from the workload, so every run restores one face; the mode's
detector still runs on the photo for its true cost (random weights find no face).

Peak RSS is the process's kernel high-water mark during the request (the engine's
meter), "above idle" subtracts the RSS just before the request (torch, OpenCV and
facexlib are imported and the models are loaded by then: the warm-up request).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpen_core.platform import meter  # noqa: E402

SHARED_MOBILENET = ROOT.parent / "shared" / "weights" / "detection_mobilenet0.25_Final.pth"


# ------------------------------------------------------------ peak RSS per stage (--stages)
# Wraps the engine's stage functions (decode, detect, restore, parse mask, warp, compose, encode)
# and, at every boundary, reads the kernel's resident high-water mark (VmHWM) for the stage that
# just ended and resets it (/proc/self/clear_refs), so each figure is that stage's exact peak, not
# a sample. Time between the wrapped calls is "other". Linux only; the engine's own meter is reset
# by this too, so its figure for a profiled request is not used.

STAGES = ("decode", "load", "detect", "restore", "mask", "warp", "compose", "encode", "other")


class StageRSS:
    """Running maxima of the process peak per stage, in bytes, over every request profiled."""

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}
        self._label = "other"

    def _close(self) -> None:
        hwm = meter.peak_rss()
        self.peaks[self._label] = max(self.peaks.get(self._label, 0), hwm)
        meter._reset_hwm(hwm)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        outer = self._label
        self._close()
        self._label = name
        try:
            yield
        finally:
            self._close()
            self._label = outer

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(owner, attr)
        if getattr(fn, "_stage_rss", False):
            return

        @functools.wraps(fn)
        def wrapped(*a: Any, **k: Any) -> Any:
            with self.stage(name):
                return fn(*a, **k)

        wrapped._stage_rss = True  # type: ignore[attr-defined]
        setattr(owner, attr, wrapped)

    def install(self) -> None:
        """Wrap the engine's stage functions (module attributes looked up at call time)."""
        from gpen_core.engine import pipeline
        from gpen_core.engine.model_cache import ModelCache
        from gpen_core.faces import photo
        from gpen_core.images import decode

        self.wrap(pipeline, "decode", "decode")
        self.wrap(decode, "encode_image", "encode")
        self.wrap(photo, "_restore_checked", "restore")  # the generator, then smoothing, blend, identity check
        self.wrap(photo, "face_mask", "mask")
        self.wrap(photo, "warp_piece", "warp")
        self.wrap(photo, "compose", "compose")
        for attr in ("generator", "parser"):
            self.wrap(ModelCache, attr, "load")
        original = ModelCache.detector

        def detector(cache: Any, *a: Any, **k: Any) -> Any:
            with self.stage("load"):
                det = original(cache, *a, **k)
            if not getattr(det.detect, "_stage_rss", False):
                self.wrap(det, "detect", "detect")
            return det

        ModelCache.detector = detector  # type: ignore[method-assign]

    def table(self) -> dict[str, int]:
        return {s: self.peaks[s] for s in STAGES if s in self.peaks}


def stand_ins(models: Path) -> None:
    """Let random-weight files stand in for released files whose sha256 the registry pins.

    The models folder holds random weights of the released ResNet-50 detector when the real
    file is not at hand (:func:`_make_inputs`); the engine verifies every file against the
    registry, whose pinned hash is the released file's, so in this process that entry is
    checked as an unpinned one is (its hash recorded beside it on first use). Real files keep
    their pins."""
    from dataclasses import replace

    from gpen_core.weights.registry import REGISTRY

    for name, spec in list(REGISTRY.items()):
        path = models / spec.filename
        if spec.sha256 is not None and path.exists() and not path.is_symlink():
            REGISTRY[name] = replace(spec, sha256=None, size_bytes=None)


def worker(mode: str, runs: int, models: Path, jpeg: Path, out: Path, backend: str | None = None, keep_previous: bool = False,
           stages: bool = False) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.hwcheck.workloads import STANDARD, template_detection, face_boxes

    photo = next(w for w in STANDARD if w.name == "photo")
    boxes = [template_detection(b) for b in face_boxes(photo)]
    from gpen_core.platform.meter import current_rss
    from gpen_core.engine.pipeline import import_engine

    start_rss = current_rss()  # the interpreter, numpy and gpen_core's light modules
    import_engine()
    import_rss = current_rss()  # torch, torchvision, OpenCV, facexlib imported; no model yet
    stand_ins(models)
    r = Restorer(models_dir=models, synthetic_weights=True)
    from gpen_core.modes import MODES
    from gpen_core.weights.lookup import REGISTRY

    # The generator as users have it: a checkpoint file on disk (loaded memory-mapped), with
    # random weights of the exact architecture. In-memory synthetic weights hid a real cost once
    # (tensors still aliasing the mmap kept the whole 284 MB file resident).
    ckpt = models / REGISTRY[MODES[mode].model].filename
    opts = RestoreOptions(mode=mode, model=str(ckpt) if ckpt.exists() else None, **({"backend": backend} if backend else {}))
    first = r(jpeg, opts, detections=boxes)  # loads models: the cold request
    first_total_s, first_rss = first.timings.total_s, first.peaks.rss_bytes
    del first  # a caller that kept the previous result would add its image to the next peak
    profiler = None
    if stages:  # after the cold request: the timed requests' stages only, models resident
        profiler = StageRSS()
        profiler.install()
    models_rss = current_rss()
    rows = []
    info: dict = {}
    kept = []  # --keep-previous: the old benchmark's behaviour, to measure what it cost
    for _ in range(runs):
        res = r(jpeg, opts, detections=boxes)
        rows.append(
            {
                "total_s": res.timings.total_s,
                "stages": res.timings.stages(),
                "rss": res.peaks.rss_bytes,
                "baseline": res.peaks.baseline_rss_bytes,
                "method": res.peaks.method,
            }
        )
        info = {
            "detector": res.detector,
            "checkpoint": res.checkpoint,
            "dtype": res.dtype,
            "backend": getattr(res, "backend", "torch"),
            "backend_reason": getattr(res, "backend_reason", ""),
            "processed": list(res.processed_size),
            "faces": len(res.faces),
        }
        if keep_previous:
            kept[:] = [res]
        del res  # only the numbers are kept: the next request is measured without this one's images
    out.write_text(
        json.dumps(
            {
                "mode": mode,
                "start_rss": start_rss,
                "import_rss": import_rss,
                "models_rss": models_rss,
                "stage_rss": profiler.table() if profiler else None,
                "first_total_s": first_total_s,
                "first_rss": first_rss,
                **info,
                "rows": rows,
            }
        )
    )


def one_shot_worker(mode: str, models: Path, jpeg: Path, out: Path, backend: str | None = None, keep: bool = False) -> None:
    """One request in a fresh process, as ``python -m gpen_core restore`` with one photo runs it
    (``Restorer(lifetime=Lifetime.ONE_SHOT)``: each network loaded for its stage and dropped after it): the
    process's peak over its whole life, per stage from the first one (loads included). ``keep``:
    the same request with every network kept loaded (a server's behaviour), to compare."""
    import time

    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.hwcheck.workloads import STANDARD, template_detection, face_boxes
    from gpen_core.platform.meter import current_rss
    from gpen_core.engine.pipeline import import_engine
    from gpen_core.modes import MODES
    from gpen_core.weights.lookup import REGISTRY

    photo = next(w for w in STANDARD if w.name == "photo")
    boxes = [template_detection(b) for b in face_boxes(photo)]
    start_rss = current_rss()
    import_engine()
    import_rss = current_rss()
    profiler = StageRSS()
    profiler.install()
    stand_ins(models)
    # Every network is a file here (_make_inputs), so each runtime is decided as for a user's files:
    # a network without one would be synthetic, which "runs as chosen" (converted inside the
    # request). synthetic_weights only keeps the detector running for its true cost beside the
    # given box, as the hardware check does.
    ckpt = models / REGISTRY[MODES[mode].model].filename
    opts = RestoreOptions(mode=mode, model=str(ckpt), **({"backend": backend} if backend else {}))
    cpu = time.process_time()
    from gpen_core.engine.lifetime import Lifetime

    lifetime = Lifetime.RESIDENT if keep else Lifetime.ONE_SHOT
    res = Restorer(models_dir=models, synthetic_weights=True, lifetime=lifetime)(jpeg, opts, detections=boxes)
    cpu = time.process_time() - cpu
    table = profiler.table()
    out.write_text(json.dumps({
        "mode": mode, "start_rss": start_rss, "import_rss": import_rss, "models_rss": import_rss, "stage_rss": table,
        "peak": max(table.values()), "total_s": res.timings.total_s, "cpu_s": cpu, "load_s": res.timings.load_s,
        "backend": res.backend, "dtype": res.dtype, "kept_models": keep, "detector": res.detector, "faces": len(res.faces),
        "runtimes": [f"{r.network} {r.name}: {r.runtime}" for r in res.runtimes], "notes": list(res.notes),
    }))


def format_one_shot(results: list[dict]) -> str:
    """Markdown: one row per mode: the process's peak, the request's seconds and CPU seconds."""
    lines = ["| mode | generator | whole-process peak | every run's peak | request s (loads included) | of it loading s | request CPU s |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        every = ", ".join(f"{p / 2**20:.0f}" for p in r.get("peaks", [r["peak"]]))
        lines.append(f"| {r['mode']}{' (models kept)' * r.get('kept_models', False)} | {r['backend']} {r['dtype']} | {r['peak'] / 2**20:.0f} MiB | {every} | {r['total_s']:.2f} | "
                     f"{r['load_s']:.2f} | {r['cpu_s']:.2f} |")
    return "\n".join(lines)


def _make_inputs(tmp: Path) -> tuple[Path, Path]:
    from gpen_core.images.decode import encode_image
    from gpen_core.hwcheck.workloads import STANDARD, build, example_faces

    photo = next(w for w in STANDARD if w.name == "photo")
    img = build(photo, portraits=example_faces()[:1]).image
    jpeg = tmp / "photo_4000x3000.jpg"
    jpeg.write_bytes(encode_image(img, "jpeg", quality=90))
    models = tmp / "models"
    models.mkdir()
    home = Path(os.environ.get("GPEN_HOME", Path.home() / ".cache" / "gpen"))
    import torch

    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    for name in ("GPEN-BFR-256", "GPEN-BFR-512"):  # random weights, exact architectures, on disk
        torch.save(random_state_dict(REGISTRY[name].arch, seed=0), models / REGISTRY[name].filename)
    for name in ("detection_mobilenet0.25_Final.pth", "detection_Resnet50_Final.pth", "parsing_parsenet.pth"):
        src = home / name
        if not src.exists() and name == SHARED_MOBILENET.name and SHARED_MOBILENET.exists():
            src = SHARED_MOBILENET
        if src.exists():
            (models / name).symlink_to(src)
    _random_files(models)
    return jpeg, models


def _random_files(models: Path) -> None:
    """Random weights of the released ResNet-50 detector and face parser, written as the files a user
    puts in the models folder, for those not linked from ``$GPEN_HOME``: then every mode finds each
    of its networks as a file (the mobilenet0.25 detector is in ../shared)."""
    import torch

    if not (models / "detection_Resnet50_Final.pth").exists():
        from gpen_core.faces.detect import build_retinaface

        net, _ = build_retinaface(None, "resnet50")  # class head zeroed: scores stay under any threshold
        torch.save({k: v.contiguous() for k, v in net.state_dict().items()}, models / "detection_Resnet50_Final.pth")
        del net
    if not (models / "parsing_parsenet.pth").exists():
        from gpen_core.networks.parsenet import RELEASED_CONFIG, ParseNet

        torch.manual_seed(0)
        torch.save(ParseNet(**RELEASED_CONFIG).state_dict(), models / "ParseNet-latest.pth")


def format_table(results: list[dict]) -> str:
    """Markdown: one row per mode (medians over the timed runs), then the stage medians."""
    lines = [
        "| mode | detector | generator | processed | median s | min s | peak RSS | above idle | cold request s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        tot = [row["total_s"] for row in r["rows"]]
        rss = statistics.median(row["rss"] for row in r["rows"])
        above = statistics.median(row["rss"] - row["baseline"] for row in r["rows"])
        lines.append(
            f"| {r['mode']} | {r['detector']} | {r.get('backend', 'torch')} {r['dtype']} | {r['processed'][0]}×{r['processed'][1]} | "
            f"{statistics.median(tot):.2f} | {min(tot):.2f} | {rss / 2**20:.0f} MiB | {above / 2**20:.0f} MiB | {r['first_total_s']:.1f} |"
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
            f"Peak RSS is the whole process; of it, {imports / 2**20:.0f} MiB is there after the engine's imports (torch, "
            "OpenCV, facexlib; OpenVINO with that backend), before any model loads. \"Above idle\" is what the request added "
            "to the process with its models loaded.",
        ]
    )


def format_stages(results: list[dict]) -> str:
    """Markdown: the process's RSS after start, imports and models, then its peak in each stage (MiB, max over runs)."""
    used = [s for s in STAGES if any(s in (r.get("stage_rss") or {}) for r in results)]
    lines = [
        "| mode | start | imports | models resident | " + " | ".join(f"{s} peak" for s in used) + " |",
        "|---|---|---|---|" + "---|" * len(used),
    ]
    for r in results:
        st = r.get("stage_rss") or {}
        cells = [f"{st[s] / 2**20:.0f}" if s in st else "–" for s in used]
        lines.append(f"| {r['mode']} | {r['start_rss'] / 2**20:.0f} | {r['import_rss'] / 2**20:.0f} | {r['models_rss'] / 2**20:.0f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nMiB, whole process. Each stage's figure is the process's peak while that stage ran (VmHWM reset at every boundary)."


def convert_all(mode: str, models: Path, jpeg: Path, backend: str = "openvino") -> None:
    """The first-use conversions of ``mode``, in their own process (users pay them once, not per process).

    ``openvino``: one request on OpenVINO converts and caches every network the mode runs
    there (the generator, and the parser and detector where the mode has them), as a user's
    first request would. ``auto``: what ``python -m gpen_core download`` does after
    verifying the files on a fresh install: convert what ``auto`` runs on OpenVINO on this
    CPU (:func:`gpen_core.engine.prepare.convert_ahead`)."""
    import time

    from gpen_core.modes import MODES

    stand_ins(models)
    t = time.perf_counter()
    if backend == "auto":
        from gpen_core.engine.prepare import convert_ahead

        report = convert_ahead([MODES[mode]], models_dir=models)
        print(f"{mode}: converted ahead in {time.perf_counter() - t:.1f} s: " + ("; ".join(report.lines()) or "nothing runs on OpenVINO"))
        # convert_ahead converts the networks whose files are present (every one here): the auto
        # request below should find everything converted, as after `download`, and says so.
        t = time.perf_counter()
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.weights.lookup import REGISTRY
    from gpen_core.hwcheck.workloads import STANDARD, face_boxes, template_detection

    photo = next(w for w in STANDARD if w.name == "photo")
    boxes = [template_detection(b) for b in face_boxes(photo)]
    ckpt = models / REGISTRY[MODES[mode].model].filename
    opts = RestoreOptions(mode=mode, model=str(ckpt) if ckpt.exists() else None, backend=backend)
    res = Restorer(models_dir=models, synthetic_weights=True)(jpeg, opts, detections=boxes)
    converted = [n for n in res.notes if "converted" in n]
    print(f"{mode}: first {'OpenVINO' if backend == 'openvino' else 'auto'} request {time.perf_counter() - t:.1f} s; "
          + ("; ".join(converted) or "everything was cached"))


# ------------------------------------------ --task-peaks: the task networks' memory per mode
# Each (task, mode, workload) runs in its own process (a clean peak), through the real
# engine (``Restorer.__call__``). The generator is a checkpoint file on disk with random
# weights of the released architecture (GPEN-Colorization-1024 / GPEN-Inpainting-1024:
# 1024 px, channel multiplier 2, narrow 1): time and memory do not depend on the values.
# Workloads: one aligned 1024×1024 face; the standard group photo (3000×2000, 4 faces,
# boxes given, so no detector weights are needed; inpainting gets a white stroke across
# every face). "Above idle" is the peak minus the RSS just before the request, after a
# warm-up request that loaded the models (what a server pays per request); "cold" is the
# first request of the process, loading included (what a one-shot CLI run pays).
# The generator runs on PyTorch (the figures behind ``auto``'s built-in estimates); what ``auto``
# runs on this machine, OpenVINO included, is the hardware check's task rows
# (``python -m gpen_core profile``). Prints a Markdown table; ``--json PATH`` also writes the rows.

TASK_WORKLOADS = ("aligned", "group")


def task_peaks_worker(task: str, mode: str, workload: str, models: Path, out: Path) -> None:
    import numpy as np

    from gpen_core.engine.pipeline import import_engine
    from gpen_core.hwcheck.workloads import STANDARD, build, face_boxes, template_detection
    from gpen_core.modes import TASKS
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.weights.lookup import REGISTRY

    import_engine()
    ckpt = models / REGISTRY[TASKS[task].model].filename
    r = Restorer(models_dir=models, device="cpu")
    if workload == "aligned":
        rng = np.random.default_rng(0)
        image = rng.integers(0, 256, (1024, 1024, 3), dtype=np.uint8)
        image[300:330, 200:800] = 255  # a stroke for inpainting
        boxes = None
        opts = RestoreOptions(mode=mode, model=str(ckpt), aligned=True, task=task, backend="torch")
    else:
        group = next(w for w in STANDARD if w.name == "group")
        built = build(group)
        image = built.image.copy()
        boxes = [template_detection(b) for b in face_boxes(group)]
        for x0, y0, x1, y1 in face_boxes(group):
            cy = (y0 + y1) // 2
            image[cy - 4 : cy + 4, x0 + 20 : x1 - 20] = 255
        opts = RestoreOptions(mode=mode, model=str(ckpt), task=task, backend="torch")
    cpu0 = time.process_time()
    cold = r(image, opts, detections=boxes)
    cold_cpu = time.process_time() - cpu0
    cpu0 = time.process_time()
    warm = r(image, opts, detections=boxes)
    warm_cpu = time.process_time() - cpu0
    out.write_text(json.dumps({
        "task": task, "mode": mode, "workload": workload, "dtype": warm.dtype, "backend": warm.backend,
        "faces": len(warm.faces),
        "cold_peak": cold.peaks.rss_bytes - cold.peaks.baseline_rss_bytes, "cold_s": cold.timings.total_s, "cold_cpu_s": cold_cpu,
        "warm_peak": warm.peaks.rss_bytes - warm.peaks.baseline_rss_bytes, "warm_s": warm.timings.total_s, "warm_cpu_s": warm_cpu,
        "restore_s": warm.timings.restore_s, "notes": list(warm.notes),
    }))


def task_peaks_main(argv: list[str]) -> int:
    """``--task-peaks``: peak RAM and seconds per face of GPEN's task networks (colorize, inpaint) in each memory mode."""
    ap = argparse.ArgumentParser(description="bench_request.py --task-peaks: peak RAM and seconds per face of GPEN's task networks in each memory mode")
    ap.add_argument("--tasks", nargs="+", default=["colorize", "inpaint"], choices=("colorize", "inpaint"))
    ap.add_argument("--modes", nargs="+", default=["faces-only", "balanced", "quality"])
    ap.add_argument("--workloads", nargs="+", default=list(TASK_WORKLOADS), choices=TASK_WORKLOADS)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=5, metavar=("TASK", "MODE", "WORKLOAD", "MODELS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        t, m, w, models, out = args.worker
        task_peaks_worker(t, m, w, Path(models), Path(out))
        return 0
    import torch

    from gpen_core.modes import TASKS
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        for task in args.tasks:
            spec = REGISTRY[TASKS[task].model]
            torch.save(random_state_dict(spec.arch, seed=0), models / spec.filename)
        for task in args.tasks:
            for mode in args.modes:
                for w in args.workloads:
                    out = models / f"{task}-{mode}-{w}.json"
                    p = subprocess.run([sys.executable, __file__, "--task-peaks", "--worker", task, mode, w, str(models), str(out)],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        print(p.stderr[-2000:], file=sys.stderr)
                        continue
                    rows.append(json.loads(out.read_text()))
                    r = rows[-1]
                    print(f"{task} {mode} {w}: {r['dtype']} warm {r['warm_peak'] / 1e6:.0f} MB, cold {r['cold_peak'] / 1e6:.0f} MB, "
                          f"{r['warm_cpu_s']:.1f} CPU s", file=sys.stderr, flush=True)
    print("| task | mode | workload | dtype | peak above idle (warm) | cold request peak | CPU s per request (warm) | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['mode']} | {r['workload']} ({r['faces']} face{'s' if r['faces'] != 1 else ''}) | {r['dtype']} | "
              f"{r['warm_peak'] / 1e6:.0f} MB | {r['cold_peak'] / 1e6:.0f} MB | {r['warm_cpu_s']:.1f} | {r['warm_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


# ------------------------------------------------------------ the app's collections (--collections)
# The app's own process as its server has it (app imported, then app_state.ready_engine at its start, or
# only the engine imported, as before that freeze), restoring examples/astronaut_low_resolution.jpg in
# low and balanced alternated; every full collection (generation 2) is counted and timed.


def collections_child(frozen: bool, models: Path, pairs: int) -> None:
    import gc

    import app
    from gpen_core.engine.pipeline import import_engine
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    app.ready_engine(local=True) if frozen else import_engine()
    stand_ins(models)
    seen = {"n": 0, "s": 0.0, "t0": 0.0}

    def timed(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                seen["t0"] = time.perf_counter()
            else:
                seen["n"] += 1
                seen["s"] += time.perf_counter() - seen["t0"]

    gc.callbacks.append(timed)
    restorer, photo = Restorer(models_dir=models), str(ROOT / "examples" / "astronaut_low_resolution.jpg")
    for mode in ("low", "balanced") * pairs:
        seen.update(n=0, s=0.0)
        t0 = time.perf_counter()
        restorer(photo, RestoreOptions(mode=mode))
        print(json.dumps({"frozen": frozen, "mode": mode, "wall": time.perf_counter() - t0, "collections": seen["n"],
                          "collecting": seen["s"], "tracked": len(gc.get_objects())}), flush=True)


def collections_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="the app's requests with and without the freeze at its start")
    p.add_argument("--pairs", type=int, default=3, help="low then balanced, this many times, in each process")
    p.add_argument("--collections-child", nargs=2, metavar=("FROZEN", "MODELS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.collections_child:
        collections_child(args.collections_child[0] == "1", Path(args.collections_child[1]), args.pairs)
        return 0
    from bench_video import cpu_flags

    from gpen_core.platform.cpuinfo import cpu_model

    print(f"CPU: {cpu_model()} ({cpu_flags()}), {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}\n")
    print("| the app's start | mode | wall s | full collections | s collecting | objects they walk |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        _, models = _make_inputs(Path(tmp))
        for frozen in (False, True):
            out = subprocess.run([sys.executable, __file__, "--collections", "--pairs", str(args.pairs),
                                  "--collections-child", "1" if frozen else "0", str(models)],
                                 capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                sys.exit(out.stderr[-3000:])
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    print(f"| {'frozen' if r['frozen'] else 'as before'} | {r['mode']} | {r['wall']:.2f} | {r['collections']} | "
                          f"{r['collecting']:.2f} | {r['tracked']:,} |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if "--task-peaks" in given:
        return task_peaks_main([a for a in given if a != "--task-peaks"])
    if "--collections" in given:
        return collections_main([a for a in given if a != "--collections"])
    from gpen_core.modes import MODES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--backend", choices=("auto", "torch", "openvino"), help="generator backend (default: the engine's, auto)")
    p.add_argument("--keep-previous", action="store_true", help="hold each result during the next request (the old, inflated measurement)")
    p.add_argument("--malloc-mmap-threshold", type=int, metavar="BYTES",
                   help="run the workers with MALLOC_MMAP_THRESHOLD_=BYTES (glibc: big buffers straight from mmap, returned at free)")
    p.add_argument("--stages", action="store_true",
                   help="also print the process peak per stage (decode, detect, restore, mask, warp, compose, encode); "
                   "the whole-request peak column is then the largest stage's")
    p.add_argument("--one-shot", action="store_true",
                   help="one request per fresh process, as the CLI runs one photo (each network dropped after its "
                   "stage); the peak is the whole process's, loads included; implies --stages")
    p.add_argument("--keep-models", action="store_true",
                   help="with --one-shot: keep every network loaded through the request, as a server does (to compare)")
    p.add_argument("--worker", nargs=4, metavar=("MODE", "RUNS", "MODELS", "JPEG_OUT"), help=argparse.SUPPRESS)
    p.add_argument("--convert", nargs=3, metavar=("MODE", "MODELS", "JPEG"), help=argparse.SUPPRESS)
    p.add_argument("--fresh", action="store_true",
                   help="a fresh install: --backend auto with no speed record, the per-CPU-kind defaults on, and the "
                   "conversions `download` does ahead (the out-of-box figures)")
    args = p.parse_args(argv)
    if args.fresh:
        if args.backend not in (None, "auto"):
            p.error("--fresh measures what auto picks: leave --backend out")
        args.backend = "auto"
    if args.convert:  # OpenVINO's first-use conversions, in their own process (users pay them once, not per process)
        mode, models, jpeg = args.convert
        convert_all(mode, Path(models), Path(jpeg), args.backend or "openvino")
        return 0
    if args.worker:
        mode, runs, models, pair = args.worker
        jpeg, out = pair.split("::")
        if args.one_shot:
            one_shot_worker(mode, Path(models), Path(jpeg), Path(out), args.backend, args.keep_models)
        else:
            worker(mode, int(runs), Path(models), Path(jpeg), Path(out), args.backend, args.keep_previous, args.stages)
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="gpen-bench-") as t:
        tmp = Path(t)
        jpeg, models = _make_inputs(tmp)
        for mode in args.modes:
            out = tmp / f"{mode}.json"
            cmd = [sys.executable, __file__, "--worker", mode, str(args.runs), str(models), f"{jpeg}::{out}"]
            if args.backend:
                cmd += ["--backend", args.backend]
            if args.keep_previous:
                cmd += ["--keep-previous"]
            if args.stages:
                cmd += ["--stages"]
            if args.one_shot:
                cmd += ["--one-shot"] + ["--keep-models"] * args.keep_models
            env = dict(os.environ)
            if args.fresh:  # the defaults a fresh install gets, whatever this shell set
                env.pop("GPEN_OPENVINO_DEFAULTS", None)
            if args.backend == "openvino" or args.fresh:
                conv = subprocess.run([sys.executable, __file__, "--convert", mode, str(models), str(jpeg), "--backend", args.backend],
                                      capture_output=True, text=True, env=env)
                print((conv.stdout + conv.stderr[-1500:] * (conv.returncode != 0)).strip(), file=sys.stderr)
            if args.malloc_mmap_threshold:
                env["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
            # --one-shot: --runs fresh processes (the first after a conversion also compiles for
            # this CPU, once per models folder); the row is the last, every run's peak beside it.
            shots = []
            for _ in range(args.runs if args.one_shot else 1):
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    print(f"{mode}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    break
                shots.append(json.loads(out.read_text()))
            else:
                results.append({**shots[-1], "peaks": [r["peak"] for r in shots]} if args.one_shot else shots[-1])

    if args.one_shot:
        print(format_one_shot(results) + "\n\n" + format_stages(results))
        print(f"\n`{' '.join(['.venv/bin/python', 'benchmarks/bench_request.py', *(argv or sys.argv[1:])])}`, one request per fresh process, {args.runs} processes per mode (the row: the last)")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    print(format_table(results))
    if args.stages:
        print("\n" + format_stages(results))
    print(f"\n`{' '.join(['.venv/bin/python', 'benchmarks/bench_request.py', *(argv or sys.argv[1:])])}`, {args.runs} runs per mode after a warm-up, RAM method {results[0]['rows'][0]['method'] if results else '?'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
