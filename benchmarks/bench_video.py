"""Video at constant memory: seconds per frame and whole-process peak for clips 1×, 4× and 16× as long;
with ``--segments``, a 60 s clip in one pass, in segments, and in segments on a local Ray; with
``--vs-photos``, a clip's seconds a face against the same frames restored as photos; with
``--hand-placed``, the CLI on a clip with hand-placed checkpoints (it converts first) against the IR present.

Its tables: docs/video.md, "Memory and time, measured"; with ``--segments``, docs/video-segments.md,
"Measured" (and its summary in docs/video.md); ``--vs-photos`` and ``--hand-placed``: docs/video.md,
"A clip against its frames as photos" and "A long clip on hand-placed weights".

    .venv/bin/python benchmarks/bench_video.py                        # low; base clip of 1 frame: 1, 4, 16 frames
    .venv/bin/python benchmarks/bench_video.py --modes low balanced --base 3 --lengths 1 4 16
    .venv/bin/python benchmarks/bench_video.py --base 8 --face-every 8 --size 640 360   # 8, 32, 128 frames
    .venv/bin/python benchmarks/bench_video.py --segments             # 60 s at 8 fps, 10 s segments, 2 workers
    .venv/bin/python benchmarks/bench_video.py --segments --seconds 60 --fps 5 --workers 2 --segment-seconds 10
    .venv/bin/python benchmarks/bench_video.py --vs-photos            # low and balanced, 40 frames 256×256, 2 runs
    .venv/bin/python benchmarks/bench_video.py --hand-placed          # balanced, 300 frames 256×256, 2 runs

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

``--segments``: each way runs in its own fresh process (the Ray way's driver too; its local Ray starts
inside it, start-up included). Mode ``low``: a GPEN-BFR-256 checkpoint with random weights written here
(same architecture, so the same time and memory) and the real RetinaFace mobilenet0.25 from
``../shared/weights``. The clip: a 192×208 canvas with one 128 px FFHQ face from ``../shared/faces``,
drifting 1 px a frame, H.264 with a keyframe every second, AAC audio. Small frames keep the run short;
what is compared is how the ways scale. Peak: ``ru_maxrss`` of the process (the driver for Ray) and, for
the segment ways, the largest per-segment peak each worker measured.

``--vs-photos``: one fresh process per mode holds one restorer (synthetic generators, the real
mobilenet0.25, torch), its networks loaded by an untimed first photo; then, alternated ``--runs`` times,
the clip through :func:`~gpen_core.video.stream.restore_video` (decode, steadying, encode: all of it
timed) and its frames, already decoded to RGB, through ``Restorer.__call__`` one after another (the
folder path of the CLI without its file reads and writes: the photos' side is the lighter). Seconds a
face: each side's wall time over the faces it restored. Target: the clip at most 1.1× the photos.

``--hand-placed``: ``python -m gpen_core restore clip.mp4 -o out.mp4 --mode balanced --json`` in a
fresh process, its wall time measured from outside, on a new models folder holding only a random-value
GPEN-BFR-512 checkpoint (the released architecture: the same conversion and time) and the real
mobilenet0.25 (no IR: the CLI converts first), against the same clip on a folder whose IR is there
(the first run's), alternated. The plan: ``budget.estimate_peak`` for the clip's frames, the figure the
frame session keeps to above where it starts; the peak: the record's ``peaks`` above its baseline.
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
W, H, FACE = 1280, 720, 128
SEG_W, SEG_H = 192, 208  # --segments' frames


def cpu_name() -> str:
    from gpen_core.platform.cpuinfo import cpu_model

    return cpu_model()


def cpu_flags() -> str:
    """The /proc/cpuinfo flags that decide the networks' speed here (vector width, bfloat16, AMX)."""
    try:
        line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags"))
    except (OSError, StopIteration):
        return "flags unknown"
    have = set(line.split(":", 1)[1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
    return "flags " + (" ".join(f for f in wanted if f in have) or "without AVX2")


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


# ------------------------------------------------------------ --segments: one pass, segments, Ray


def make_segments_clip(path: Path, seconds: int, fps: int) -> None:
    """``--segments``' clip: SEG_W×SEG_H, one face drifting 1 px a frame, a keyframe a second, a 440 Hz tone."""
    import av
    import cv2
    import numpy as np

    face = cv2.cvtColor(cv2.imread(str(SHARED / "faces" / "ffhq_00000_512.png")), cv2.COLOR_BGR2RGB)
    face = cv2.resize(face, (FACE, FACE), interpolation=cv2.INTER_AREA)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "veryfast", "g": str(fps),
                                                            "sc_threshold": "0"})
        vs.width, vs.height, vs.pix_fmt = SEG_W, SEG_H, "yuv420p"
        a = out.add_stream("aac", rate=16000)
        a.layout = "mono"
        n = seconds * fps
        for i in range(n):
            canvas = np.full((SEG_H, SEG_W, 3), 80, np.uint8)
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


