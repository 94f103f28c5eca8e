"""Video at constant memory: seconds per frame and whole-process peak for clips 1×, 4× and 16× as long.

Its table: docs/video.md, "Memory and time, measured".

    .venv/bin/python benchmarks/bench_video.py                        # low; base clip of 1 frame: 1, 4, 16 frames
    .venv/bin/python benchmarks/bench_video.py --modes low balanced --base 3 --lengths 1 4 16
    .venv/bin/python benchmarks/bench_video.py --base 8 --face-every 8 --size 640 360   # 8, 32, 128 frames

Two ways, the same restorer and frame session (``Restorer.frames``), each run in its own fresh process:

- ``stream``: :func:`gpen_core.video.stream.restore_video` (decode and encode threads, a 3-frame look-ahead);
- ``list``: the way CodeFormer's and KEEP's video scripts work: every frame decoded into a Python list,
  each restored into a second list, then all encoded (same detection, same restore, no steadying).

Weights: the generators and the parser are synthetic (``Restorer(synthetic_weights=True)``: the
exact architectures, random values; time and memory do not depend on the values); the detector is the
real RetinaFace mobilenet0.25 from ``../shared/weights`` (a synthetic one finds no face). The clip:
a 1280×720 canvas holding one FFHQ face of 128 px from ``../shared/faces`` that drifts 2 px a frame,
its base frames looped to the length asked. Peak: the process's VmHWM at the end (``ru_maxrss``), so
it includes Python, torch and the models; the growth with length is what to read.
Prints a Markdown table (docs/video.md holds one, with the CPU and the load it ran under).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared"))
W, H, FACE = 1280, 720, 128


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def make_clip(path: Path, frames: int, base: int, face_every: int = 1, size: tuple[int, int] = (W, H)) -> None:
    import av
    import cv2
    import numpy as np

    face = cv2.cvtColor(cv2.imread(str(SHARED / "faces" / "ffhq_00000_512.png")), cv2.COLOR_BGR2RGB)
    face = cv2.resize(face, (FACE, FACE), interpolation=cv2.INTER_AREA)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=25, options={"crf": "18", "preset": "ultrafast"})
        w, h = size
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            k = i % base
            canvas = np.full((h, w, 3), 96, np.uint8)
            x, y = 40 + 2 * k, (h - FACE) // 2
            if k % face_every == 0:
                canvas[y : y + FACE, x : x + FACE] = face
            for p in vs.encode(av.VideoFrame.from_ndarray(canvas, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)


def child(way: str, mode: str, src: str, dst: str, models: str) -> None:
    """One run in this (fresh) process; prints a JSON line."""
    import torch

    from gpen_core.engine.pipeline import import_engine
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    import_engine()
    restorer = Restorer(models_dir=models, synthetic_weights=True, device="cpu")
    opts = RestoreOptions(mode=mode, backend="torch")
    t0 = time.perf_counter()
    if way == "stream":
        from gpen_core.video.stream import restore_video

        r = restore_video(src, dst, restorer, opts)
        frames, faces = r.frames, r.faces_per_frame_max
    else:
        frames, faces = list_way(restorer, opts, src, dst)
    total = time.perf_counter() - t0
    print(json.dumps({"frames": frames, "faces": faces, "s_per_frame": total / frames, "threads": torch.get_num_threads(),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def list_way(restorer, opts, src: str, dst: str) -> tuple[int, int]:
    """CodeFormer's shape: all frames in a list, all restored into another, then all written."""
    import av

    with av.open(src) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    h, w = frames[0].shape[:2]
    restored, faces = [], 0
    with restorer.frames(opts, (w, h)) as session:
        for rgb in frames:
            dets = session.detect(rgb)
            faces = max(faces, len(dets))
            restored.append(session.restore(rgb, dets).image if dets else rgb)
    with av.open(dst, "w") as out:
        vs = out.add_stream("libx264", rate=25, options={"crf": "18"})
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        for rgb in restored:
            for p in vs.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return len(frames), faces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["low"])
    ap.add_argument("--base", type=int, default=1, help="frames in the 1× clip")
    ap.add_argument("--lengths", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--face-every", type=int, default=1, help="the face in every Nth frame only (long clips in less time)")
    ap.add_argument("--size", type=int, nargs=2, default=[W, H], metavar=("W", "H"))
    ap.add_argument("--child", nargs=5, metavar=("WAY", "MODE", "SRC", "DST", "MODELS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    detector = SHARED / "weights" / "detection_mobilenet0.25_Final.pth"
    if not detector.exists():
        sys.exit(f"needs {detector} (the project's ../shared data)")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        models = tmp / "models"
        models.mkdir()
        (models / detector.name).symlink_to(detector)
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}; "
              f"{args.size[0]}×{args.size[1]}, a face in every {args.face_every} frame(s)\n")
        print("| mode | way | frames | faces/frame | s/frame | whole-process peak MiB |")
        print("|---|---|---|---|---|---|")
        for mode in args.modes:
            for n in args.lengths:
                src = tmp / f"clip{n}.mp4"
                if not src.exists():
                    make_clip(src, args.base * n, args.base, args.face_every, tuple(args.size))
                for way in ("stream", "list"):
                    out = subprocess.run([sys.executable, __file__, "--child", way, mode, str(src), str(tmp / f"o_{way}.mp4"),
                                          str(models)], capture_output=True, text=True, cwd=ROOT)
                    if out.returncode:
                        sys.exit(out.stderr[-3000:])
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"| {mode} | {way} | {r['frames']} | {r['faces']} | {r['s_per_frame']:.2f} | {r['peak_mib']:.0f} |",
                          flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
