"""A 60 s clip three ways: one process in one pass, one process in segments, segments on a local Ray.

Its table: docs/video-segments.md, "Measured" (and the summary in docs/video.md).

    .venv/bin/python benchmarks/bench_video_segments.py                       # 60 s at 8 fps, 10 s segments, 2 workers
    .venv/bin/python benchmarks/bench_video_segments.py --seconds 60 --fps 8 --workers 2 --segment-seconds 10

Each way runs in its own fresh process (the Ray way's driver too; its local Ray starts inside it, start-up
included). Mode ``low``: a GPEN-BFR-256 checkpoint with random weights written here (same architecture, so
the same time and memory) and the real RetinaFace mobilenet0.25 from ``../shared/weights``. The clip: a
192×208 canvas with one 128 px FFHQ face from ``../shared/faces``, drifting 1 px a frame, H.264 with a
keyframe every second, AAC audio. Small frames keep the run short; what is compared is how the ways scale.
Peak: ``ru_maxrss`` of the process (the driver for Ray) and, for the segment ways, the largest per-segment
peak each worker measured. Prints a Markdown table; docs/video-segments.md holds one with the CPU and load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared"))
W, H, FACE = 192, 208, 128


def make_clip(path: Path, seconds: int, fps: int) -> None:
    import av
    import cv2
    import numpy as np

    face = cv2.cvtColor(cv2.imread(str(SHARED / "faces" / "ffhq_00000_512.png")), cv2.COLOR_BGR2RGB)
    face = cv2.resize(face, (FACE, FACE), interpolation=cv2.INTER_AREA)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "veryfast", "g": str(fps),
                                                            "sc_threshold": "0"})
        vs.width, vs.height, vs.pix_fmt = W, H, "yuv420p"
        a = out.add_stream("aac", rate=16000)
        a.layout = "mono"
        n = seconds * fps
        for i in range(n):
            canvas = np.full((H, W, 3), 80, np.uint8)
            x = 16 + (i % 32)
            canvas[48 : 48 + FACE, x : x + FACE] = face
            for p in vs.encode(av.VideoFrame.from_ndarray(canvas, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
        samples = 16000 * seconds
        tone = (np.sin(np.arange(samples) * 2 * np.pi * 440 / 16000) * 0.2).astype(np.float32)
        for k in range(0, samples, 1024):
            f = av.AudioFrame.from_ndarray(tone[None, k : k + 1024], format="fltp", layout="mono")
            f.sample_rate, f.pts = 16000, k
            for p in a.encode(f):
                out.mux(p)
        for p in a.encode():
            out.mux(p)


def child(way: str, src: str, dst: str, models: str, segment_seconds: float, workers: int, threads: int) -> None:
    """One way in this fresh process; prints a JSON line."""
    import torch

    torch.set_num_threads(threads)  # the driver's own restores (Ray workers set theirs from their CPU share)
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.video.resumable import LocalRunner, restore_in_segments, settings_text

    opts = RestoreOptions(mode="low", backend="torch")
    t0 = time.perf_counter()
    worker_peak = None
    if way == "one pass":
        from gpen_core.video.stream import restore_video

        frames = restore_video(src, dst, Restorer(models_dir=models, device="cpu"), opts).frames
        used = 1
    else:
        if way == "segments":
            runner = LocalRunner(Restorer(models_dir=models, device="cpu"), opts, 18)
        else:
            from gpen_core.scaleout.video_ray import RayRunner

            runner = RayRunner(opts, 18, models_dir=models, device="cpu", workers=workers)
        r = restore_in_segments(src, dst, runner, settings_text(opts, 18), segment_seconds=segment_seconds)
        frames = r.frames
        used = getattr(runner, "used_workers", 1)
        worker_peak = max(x.peak_rss_bytes or 0 for x in r.records) / 2**20
    total = time.perf_counter() - t0
    print(json.dumps({"frames": frames, "s": total, "workers": used, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "worker_peak_mib": worker_peak}))


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _models(tmp: Path) -> Path:
    from tests.factories import RELEASED, write_checkpoint

    models = tmp / "models"
    models.mkdir()
    write_checkpoint(models / "GPEN-BFR-256.pth", RELEASED["GPEN-BFR-256"], seed=1)
    (models / "detection_mobilenet0.25_Final.pth").symlink_to(SHARED / "weights" / "detection_mobilenet0.25_Final.pth")
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--fps", type=int, default=8)
    ap.add_argument("--segment-seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ways", nargs="+", default=["one pass", "segments", "ray"])
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the one-process ways (default 1: as each Ray worker has on 2 cores; on a "
                         "loaded machine OpenMP's spinning makes 2 threads far slower)")
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        way, src, dst, models, seg, workers, threads = args.child
        child(way, src, dst, models, float(seg), int(workers), int(threads))
        return
    if not (SHARED / "weights" / "detection_mobilenet0.25_Final.pth").exists():
        sys.exit(f"needs {SHARED}/weights/detection_mobilenet0.25_Final.pth (the project's ../shared data; GPEN_SHARED=…)")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        models = _models(tmp)
        src = tmp / "clip.mp4"
        make_clip(src, args.seconds, args.fps)
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}; "
              f"{args.seconds} s at {args.fps} fps ({args.seconds * args.fps} frames, {W}×{H}, one face), "
              f"{args.segment_seconds:g} s segments; {args.threads} torch thread(s) in the one-process ways\n")
        print("| way | workers | frames | wall s | frames/s | process peak MiB | largest segment peak MiB |")
        print("|---|---|---|---|---|---|---|")
        for way in args.ways:
            env = {**os.environ, "GPEN_SHARED": str(SHARED)}
            out = subprocess.run([sys.executable, __file__, "--child", way, str(src), str(tmp / f"o_{way[:3]}.mp4"), str(models),
                                  str(args.segment_seconds), str(args.workers), str(args.threads)], capture_output=True, text=True, cwd=ROOT, env=env)
            if out.returncode:
                sys.exit(out.stderr[-3000:])
            r = json.loads(out.stdout.strip().splitlines()[-1])
            wp = f"{r['worker_peak_mib']:.0f}" if r["worker_peak_mib"] else "–"
            print(f"| {way} | {r['workers']} | {r['frames']} | {r['s']:.1f} | {r['frames'] / r['s']:.2f} | {r['peak_mib']:.0f} | {wp} |",
                  flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