def segments_child(way: str, src: str, dst: str, models: str, segment_seconds: float, workers: int, threads: int) -> None:
    """``--segments``: one way in this fresh process; prints a JSON line."""
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
            from gpen_core.scaleout.runtime import RaySettings
            from gpen_core.scaleout.video_ray import RayRunner

            runner = RayRunner(opts, 18, RaySettings(workers=workers, device="cpu", models_dir=models))
        r = restore_in_segments(src, dst, runner, settings_text(opts, 18), segment_seconds=segment_seconds)
        frames = r.frames
        used = getattr(runner, "used_workers", 1)
        worker_peak = max(x.peak_rss_bytes or 0 for x in r.records) / 2**20
    total = time.perf_counter() - t0
    print(json.dumps({"frames": frames, "s": total, "workers": used, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "worker_peak_mib": worker_peak}))


def _segment_models(tmp: Path) -> Path:
    """``--segments``' models folder: a random-weight GPEN-BFR-256 file and the real mobilenet0.25."""
    from tests.factories import RELEASED, write_checkpoint

    models = tmp / "models"
    models.mkdir()
    write_checkpoint(models / "GPEN-BFR-256.pth", RELEASED["GPEN-BFR-256"], seed=1)
    (models / "detection_mobilenet0.25_Final.pth").symlink_to(SHARED / "weights" / "detection_mobilenet0.25_Final.pth")
    return models


