"""The child side of :mod:`gpen_core.hwcheck.advice`: :func:`measure` runs one side of one tip in a fresh process,
on a spec such as ``{"kind": "restore", "mode": "balanced", "workload": "photo", "repeats": 2, "scratch": FOLDER}``.
``scratch``, shared by the whole tips run, is every restore's models folder: checkpoints are written and converted
once for all the tips. The input is built before anything is measured.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpen_core.hwcheck import workloads as wl
from gpen_core.hwcheck.advice_table import Side
from gpen_core.platform.meter import PeakMeter, peak_rss


def _run(request_peaks: list[int], times: list[float], vram_reserved: int | None = None) -> Side:
    """This process's measurement of one side: its VmHWM, the worst request's peak above idle, the median time."""
    return Side("", peak_rss(), max(request_peaks), statistics.median(times), vram_reserved)


def workload_of(name: str) -> wl.Workload:
    if name == "tiny":  # tests: a small photo with one face, seconds not minutes
        return wl.Workload("tiny", "640×480 photo, one face", 640, 480, 1, face_px=200)
    return next(w for w in wl.STANDARD if w.name == name)


def measure(spec: dict[str, Any]) -> Side | None:
    """One side of a tip, as ``spec`` says; None for a warm-up (``"warm_up": True``: load, convert, measure nothing)."""
    if spec["kind"] in ("encode", "cache"):
        return _timed(_operation(spec), int(spec["repeats"]))
    return measure_forward(spec) if spec["kind"] == "forward" else _measure_restore(spec)


def _operation(spec: dict[str, Any]) -> Callable[[], object]:
    """Encoding the workload's photo; finding the weights (ours) or walking the cache (what the article warns of)."""
    from gpen_core.images.decode import encode_image
    from gpen_core.weights import lookup as weights

    if spec["kind"] == "encode":
        img = wl.build(workload_of(spec["workload"])).image
        return lambda: encode_image(img, spec["format"], quality=95)
    if spec["op"] == "walk":
        return lambda: sum(len(files) for _, _, files in os.walk(spec["root"]))
    return lambda: weights.locate("GPEN-BFR-512", models_dir=spec["models_dir"])


def _timed(operation: Callable[[], object], repeats: int) -> Side:
    """``operation`` run ``repeats`` times on the CPU, each under its own meter."""
    times, peaks = [], []
    for _ in range(repeats):
        with PeakMeter() as m:
            t = time.perf_counter()
            operation()
            times.append(time.perf_counter() - t)
        assert m.peaks is not None
        peaks.append(m.peaks.rss_delta_bytes)
    return _run(peaks, times)


def _input(spec: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The tip's photo (pre-shrunk, as JPEG bytes when the spec says) and its faces' boxes."""
    import numpy as np

    from gpen_core.images.decode import encode_image

    built = wl.build(workload_of(spec["workload"]))
    image: Any = built.image
    dets = list(built.detections)
    if spec.get("preshrink"):
        import cv2

        s = int(spec["preshrink"]) / max(image.shape[:2])
        image = cv2.resize(image, (round(image.shape[1] * s), round(image.shape[0] * s)), interpolation=cv2.INTER_AREA)
        dets = [replace(d, box=tuple(v * s for v in d.box), landmarks=d.landmarks * s) for d in dets]
    if spec.get("as_jpeg"):
        image = encode_image(np.ascontiguousarray(image), "jpeg", quality=92)
    return image, dets


def _measure_restore(spec: dict[str, Any]) -> Side | None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    image, dets = _input(spec)
    model = spec.get("model")
    if model and not os.path.exists(model):
        model = wl.synthetic_checkpoint(model, spec["scratch"])
    restorer = Restorer(models_dir=spec["scratch"], device="cpu", synthetic_weights=True)
    opts = RestoreOptions(mode=spec["mode"], model=model)
    keep: list[Any] = []
    times, peaks, vram = [], [], []
    for i in range(int(spec["repeats"]) + 1):  # the first request loads the models: not timed
        res = restorer(image, opts, detections=dets)
        if spec.get("warm_up"):
            return None
        if spec.get("display_copy"):
            # What a GUI window holds on to: the last result stays alive while the next runs.
            keep[:] = [res.image.copy()]
        if i:
            times.append(res.timings.total_s)
            peaks.append(res.peaks.rss_delta_bytes)
            vram.append(res.peaks.vram_reserved_bytes)
        del res
    v = [x for x in vram if x is not None]
    return _run(peaks, times, max(v) if v else None)


def measure_forward(spec: dict[str, Any]) -> Side:
    """The generator's forward alone (``arch.GPEN`` equals yangxy/GPEN's FullGenerator): ``half`` for tip 5,
    ``compile`` (reduce-overhead) for tip 4; peak VRAM reserved on CUDA, median seconds per face."""
    import torch

    from gpen_core.networks.arch import GPENConfig
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.weights.lookup import REGISTRY

    device = spec.get("device") or "cpu"
    size = int(spec.get("size", 512))
    cfg = REGISTRY[f"GPEN-BFR-{size}"].arch if size >= 256 else GPENConfig(  # tests: a tiny one of the same class
        size=size, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
    dtype = torch.float16 if spec.get("half") else torch.float32
    model = random_generator(cfg).to(device, dtype)
    fwd = torch.compile(model, mode="reduce-overhead") if spec.get("compile") else model
    x = torch.rand(1, 3, size, size, device=device, dtype=dtype) * 2 - 1
    cuda = device.startswith("cuda")
    # The request's own GPU: a bare synchronize() waits for the current device only, so on
    # "cuda:1" it would return before the work is done and the times would read about 0.
    dev = torch.device(device)
    times = []
    with torch.inference_mode():
        for i in range(int(spec["repeats"]) + 2):  # two warm-ups (compile, CUDA graph capture)
            if cuda:
                torch.cuda.synchronize(dev)
            t = time.perf_counter()
            fwd(x)
            if cuda:
                torch.cuda.synchronize(dev)
            if i >= 2:
                times.append(time.perf_counter() - t)
    vram = int(torch.cuda.max_memory_reserved(dev)) if cuda else None
    return _run([0], times, vram)

