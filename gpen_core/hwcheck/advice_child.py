"""The child side of :mod:`gpen_core.hwcheck.advice`: one measured side of one tip, in a fresh process.

    python -m gpen_core.hwcheck.advice_child '{"kind": "restore", "mode": "balanced", "workload": "photo", "repeats": 2}'

prints one JSON line: ``{"process_peak", "request_peaks", "seconds", "vram_reserved"}``
(bytes and seconds). The input is built before anything is measured.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def workload_of(name: str):
    from gpen_core.hwcheck import workloads as wl

    if name == "tiny":  # tests: a small photo with one face, seconds not minutes
        return wl.Workload("tiny", "640×480 photo, one face", 640, 480, 1, face_px=200)
    return next(w for w in wl.STANDARD if w.name == name)


def _vmhwm() -> int:
    from gpen_core.platform.meter import peak_rss

    return peak_rss()


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "cache":
        return _child_cache(spec)
    if kind == "forward":
        return _child_forward(spec)
    import numpy as np

    from gpen_core.hwcheck import workloads as wl
    from gpen_core.images.decode import encode_image

    w = workload_of(spec["workload"])
    built = wl.build(w)
    device = spec.get("device") or "cpu"
    if kind == "encode":
        from gpen_core.platform.meter import PeakMeter

        img = built.image
        times, peaks = [], []
        for _ in range(int(spec["repeats"])):
            with PeakMeter(cuda=False) as m:
                t = time.perf_counter()
                data = encode_image(img, spec["format"], quality=95)
                times.append(time.perf_counter() - t)
            del data
            assert m.peaks is not None
            peaks.append(m.peaks.rss_delta_bytes)
        return {"process_peak": _vmhwm(), "request_peaks": peaks, "seconds": statistics.median(times), "vram_reserved": None}

    import torch

    from gpen_core.restorer import Restorer
    from gpen_core.options import RestoreOptions

    image: Any = built.image
    dets = list(built.detections)
    if spec.get("preshrink"):
        import cv2
        from dataclasses import replace

        side = int(spec["preshrink"])
        s = side / max(image.shape[:2])
        image = cv2.resize(image, (round(image.shape[1] * s), round(image.shape[0] * s)), interpolation=cv2.INTER_AREA)
        dets = [replace(d, box=tuple(v * s for v in d.box), landmarks=d.landmarks * s) for d in dets]
    if spec.get("as_jpeg"):
        image = encode_image(np.ascontiguousarray(image), "jpeg", quality=92)
    model = spec.get("model")
    tmp = tempfile.mkdtemp(prefix="gpen-advice-")
    if model and not os.path.exists(model):
        # A registry size ("GPEN-BFR-256") with random weights written to a real file: loading
        # from disk is part of what the tip changes.
        from gpen_core.networks.arch import GPENConfig
        from gpen_core.networks.synthetic import random_state_dict

        cfg = {"GPEN-BFR-256": GPENConfig(size=256, channel_multiplier=1, narrow=0.5),
               "GPEN-BFR-512": GPENConfig(size=512, channel_multiplier=2, narrow=1.0)}[model]
        path = os.path.join(tmp, f"{model}.pth")
        torch.save(random_state_dict(cfg), path)
        model = path
    restorer = Restorer(models_dir=spec.get("models_dir") or tmp, device=device, synthetic_weights=True)
    opts = RestoreOptions(mode=spec["mode"], model=model, output_format=spec.get("output_format"))
    keep: list[Any] = []
    times, peaks, vram = [], [], []
    for i in range(int(spec["repeats"]) + 1):  # the first request loads the models: not timed
        res = restorer(image, opts, detections=dets)
        if spec.get("display_copy"):
            # What a GUI window holds on to: the last result stays alive while the next runs.
            keep[:] = [res.image.copy()]
        if i:
            times.append(res.timings.total_s)
            peaks.append(res.peaks.rss_delta_bytes)
            vram.append(res.peaks.vram_reserved_bytes)
        del res
    v = [x for x in vram if x is not None]
    return {"process_peak": _vmhwm(), "request_peaks": peaks, "seconds": statistics.median(times),
            "vram_reserved": max(v) if v else None}


def _child_forward(spec: dict[str, Any]) -> dict[str, Any]:
    """The official computation (our ``arch.GPEN`` equals yangxy/GPEN's FullGenerator) as the tips use it.

    ``half``: ``model.half()`` (tip 5); ``compile``: ``torch.compile(mode="reduce-overhead")``
    (tip 4). Reports peak VRAM reserved on CUDA and the median seconds per face.
    """
    import torch

    from gpen_core.networks.arch import GPENConfig
    from gpen_core.networks.synthetic import random_generator

    device = spec.get("device") or "cpu"
    size = int(spec.get("size", 512))
    cfg = GPENConfig(size=size, channel_multiplier=2 if size >= 512 else 1, narrow=1.0 if size >= 512 else 0.5)
    if size < 256:  # tests: a tiny generator of the same class
        cfg = GPENConfig(size=size, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
    model = random_generator(cfg).to(device)
    dtype = torch.float16 if spec.get("half") else torch.float32
    model = model.to(dtype)
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
            y = fwd(x)
            if cuda:
                torch.cuda.synchronize(dev)
            if i >= 2:
                times.append(time.perf_counter() - t)
            ok = bool(torch.isfinite(y.float()).all())
            del y
    vram = int(torch.cuda.max_memory_reserved(dev)) if cuda else None
    return {"process_peak": _vmhwm(), "request_peaks": [0], "seconds": statistics.median(times),
            "vram_reserved": vram, "finite": ok}


def _child_cache(spec: dict[str, Any]) -> dict[str, Any]:
    """Finding the weights (ours) or walking the whole cache (what the article warns of)."""
    from gpen_core.platform.meter import PeakMeter

    times, peaks = [], []
    for _ in range(int(spec["repeats"])):
        with PeakMeter(cuda=False) as m:
            t = time.perf_counter()
            if spec["op"] == "walk":
                n = sum(len(files) for _, _, files in os.walk(spec["root"]))
                assert n >= 0
            else:
                from gpen_core.weights import lookup as weights

                weights.locate("GPEN-BFR-512", models_dir=spec["models_dir"])
            times.append(time.perf_counter() - t)
        assert m.peaks is not None
        peaks.append(m.peaks.rss_delta_bytes)
    return {"process_peak": _vmhwm(), "request_peaks": peaks, "seconds": statistics.median(times), "vram_reserved": None}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
