"""The identity check's cost per face and the figures of docs/identity.md, measured on this machine.

    .venv/bin/python benchmarks/identity.py            # cost, then every distance table
    .venv/bin/python benchmarks/identity.py --cost     # cost only (a fresh process: load and per-face figures)

Cost: the models' first load (seconds, resident memory it adds) and the check of one face (two chips,
two descriptors; wall and CPU seconds, medians of 10) on 512 px and 256 px GPEN crops. On a shared
machine the CPU figure is the one to read: wall time grows with the load. Figures: dlib's
descriptor distance for an unchanged face (the identity stand-in through the photo path, Solvay), one
FFHQ photo against itself shifted, blurred and JPEG'd (each detected and aligned on its own), different
people (the three FFHQ faces; the 8 largest Solvay faces pairwise), random-weight generators, and how far
a degraded input's own descriptor drifts from the clean one's (blur, downscaling). Needs requirements-identity.txt
and ../shared (photos, mobilenet0.25 weights).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpen_core.faces.align import align_transform  # noqa: E402
from gpen_core.faces.detect import FaceDetector  # noqa: E402
from gpen_core.faces.identity import IdentityPolicy, distance  # noqa: E402
from gpen_core.faces.photo import restore_photo  # noqa: E402

SHARED = ROOT.parent / "shared"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")


def rgb(name: str) -> np.ndarray:
    return np.ascontiguousarray(cv2.imread(str(SHARED / "faces" / name))[:, :, ::-1])


def crop(detector: FaceDetector, image: np.ndarray, size: int = 512, which: int = 0) -> np.ndarray:
    dets = sorted(detector.detect(image), key=lambda d: -(d.box[2] - d.box[0]))
    fwd, _ = align_transform(dets[which].landmarks, size)
    return cv2.warpAffine(image, fwd, (size, size), flags=cv2.INTER_LINEAR)


def cost(detector: FaceDetector) -> None:
    from gpen_core.faces import identity_model

    face = crop(detector, rgb("ffhq_00000_512.png"))
    before = rss_mb()
    t = time.perf_counter()
    identity_model.model()
    load_s = time.perf_counter() - t
    loaded = rss_mb()
    print(f"CPU: {cpu_name()}")
    print(f"| models' first load (check by sha256 + load) | {load_s:.2f} s | +{loaded - before:.0f} MB resident |")
    for size in (512, 256):
        c = cv2.resize(face, (size, size), interpolation=cv2.INTER_AREA)
        other = cv2.GaussianBlur(c, (0, 0), 1.5)
        distance(c, other)  # warm
        runs, cpu = [], []
        for _ in range(10):
            t, c0 = time.perf_counter(), time.process_time()
            distance(c, other)
            runs.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| one face, {size} px crop | {statistics.median(runs) * 1000:.0f} ms wall, "
              f"{statistics.median(cpu) * 1000:.0f} ms CPU (medians of 10) | "
              f"peak {peak - before:.0f} MB over the process before the load |")


def figures(detector: FaceDetector) -> None:
    ffhq = [rgb(f"ffhq_0000{i}_512.png") for i in range(3)]
    crops = [crop(detector, p) for p in ffhq]
    solvay = rgb("Solvay_conference_1927.png")
    dets = sorted(detector.detect(solvay), key=lambda d: -(d.box[2] - d.box[0]))
    out = restore_photo(solvay, detections=dets, restore_fn=lambda c: c.copy(), size=256, identity=IdentityPolicy())
    unchanged = [f.identity.distance for f in out.faces]
    print(f"\nunchanged face (identity stand-in, {len(unchanged)} Solvay faces, GPEN's small-face smoothing "
          f"included): max {max(unchanged):.3f}")
    print("\n| FFHQ photo | shifted (40, 25 px) | blurred (σ 3) | JPEG q30 |\n|---|---:|---:|---:|")
    for i, (photo, c) in enumerate(zip(ffhq, crops)):
        shifted = cv2.warpAffine(photo, np.float32([[1, 0, 40], [0, 1, 25]]), (512, 512), borderMode=cv2.BORDER_REFLECT)
        blurred = cv2.GaussianBlur(photo, (0, 0), 3)
        jpeg = cv2.imdecode(cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, 30])[1], cv2.IMREAD_UNCHANGED)
        row = [distance(c, crop(detector, x)) for x in (shifted, blurred, jpeg)]
        print(f"| ffhq_0000{i} | " + " | ".join(f"{d:.2f}" for d in row) + " |")
    pairs = [distance(crops[i], crops[j]) for i, j in combinations(range(3), 2)]
    print(f"\ndifferent people, FFHQ 0-1, 0-2, 1-2: {', '.join(f'{d:.2f}' for d in pairs)}")
    big = [crop(detector, solvay, 256, k) for k in range(8)]
    sol = [distance(a, b) for a, b in combinations(big, 2)]
    print(f"different people, 8 largest Solvay faces, 28 pairs: min {min(sol):.2f}, median {statistics.median(sol):.2f}, "
          f"under 0.6: {sum(d <= 0.6 for d in sol)}")
    degraded(crops)
    random_generators()


def degraded(crops: list[np.ndarray]) -> None:
    print("\n| degradation of the input | " + " | ".join(f"ffhq_0000{i}" for i in range(3)) + " |\n|---|---:|---:|---:|")
    for sigma in (2, 4, 6, 8, 12, 16):
        row = [distance(c, cv2.GaussianBlur(c, (0, 0), sigma)) for c in crops]
        print(f"| Gaussian blur σ {sigma} px (at 512) | " + " | ".join(f"{d:.2f}" for d in row) + " |")
    for side in (64, 32, 24, 16):
        row = [distance(c, cv2.resize(cv2.resize(c, (side, side), interpolation=cv2.INTER_AREA), (512, 512),
                                      interpolation=cv2.INTER_LINEAR)) for c in crops]
        print(f"| shrunk to {side} px and back | " + " | ".join(f"{d:.2f}" for d in row) + " |")


def random_generators() -> None:
    import torch

    from gpen_core.networks.arch import GPENConfig
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    restorer = Restorer()
    faces = [cv2.resize(rgb(f"ffhq_0000{i}_512.png"), (256, 256), interpolation=cv2.INTER_AREA) for i in range(3)]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (1, 2):
            path = Path(tmp) / f"random-GPEN-BFR-256-seed{seed}.pth"
            torch.save(random_state_dict(GPENConfig(256, channel_multiplier=1, narrow=0.5), seed), path)
            got = [restorer(f, RestoreOptions(mode="quality", model=str(path), aligned=True, identity="on")).faces[0].identity
                   for f in faces]
            print(f"random-weight GPEN-BFR-256 (seed {seed}) on the 3 FFHQ faces: "
                  + ", ".join(f"{c.distance:.2f}" for c in got))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cost", action="store_true", help="the cost only")
    args = ap.parse_args()
    cv2.setNumThreads(1)
    detector = FaceDetector(SHARED / "weights" / "detection_mobilenet0.25_Final.pth", "mobilenet0.25", "cpu")
    cost(detector)
    if not args.cost:
        figures(detector)


if __name__ == "__main__":
    main()
