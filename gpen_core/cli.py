"""``python -m gpen_core``: the command line. The only place with argparse and exit codes.

Exit codes: 0 success (a photo with no face is a success with a note), 2 bad
usage or bad input, 3 missing or corrupt weights, 4 out of memory, 5 a damaged video
(the output holds the frames restored before the damage), 130 stopped (Ctrl-C; a partial
video is removed); ``selfcheck``: 1 when a network fails the check.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from gpen_core.errors import GPENError, InputError
from gpen_core.result_json import result_record  # re-exported: scripts read records through the CLI module

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif"}
FORMAT_BY_SUFFIX = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}
SUFFIX_BY_FORMAT = {"png": ".png", "jpeg": ".jpg"}
DEFAULT_DOWNLOADS = ("GPEN-BFR-512", "GPEN-BFR-256", "retinaface-mobilenet0.25", "retinaface-resnet50", "ParseNet-latest")


def _parser() -> argparse.ArgumentParser:
    from gpen_core.modes import MODE_CHOICES, TASK_CHOICES

    p = argparse.ArgumentParser(prog="python -m gpen_core", description="GPEN blind face restoration that measures what it costs.")
    p.add_argument("-v", "--verbose", action="store_true", help="print error details (every place looked, each attempt)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("restore", help="restore the faces in photos and videos")
    r.add_argument("inputs", nargs="+", metavar="INPUT", help="image or video files, or folders of them")
    r.add_argument("-o", "--output", required=True, help="output file (one input; png/jpeg by extension, .mp4 for a video) or folder")
    r.add_argument("--mode", default="auto", choices=MODE_CHOICES, help="memory mode (default: auto)")
    r.add_argument("--model", help="generator: registry name (GPEN-BFR-1024) or path to any GPEN checkpoint")
    r.add_argument("--detector", choices=("resnet50", "mobilenet"), help="override the mode's face detector")
    r.add_argument("--models-dir", help="models folder for this run (default: $GPEN_HOME or ~/.cache/gpen)")
    r.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    r.add_argument("--aligned", action="store_true", help="inputs are already aligned face crops")
    r.add_argument("--task", default="enhance", choices=TASK_CHOICES,
                   help="enhance (restore faces, default), colorize (grey faces), inpaint (white = damaged), "
                        "seg2face (aligned colour label maps); docs/tasks.md")
    r.add_argument("--mask", help="with --task inpaint and one input: the damage, white on black at the photo's size "
                                  "(default: white strokes in the photo itself)")
    r.add_argument("--alpha", type=float, default=1.0, help="blend: 1 restored only … 0 original (default 1)")
    r.add_argument("--threshold", type=float, default=0.9, help="face detection confidence (default 0.9)")
    r.add_argument("--max-faces", type=int, default=50, help="restore at most this many faces, highest detection score first")
    r.add_argument("--no-face-check", dest="face_check", action="store_false",
                   help="keep every detection above the threshold; the notes name those the face check would drop")
    r.add_argument("--orientations", action="store_true",
                   help="also search the photo turned 90/180/270° when upright faces were found (always done when none are)")
    r.add_argument("--upscale", type=int, default=1, choices=(1, 2, 4),
                   help="upscale the whole photo ×2 or ×4 with RealESRNet, faces restored at that size (default 1: off)")
    r.add_argument("--upscaler", help="upscaler: registry name (realesrnet_x2, realesrnet_x4) or checkpoint path "
                   "(default: realesrnet_x<upscale>)")
    r.add_argument("--tile", type=int, help="upscaler tile side in input px (default: the largest that fits the mode's budget)")
    r.add_argument("--backend", default="auto", choices=("auto", "torch", "openvino"),
                   help="generator runtime on the CPU: torch, openvino (converted on first use, cached in the models "
                   "folder), or auto: the one measured faster on this CPU (default)")
    r.add_argument("--overwrite", action="store_true", help="replace outputs that already exist (default: skip them)")
    r.add_argument("--json", action="store_true", help="one JSON object per image on stdout (a video: one per frame, then a summary)")
    _add_video_arguments(r)
    r.add_argument("--ray", action="store_true",
                   help="restore with Ray Data (one folder, file or URI such as s3://…; writes OUT/manifest.jsonl); "
                   "needs requirements-ray.txt")
    r.add_argument("--address", help="with --ray: join this Ray cluster (auto, HOST:PORT, ray://HOST:PORT); "
                   "default: a local Ray on 127.0.0.1 only, stopped at the end")
    r.add_argument("--workers", type=int, help="with --ray: actors in the pool (default: one per GPU share, else one per 2 CPUs)")
    r.add_argument("--gpus-per-worker", type=float, default=0.0, help="with --ray: GPUs per actor (0.5: two per GPU; default 0)")

    d = sub.add_parser("download", help="download weights into the models folder")
    d.add_argument("names", nargs="*", metavar="NAME", help=f"registry names (default: {' '.join(DEFAULT_DOWNLOADS)})")
    d.add_argument("--models-dir")
    d.add_argument("--no-convert", action="store_true",
                   help="do not convert for OpenVINO afterwards (by default, what `auto` runs on OpenVINO on this CPU is "
                        "converted now, so no restore waits for it)")

    s = sub.add_parser("serve", help="serve restores with Ray Serve (for app.py --backend ray); needs requirements-ray.txt")
    s.add_argument("--replicas", default="1", help="replicas: a number, or auto (autoscale from 1 to --max-replicas)")
    s.add_argument("--max-replicas", type=int, default=4, help="with --replicas auto: the most replicas (default 4)")
    s.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica (0.5: two replicas share a GPU; default 0)")
    s.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica; torch uses as many threads (default 1)")
    s.add_argument("--address", help="deploy on this Ray cluster (auto, HOST:PORT); default: a local Ray on 127.0.0.1 only")
    s.add_argument("--port", type=int, default=8000, help="Serve's HTTP port on 127.0.0.1 (POST an image to /restore; default 8000)")
    s.add_argument("--mode", default="auto", choices=MODE_CHOICES, help="mode warmed up in each replica (requests may ask for any)")
    s.add_argument("--models-dir")
    s.add_argument("--device", help="cpu or cuda (default: cuda when --num-gpus > 0)")

    i = sub.add_parser("info", help="versions, device, and which weights are present")
    i.add_argument("--models-dir")
    i.add_argument("--json", action="store_true")

    c = sub.add_parser("selfcheck", help="build and run every network of every mode on a device: does this set-up work?")
    c.add_argument("--device", help="cpu, cuda, cuda:N or meta (default: cuda when available, else cpu)")
    c.add_argument("--json", action="store_true", help='one JSON object: {"device", "ok", "checks": [{network, path, dtype, ok, problem}]}')

    e = sub.add_parser("export", help="write a GPEN generator as ONNX (or OpenVINO IR) for other tools, checked after writing")
    e.add_argument("model", metavar="MODEL", help="registry generator name (GPEN-BFR-512) or path to a GPEN checkpoint")
    e.add_argument("-o", "--output", required=True, help="the file to write: FILE.onnx, or FILE.xml with --format openvino")
    e.add_argument("--format", choices=("onnx", "openvino"), default="onnx", help="onnx (default; opset 17) or openvino (IR)")
    e.add_argument("--models-dir")

    from gpen_core.hwcheck.command import add_profile

    add_profile(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except (ImportError, MemoryError) as exc:  # under a memory cap even the parser's imports can fail
        return _startup_failure(exc, verbose=False)
    try:
        if args.command == "restore":
            return _restore(args)
        if args.command == "download":
            return _download(args)
        if args.command == "info":
            return _info(args)
        if args.command == "serve":
            from gpen_core.scaleout.cli import serve

            return serve(args)
        if args.command == "export":  # gpen_core/runtimes/openvino/onnx_export.py; docs/export.md
            from gpen_core.runtimes.openvino.onnx_export import export_generator

            print(export_generator(args.model, args.output, fmt=args.format, models_dir=args.models_dir,
                                   progress=lambda m: print(m, file=sys.stderr, flush=True)).summary())
            return 0
        if args.command == "selfcheck":
            return _selfcheck(args)
        from gpen_core.hwcheck.command import profile

        return profile(args)
    except GPENError as exc:
        _print_error(exc, args.verbose)
        return exc.exit_code
    except (ImportError, MemoryError) as exc:  # a lazy import under a memory cap, or a broken install
        return _startup_failure(exc, args.verbose)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _startup_failure(exc: BaseException, verbose: bool) -> int:
    """Exit 4 with what the engine needs when an import ran out of memory; else how to repair the install."""
    from gpen_core.errors import OutOfMemory
    from gpen_core.platform.oom import import_failure

    err = import_failure(exc) if isinstance(exc, ImportError) else None
    if err is None:
        err = OutOfMemory(
            "out of memory outside a restore (MemoryError). Close other programs or raise this process's "
            "memory limit, and try again."
        )
    if not isinstance(err, GPENError):
        raise exc
    _print_error(err, verbose)
    return err.exit_code


def _load_engine() -> None:
    """Import PyTorch, OpenCV and facexlib now, so a memory cap fails here with what they need (exit 4)."""
    from gpen_core.platform.oom import import_failure, memory_limited, probe_engine_import

    if memory_limited():  # under a cap the import can crash the process: try it in a child first
        problem = probe_engine_import()
        if problem is not None:
            raise problem
    try:
        from gpen_core.engine.pipeline import import_engine

        import_engine()
    except (ImportError, MemoryError, OSError) as exc:
        raise import_failure(exc) from None


def _selfcheck(args: argparse.Namespace) -> int:
    """Exit 0 when every network is placed and runs on the device; 1 naming the first offending tensor."""
    from gpen_core.hwcheck.selfcheck import run_selfcheck

    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    progress = None if args.json else (lambda what: print(f"checking {what}", file=sys.stderr, flush=True))
    report = run_selfcheck(device, progress=progress)
    print(json.dumps(report.to_json(), indent=1) if args.json else report.table())
    bad = report.first_problem
    if bad is not None:
        print(f"selfcheck failed: {bad.network} ({bad.dtype}): {bad.problem}", file=sys.stderr)
    return 0 if report.ok else 1


def _print_error(exc: GPENError, verbose: bool, prefix: str = "") -> None:
    print(f"error: {prefix}{exc}", file=sys.stderr)
    if verbose and exc.details:
        print(exc.details, file=sys.stderr)


# ----------------------------------------------------------------- restore


def _collect_inputs(items: Sequence[str]) -> list[Path]:
    paths: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and (q.suffix.lower() in IMAGE_SUFFIXES or _is_video(q)))
            if not found:
                raise InputError(f"folder {p} has no images ({', '.join(sorted(IMAGE_SUFFIXES))}) and no videos")
            paths += found
        elif p.is_file():
            paths.append(p)
        else:
            raise InputError(f"input {p} does not exist")
    return paths


def _plan_outputs(inputs: list[Path], output: str, mode_format: str | None) -> list[tuple[Path, Path, str | None]]:
    """(input, output path, format override) per input; format None = the mode's."""
    out = Path(output)
    if out.suffix.lower() in IMAGE_SUFFIXES and not out.is_dir():
        if len(inputs) > 1:
            raise InputError(f"{len(inputs)} inputs need an output folder, not the file {out}")
        fmt = FORMAT_BY_SUFFIX.get(out.suffix.lower())
        if fmt is None:
            raise InputError(f"cannot write {out.suffix} files; use .png, .jpg or .jpeg (or an output folder)")
        return [(inputs[0], out, fmt)]
    from gpen_core.images.outputs import output_stems

    # Unique per input (same.jpg and same.png → same_jpg, same_png); suffix added once the format is known.
    return [(p, out / stem, None) for p, stem in zip(inputs, output_stems([p.name for p in inputs]))]