def segments_main(args: argparse.Namespace) -> None:
    """``--segments``: the three ways, a Markdown row each."""
    if not (SHARED / "weights" / "detection_mobilenet0.25_Final.pth").exists():
        sys.exit(f"needs {SHARED}/weights/detection_mobilenet0.25_Final.pth (the project's ../shared data; GPEN_SHARED=…)")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        models = _segment_models(tmp)
        src = tmp / "clip.mp4"
        make_segments_clip(src, args.seconds, args.fps)
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}; "
              f"{args.seconds} s at {args.fps} fps ({args.seconds * args.fps} frames, {SEG_W}×{SEG_H}, one face), "
              f"{args.segment_seconds:g} s segments; {args.threads} torch thread(s) in the one-process ways\n")
        print("| way | workers | frames | wall s | frames/s | process peak MiB | largest segment peak MiB |")
        print("|---|---|---|---|---|---|---|")
        for way in args.ways:
            env = {**os.environ, "GPEN_SHARED": str(SHARED)}
            out = subprocess.run([sys.executable, __file__, "--segments-child", way, str(src), str(tmp / f"o_{way[:3]}.mp4"), str(models),
                                  str(args.segment_seconds), str(args.workers), str(args.threads)], capture_output=True, text=True, cwd=ROOT, env=env)
            if out.returncode:
                sys.exit(out.stderr[-3000:])
            r = json.loads(out.stdout.strip().splitlines()[-1])
            wp = f"{r['worker_peak_mib']:.0f}" if r["worker_peak_mib"] else "–"
            print(f"| {way} | {r['workers']} | {r['frames']} | {r['s']:.1f} | {r['frames'] / r['s']:.2f} | {r['peak_mib']:.0f} | {wp} |",
                  flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


# ------------------------------------------------------------ --vs-photos: a clip's faces against the same frames as photos


def vs_photos_child(mode: str, src: str, models: str, runs: int) -> None:
    """``--vs-photos``: in this one process, one restorer (networks loaded once, by a first photo not timed), the clip
    through :func:`restore_video` and its frames through ``Restorer.__call__``, alternated ``runs`` times; a JSON line a run."""
    import av
    import torch

    from gpen_core.engine.pipeline import import_engine
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.video.stream import restore_video

    import_engine()
    restorer = Restorer(models_dir=models, synthetic_weights=True, device="cpu")
    opts = RestoreOptions(mode=mode, backend="torch")
    with av.open(src) as c:  # the photos: the clip's frames as decoded RGB (no file decode or encode timed for them)
        photos = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    restorer(photos[0], opts)  # loads the networks: neither way pays for it
    for run in range(runs):
        faces = [0]
        t0 = time.perf_counter()
        r = restore_video(src, Path(src).with_name(f"o_{mode}.mp4"), restorer, opts,
                          on_frame=lambda rec: faces.__setitem__(0, faces[0] + len(rec.faces)))
        video_s = time.perf_counter() - t0
        print(json.dumps({"way": "video", "run": run + 1, "frames": r.frames, "faces": faces[0], "s": video_s,
                          "threads": torch.get_num_threads(), "load": os.getloadavg()[0]}), flush=True)
        t0, n = time.perf_counter(), 0
        for rgb in photos:
            n += len(restorer(rgb, opts).faces)
        photo_s = time.perf_counter() - t0
        print(json.dumps({"way": "photos", "run": run + 1, "frames": len(photos), "faces": n, "s": photo_s,
                          "threads": torch.get_num_threads(), "load": os.getloadavg()[0]}), flush=True)


def vs_photos_main(args: argparse.Namespace) -> None:
    """``--vs-photos``: seconds a face, clip against photos, per mode; a Markdown row each run and the ratio of each pair."""
    detector = SHARED / "weights" / "detection_mobilenet0.25_Final.pth"
    if not detector.exists():
        sys.exit(f"needs {detector} (the project's ../shared data; GPEN_SHARED=…)")
    n, (w, h) = args.frames or 40, args.size or (256, 256)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        models = tmp / "models"
        models.mkdir()
        (models / detector.name).symlink_to(detector)
        src = tmp / "clip.mp4"
        make_clip(src, n, min(n, 40), 1, (w, h))
        print(f"CPU: {cpu_name()} ({cpu_flags()}), {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}; {n} frames, "
              f"{w}×{h}, one {FACE} px face in each; synthetic generator weights, real mobilenet0.25; torch backend\n")
        print("| mode | run | way | frames | faces | s | s/face | video ÷ photos | load |")
        print("|---|---|---|---|---|---|---|---|---|")
        for mode in args.modes or ["low", "balanced"]:
            proc = subprocess.Popen([sys.executable, __file__, "--vs-photos-child", mode, str(src), str(models), str(args.runs)],
                                    stdout=subprocess.PIPE, text=True, cwd=ROOT)
            last = None
            assert proc.stdout is not None
            for line in proc.stdout:
                r = json.loads(line)
                per = r["s"] / max(1, r["faces"])
                ratio = f"{last / per:.2f}" if r["way"] == "photos" and last else ""
                last = per if r["way"] == "video" else None
                print(f"| {mode} | {r['run']} | {r['way']} | {r['frames']} | {r['faces']} | {r['s']:.1f} | {per:.3f} | "
                      f"{ratio} | {r['load']:.1f} |", flush=True)
            if proc.wait():
                sys.exit(f"the {mode} run failed (exit {proc.returncode})")
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


# ------------------------------------------------------------ --hand-placed: the CLI on hand-placed weights, convert-first


def _hand_placed_models(folder: Path) -> Path:
    """A models folder as a user fills it by hand: a GPEN-BFR-512 checkpoint (random values, the released
    architecture: the same conversion and time) and the real mobilenet0.25; no OpenVINO IR, no speed records."""
    from tests.factories import RELEASED, write_checkpoint

    folder.mkdir()
    write_checkpoint(folder / "GPEN-BFR-512.pth", RELEASED["GPEN-BFR-512"], seed=1)
    (folder / "detection_mobilenet0.25_Final.pth").symlink_to(SHARED / "weights" / "detection_mobilenet0.25_Final.pth")
    return folder


def _cli_clip(src: Path, dst: Path, models: Path, mode: str) -> dict:
    """One ``python -m gpen_core restore`` of the clip (a fresh process, as a user runs it): wall seconds, its
    summary record, and the stderr lines that say what it did before the first frame."""
    dst.unlink(missing_ok=True)
    t0, cpu0 = time.perf_counter(), _children_cpu()
    out = subprocess.run([sys.executable, "-m", "gpen_core", "restore", str(src), "-o", str(dst), "--mode", mode,
                          "--models-dir", str(models), "--json"], capture_output=True, text=True, cwd=ROOT)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    record = json.loads(out.stdout.strip().splitlines()[-1])
    said = [line for line in out.stderr.splitlines() if line.startswith("converting")]
    return {"wall": wall, "cpu": cpu, "video": record["video"], "said": said}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children, the conversion's child included: a
    figure other programs' load moves far less than wall time."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hand_placed_main(args: argparse.Namespace) -> None:
    """``--hand-placed``: the CLI on a fresh folder of hand-placed checkpoints (it converts first) against the same
    clip on a folder whose IR is there, alternated ``--runs`` times; a Markdown row each run."""
    from gpen_core.engine.budget import Work, estimate_peak
    from gpen_core.modes import MODES

    if not (SHARED / "weights" / "detection_mobilenet0.25_Final.pth").exists():
        sys.exit(f"needs {SHARED}/weights/detection_mobilenet0.25_Final.pth (the project's ../shared data; GPEN_SHARED=…)")
    mode, n, (w, h) = (args.modes or ["balanced"])[0], args.frames or 300, args.size or (256, 256)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        src = tmp / "clip.mp4"
        make_clip(src, n, min(n, 40), 1, (w, h))
        print(f"CPU: {cpu_name()} ({cpu_flags()}), {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}; {n} frames, "
              f"{w}×{h}, one {FACE} px face in each; `python -m gpen_core restore clip.mp4 -o out.mp4 --mode {mode} "
              "--models-dir D --json`, each a fresh process\n")
        print("| run | models folder | converted first | wall s | CPU s | s/frame in the restore | peak above start MiB | "
              "plan MiB | generator on | load |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        ready = None  # a folder whose IR the first hand-placed run left: "as after a download or a previous conversion"
        for run in range(1, args.runs + 1):
            for way in ("hand-placed", "IR present"):
                if way == "hand-placed":
                    models = _hand_placed_models(tmp / f"hand{run}")
                else:
                    models = ready = ready or tmp / "hand1"
                r = _cli_clip(src, tmp / "out.mp4", models, mode)
                v, peaks = r["video"], r["video"]["peaks"]
                plan, _ = estimate_peak(MODES[v["mode"]], "cpu", tuple(v["size"]), models, work=Work())
                gen = next((x["runtime"] for x in v["runtimes"] if x["network"] == "generator"), "?")
                said = r["said"][-1].split(": ", 1)[-1] if r["said"] else "no"
                delta = (peaks["rss_bytes"] - peaks["baseline_rss_bytes"]) / 2**20
                print(f"| {run} | {way} | {said} | {r['wall']:.0f} | {r['cpu']:.0f} | {v['seconds_per_frame']:.2f} | {delta:.0f} | "
                      f"{plan / 2**20:.0f} | {gen} | {os.getloadavg()[0]:.1f} |", flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", help="default low; --vs-photos low balanced; --hand-placed balanced")
    ap.add_argument("--base", type=int, default=1, help="frames in the 1× clip")
    ap.add_argument("--lengths", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--face-every", type=int, default=1, help="the face in every Nth frame only (long clips in less time)")
    ap.add_argument("--size", type=int, nargs=2, metavar=("W", "H"), help="frame size (default 1280 720; --vs-photos and --hand-placed 256 256)")
    ap.add_argument("--child", nargs=5, metavar=("WAY", "MODE", "SRC", "DST", "MODELS"), help=argparse.SUPPRESS)
    seg = ap.add_argument_group("--segments", "a 60 s clip in one pass, in segments, and in segments on a local Ray")
    seg.add_argument("--segments", action="store_true", help="only this comparison (docs/video-segments.md)")
    seg.add_argument("--seconds", type=int, default=60)
    seg.add_argument("--fps", type=int, default=8)
    seg.add_argument("--segment-seconds", type=float, default=10.0)
    seg.add_argument("--workers", type=int, default=2)
    seg.add_argument("--ways", nargs="+", default=["one pass", "segments", "ray"])
    seg.add_argument("--threads", type=int, default=1,
                     help="torch threads of the one-process ways (default 1: as each Ray worker has on 2 cores; on a "
                          "loaded machine OpenMP's spinning makes 2 threads far slower)")
    seg.add_argument("--segments-child", nargs=7, help=argparse.SUPPRESS)
    cmp = ap.add_argument_group("--vs-photos / --hand-placed", "a clip's seconds a face against photos; the CLI on hand-placed weights")
    cmp.add_argument("--vs-photos", action="store_true", help="the clip's seconds a face against its frames as photos (docs/video.md)")
    cmp.add_argument("--hand-placed", action="store_true", help="the CLI on hand-placed checkpoints against the IR present (docs/video.md)")
    cmp.add_argument("--frames", type=int, help="the clip's frames (default 40; --hand-placed 300)")
    cmp.add_argument("--runs", type=int, default=2, help="each way this many times, alternated")
    cmp.add_argument("--vs-photos-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.segments_child:
        way, src, dst, models, seconds, workers, threads = args.segments_child
        segments_child(way, src, dst, models, float(seconds), int(workers), int(threads))
        return
    if args.segments:
        segments_main(args)
        return
    if args.vs_photos_child:
        mode, src, models, runs = args.vs_photos_child
        vs_photos_child(mode, src, models, int(runs))
        return
    if args.vs_photos or args.hand_placed:
        (vs_photos_main if args.vs_photos else hand_placed_main)(args)
        return
    detector = SHARED / "weights" / "detection_mobilenet0.25_Final.pth"
    if not detector.exists():
        sys.exit(f"needs {detector} (the project's ../shared data)")
    args.size, args.modes = args.size or [W, H], args.modes or ["low"]
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
