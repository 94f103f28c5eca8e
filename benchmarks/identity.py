"""The identity check's cost per face and the figures of docs/identity.md, measured on this machine.

    .venv/bin/python benchmarks/identity.py            # cost, then every distance table
    .venv/bin/python benchmarks/identity.py --cost     # cost only (a fresh process: load and per-face figures)
    .venv/bin/python benchmarks/identity.py --video    # along a clip: the jump margin, and the check's cost a frame

Along a clip (``--video``): the jump margin of gpen_core.video.identity (how far a restored face's
frame-to-frame jump goes beyond the input's own when the restoration keeps the person), measured with a
stand-in that re-renders each frame differently (blur σ 0-2, JPEG q 30-95, unsharp 0-1, drawn per frame
at random: no real GPEN weights here) on the three FFHQ faces panned 1 px a frame through H.264 clips;
beside it, the jump when the stand-in swaps in another FFHQ person. Then the check's cost a frame: a
256 px clip with one face through the real frame session in balanced (synthetic GPEN-BFR-512 and parser
weights: time does not depend on the values), the check off and on, seconds a frame (wall and CPU).

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
import os
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
from gpen_core.faces.photo import FaceJob, restore_photo  # noqa: E402

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
    out = restore_photo(solvay, detections=dets, restore_fn=lambda c: c.copy(), size=256, job=FaceJob(identity=IdentityPolicy()))
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


def write_clip(path: Path, frames: list[np.ndarray], crf: int = 23) -> Path:
    """H.264 MP4 of RGB frames at 25 fps."""
    import av

    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=25, options={"crf": str(crf), "preset": "ultrafast"})
        vs.width, vs.height, vs.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for f in frames:
            for p in vs.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return path


def panned(face: np.ndarray, n: int, side: int = 256) -> list[np.ndarray]:
    small = cv2.resize(face, (side, side), interpolation=cv2.INTER_AREA)
    return [cv2.warpAffine(small, np.float32([[1, 0, k - n / 2], [0, 1, 0]]), (side, side), borderMode=cv2.BORDER_REFLECT)
            for k in range(n)]


class StandIn:
    """The real detector, the photo path's restore and identity check; the "generator" is ``fn(rng, crop)``."""

    device = "cpu"

    def __init__(self, detector: FaceDetector, fn, seed: int) -> None:
        self.detector, self.fn, self.rng = detector, fn, np.random.default_rng(seed)

    def detect(self, image: np.ndarray) -> list:
        return self.detector.detect(image)

    def identity_tracker(self, segment=None):
        from gpen_core.video.identity import IdentityTracker

        return IdentityTracker(1, None, segment)

    def restore(self, image: np.ndarray, detections: list, check_identity: bool = True):
        from gpen_core.video.engine_seam import FrameOut

        out = restore_photo(image, detections=detections, restore_fn=lambda c: self.fn(self.rng, c), size=512,
                            job=FaceJob(identity=IdentityPolicy()))
        return FrameOut(out.image, (), tuple(f.identity for f in out.faces))


def rerender(rng: np.random.Generator, c: np.ndarray) -> np.ndarray:
    """The same person drawn again: blur, JPEG and sharpening of random strength."""
    out = cv2.GaussianBlur(c, (0, 0), float(rng.uniform(0.01, 2.0)))
    q = int(rng.integers(30, 96))
    out = cv2.imdecode(cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, q])[1], cv2.IMREAD_UNCHANGED)
    amount = float(rng.uniform(0.0, 1.0))
    return cv2.addWeighted(out, 1 + amount, cv2.GaussianBlur(out, (0, 0), 2.0), -amount, 0)


def clip_checks(detector: FaceDetector, frames: list[np.ndarray], fn, seed: int) -> list:
    from gpen_core.video.stream import restore_video

    records: list = []
    with tempfile.TemporaryDirectory() as tmp:
        src = write_clip(Path(tmp) / "in.mp4", frames)
        restore_video(src, Path(tmp) / "out.mp4", engine=StandIn(detector, fn, seed), on_frame=records.append)
    return [f.identity for r in records for f in r.faces if f.identity is not None and f.identity.jump is not None]


def video(detector: FaceDetector, n: int = 12) -> None:
    faces = [rgb(f"ffhq_0000{i}_512.png") for i in range(3)]
    over, inputs = [], []
    for i, face in enumerate(faces):
        for seed in (1, 2):
            checks = clip_checks(detector, panned(face, n), rerender, seed)
            over += [c.jump - c.input_jump for c in checks]
            inputs += [c.input_jump for c in checks]
    print(f"CPU: {cpu_name()}")
    print(f"same person re-rendered per frame (3 FFHQ faces × 2 seeds, {len(over)} frame pairs): input's own jump "
          f"median {statistics.median(inputs):.3f}, max {max(inputs):.3f}; restored jump beyond the input's: "
          f"median {statistics.median(over):.3f}, max {max(over):.3f}")
    others = [cv2.resize(crop(detector, panned(f, 1, 512)[0], 512), (512, 512)) for f in faces]
    swap = []
    for i, face in enumerate(faces):
        other = others[(i + 1) % 3]
        checks = clip_checks(detector, panned(face, 6), lambda r, c, o=other: o.copy() if r.integers(2) else c.copy(), 3)
        swap += [c.jump - c.input_jump for c in checks if c.jump > 0.3]
    print(f"another FFHQ person swapped in on random frames ({len(swap)} jumps): restored jump beyond the input's "
          f"min {min(swap):.3f}, max {max(swap):.3f}")


def video_cost(n: int = 8) -> None:
    """Seconds a frame of a 256 px one-face clip in balanced (synthetic weights), the check off and on."""
    from gpen_core.engine.pipeline import import_engine
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.video.stream import restore_video

    import_engine()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / "detection_mobilenet0.25_Final.pth").symlink_to(SHARED / "weights" / "detection_mobilenet0.25_Final.pth")
        src = write_clip(Path(tmp) / "in.mp4", panned(rgb("ffhq_00000_512.png"), n))
        restorer = Restorer(models_dir=models, synthetic_weights=True, device="cpu")
        restore_video(src, Path(tmp) / "warm.mp4", restorer, RestoreOptions(mode="balanced", identity="on"))  # loads
        for identity in ("off", "on", "off", "on"):
            t, c = time.perf_counter(), time.process_time()
            r = restore_video(src, Path(tmp) / f"{identity}.mp4", restorer, RestoreOptions(mode="balanced", identity=identity))
            wall, cpu = (time.perf_counter() - t) / r.frames, (time.process_time() - c) / r.frames
            check = r.identity.seconds / r.frames if r.identity is not None else 0.0
            print(f"| balanced, identity {identity} | {wall:.2f} s wall a frame | {cpu:.2f} s CPU a frame | "
                  f"check {check * 1000:.0f} ms a frame (1 face) | {os.getloadavg()[0]:.1f} load |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cost", action="store_true", help="the cost only")
    ap.add_argument("--video", action="store_true", help="along a clip: the jump margin and the cost a frame")
    args = ap.parse_args()
    cv2.setNumThreads(1)
    detector = FaceDetector(SHARED / "weights" / "detection_mobilenet0.25_Final.pth", "mobilenet0.25", "cpu")
    if args.video:
        video(detector)
        video_cost()
        return
    cost(detector)
    if not args.cost:
        figures(detector)


if __name__ == "__main__":
    main()