class _Bar:
    """A one-line progress bar with ETA on stderr, for several images."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.stream, self.t0, self.done = total, stream, time.perf_counter(), 0

    def step(self, label: str) -> None:
        self.done += 1
        if self.total < 2:
            return
        el = time.perf_counter() - self.t0
        eta = el / self.done * (self.total - self.done)
        bar = "#" * int(24 * self.done / self.total)
        self.stream.write(f"\r[{bar:<24}] {self.done}/{self.total} {el:5.1f}s elapsed, ETA {eta:5.1f}s  {label[:40]:<40}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _skip(args: argparse.Namespace, record: dict[str, Any], out: Path) -> None:
    record.update(status="skipped", output=str(out), note="output exists; use --overwrite")
    _emit(args, record)
    print(f"skipped: {out} exists (use --overwrite)", file=sys.stderr)


def _restore(args: argparse.Namespace) -> int:
    if args.ray:
        from gpen_core.scaleout.cli import restore_ray

        return restore_ray(args, _Bar)
    detector = {"mobilenet": "mobilenet0.25", "resnet50": "resnet50"}.get(args.detector) if args.detector else None
    videos, inputs = _split_videos(_collect_inputs(args.inputs))
    worst = _restore_videos(args, videos, photos_too=bool(inputs)) if videos else 0
    if not inputs:
        return worst
    if args.mask is not None and (len(inputs) != 1 or args.task != "inpaint"):
        raise InputError("--mask is the damage of one photo: use it with --task inpaint and a single input")
    plan = _plan_outputs(inputs, args.output, None)
    from gpen_core.images.outputs import check_writable, write_atomic

    check_writable([dst for _, dst, _ in plan])  # bad output paths fail now (exit 2), not after the restore
    _load_engine()  # under a memory cap: exit 4 saying what the engine needs, never a traceback

    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    # One photo: the process ends after it, so each network is dropped once its stage is done
    # (a lower peak); several photos keep them loaded from one to the next.
    restorer = Restorer(models_dir=args.models_dir, device=args.device, one_shot=len(plan) == 1)
    bar = _Bar(len(plan))
    for src, dst, fmt in plan:
        opts = RestoreOptions(
            mode=args.mode,
            model=args.model,
            detector=detector,  # type: ignore[arg-type]
            alpha=args.alpha,
            threshold=args.threshold,
            max_faces=args.max_faces,
            aligned=args.aligned,
            face_check=args.face_check,
            orientations=args.orientations,
            output_format=fmt,
            upscale=args.upscale,
            upscaler=args.upscaler,
            tile=args.tile,
            backend=args.backend,
            task=args.task,
        )
        record: dict[str, Any] = {"input": str(src)}
        if dst.suffix == "" and not args.overwrite:
            existing = [dst.with_suffix(s) for s in SUFFIX_BY_FORMAT.values() if dst.with_suffix(s).exists()]
            if existing:
                _skip(args, record, existing[0])
                bar.step(src.name)
                continue
        elif dst.exists() and not args.overwrite:
            _skip(args, record, dst)
            bar.step(src.name)
            continue
        try:
            result = restorer(src, opts, mask=args.mask)
            if dst.suffix == "":
                dst = dst.with_suffix(SUFFIX_BY_FORMAT[result.output_format])
            write_atomic(dst, result.encoded)  # InputError when the disk filled up, the folder went away...
        except GPENError as exc:
            record.update(status="error", error=str(exc), exit_code=exc.exit_code)
            _emit(args, record)
            if not args.json:
                _print_error(exc, args.verbose, prefix=f"{src}: ")
            worst = worst or exc.exit_code
            bar.step(src.name)
            continue
        record.update(status="ok", output=str(dst), **result_record(result))
        _emit(args, record)
        if not args.json:
            _print_human(record)
        bar.step(src.name)
    return worst


def _emit(args: argparse.Namespace, record: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(record), flush=True)


def _print_human(rec: dict[str, Any]) -> None:
    from gpen_core.platform.meter import format_bytes

    pk = rec["peaks"]
    vram = f", peak VRAM {format_bytes(pk['vram_bytes'])}" if pk["vram_bytes"] is not None else ""
    print(
        f"{rec['input']} -> {rec['output']}: {rec['faces']} face(s), mode {rec['mode']}, "
        f"{rec['timings']['total_s']:.2f}s, peak RAM {format_bytes(pk['rss_bytes'])}{vram}",
        file=sys.stderr,
    )
    for note in rec["notes"]:
        print(f"  note: {note}", file=sys.stderr)


# ------------------------------------------------------------------ video


def _add_video_arguments(r: argparse.ArgumentParser) -> None:
    from gpen_core.video.command import add_video_arguments

    add_video_arguments(r)


def _is_video(path: Path) -> bool:
    """A video by its bytes (the container's signature), whatever its extension."""
    from gpen_core.video.probe import sniff_file

    return sniff_file(path)


def _split_videos(inputs: list[Path]) -> tuple[list[Path], list[Path]]:
    """(videos, photos) of the inputs, told apart by content."""
    videos = [p for p in inputs if _is_video(p)]
    return videos, [p for p in inputs if p not in videos]


def _restore_videos(args: argparse.Namespace, videos: list[Path], photos_too: bool) -> int:
    """Each video streamed through one Restorer (networks resident); exit 5 when one was damaged."""
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.video.command import VideoBar, plan_video_outputs, print_video
    from gpen_core.video.stream import VideoOptions, restore_video

    plan = plan_video_outputs(videos, args.output, photos_too)
    vopts = VideoOptions(crf=args.crf, start_s=args.start, end_s=args.end).validated()
    _load_engine()
    detector = {"mobilenet": "mobilenet0.25", "resnet50": "resnet50"}.get(args.detector) if args.detector else None
    opts = RestoreOptions(mode=args.mode, model=args.model, detector=detector, alpha=args.alpha,  # type: ignore[arg-type]
                          threshold=args.threshold, max_faces=args.max_faces, face_check=args.face_check,
                          upscale=args.upscale, upscaler=args.upscaler, tile=args.tile, backend=args.backend, task=args.task)
    restorer = Restorer(models_dir=args.models_dir, device=args.device)
    worst = 0
    for src, dst in plan:
        record: dict[str, Any] = {"input": str(src)}
        if dst.exists() and not args.overwrite:
            _skip(args, record, dst)
            continue
        on_frame = (lambda rec: print(json.dumps(rec.to_json()), flush=True)) if args.json else None
        try:
            result = restore_video(src, dst, restorer, opts, vopts, progress=VideoBar(src.name), on_frame=on_frame)
        except GPENError as exc:
            sys.stderr.write("\n")
            record.update(status="error", error=str(exc), exit_code=exc.exit_code)
            _emit(args, record)
            _print_error(exc, args.verbose, prefix=f"{src}: ")
            worst = worst or exc.exit_code
            continue
        code = 5 if result.damage is not None else 0
        record.update(status="damaged" if code else "ok", output=str(dst), video=result.to_json())
        _emit(args, record)
        print_video(src, result)
        worst = worst or code
    return worst


# ---------------------------------------------------------- download, info


def _download(args: argparse.Namespace) -> int:
    from gpen_core.weights import lookup as weights

    names = args.names or list(DEFAULT_DOWNLOADS)
    unknown = [n for n in names if n not in weights.REGISTRY]
    if unknown:
        raise InputError(f"unknown weights {', '.join(unknown)}; known: {', '.join(weights.REGISTRY)}")
    worst = 0
    for name in names:
        state = {"last": 0.0}

        def progress(done: int, total: int | None, name: str = name) -> None:
            now = time.perf_counter()
            if now - state["last"] < 0.2 and (total is None or done < total):
                return
            state["last"] = now
            pct = f"{100 * done / total:5.1f}%" if total else f"{done / 1e6:.1f} MB"
            sys.stderr.write(f"\r{name}: {pct}")
            sys.stderr.flush()

        try:
            path = weights.download(name, models_dir=args.models_dir, progress=progress)
        except GPENError as exc:
            sys.stderr.write("\n" if state["last"] else "")
            _print_error(exc, args.verbose)
            worst = worst or exc.exit_code
            continue
        sys.stderr.write("\n" if state["last"] else "")
        print(f"{name}: {path}")
    if not args.no_convert:
        _convert_ahead(args.models_dir)
    return worst


def _convert_ahead(models_dir: str | None) -> None:
    """After the files are verified: the OpenVINO conversions ``auto`` will run, with progress."""
    from gpen_core.engine.prepare import convert_ahead

    def progress(f: float, m: str) -> None:
        sys.stderr.write(f"\r{m:<78}")
        sys.stderr.flush()

    report = convert_ahead(models_dir=models_dir, progress=progress)
    sys.stderr.write("\n")
    for line in report.lines():
        print(f"openvino: {line}")


def _info(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from gpen_core.hwcheck.info import collect_info, format_info

    info = collect_info(models_dir=args.models_dir)
    if args.json:
        print(json.dumps(asdict(info), default=str, indent=2))
    else:
        print(format_info(info))
    return 0


# ---------------------------------------------------------------- profile
