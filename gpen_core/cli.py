"""``python -m gpen_core``: the command line. The only place with argparse and exit codes.

Exit codes: 0 success (a photo with no face is a success with a note), 2 bad
usage or bad input, 3 missing or corrupt weights, 4 out of memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import GPENError, InputError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif"}
FORMAT_BY_SUFFIX = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}
SUFFIX_BY_FORMAT = {"png": ".png", "jpeg": ".jpg"}
DEFAULT_DOWNLOADS = ("GPEN-BFR-512", "GPEN-BFR-256", "retinaface-mobilenet0.25", "retinaface-resnet50")


def _parser() -> argparse.ArgumentParser:
    from .modes import MODE_CHOICES

    p = argparse.ArgumentParser(prog="python -m gpen_core", description="GPEN blind face restoration that measures what it costs.")
    p.add_argument("-v", "--verbose", action="store_true", help="print error details (every place looked, each attempt)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("restore", help="restore the faces in photos")
    r.add_argument("inputs", nargs="+", metavar="INPUT", help="image files or folders of images")
    r.add_argument("-o", "--output", required=True, help="output file (one input; its extension picks png/jpeg) or folder")
    r.add_argument("--mode", default="auto", choices=MODE_CHOICES, help="memory mode (default: auto)")
    r.add_argument("--model", help="generator: registry name (GPEN-BFR-1024) or path to any GPEN checkpoint")
    r.add_argument("--detector", choices=("resnet50", "mobilenet"), help="override the mode's face detector")
    r.add_argument("--models-dir", help="models folder for this run (default: $GPEN_HOME or ~/.cache/gpen)")
    r.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    r.add_argument("--aligned", action="store_true", help="inputs are already aligned face crops")
    r.add_argument("--alpha", type=float, default=1.0, help="blend: 1 restored only … 0 original (default 1)")
    r.add_argument("--threshold", type=float, default=0.9, help="face detection confidence (default 0.9)")
    r.add_argument("--max-faces", type=int, default=50, help="restore at most this many faces, largest first")
    r.add_argument("--overwrite", action="store_true", help="replace outputs that already exist (default: skip them)")
    r.add_argument("--json", action="store_true", help="print one JSON object per image on stdout")

    d = sub.add_parser("download", help="download weights into the models folder")
    d.add_argument("names", nargs="*", metavar="NAME", help=f"registry names (default: {' '.join(DEFAULT_DOWNLOADS)})")
    d.add_argument("--models-dir")

    i = sub.add_parser("info", help="versions, device, and which weights are present")
    i.add_argument("--models-dir")
    i.add_argument("--json", action="store_true")

    from . import profile

    if hasattr(profile, "add_cli"):
        profile.add_cli(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "restore":
            return _restore(args)
        if args.command == "download":
            return _download(args)
        if args.command == "info":
            return _info(args)
        from . import profile

        return profile.run_cli(args)
    except GPENError as exc:
        _print_error(exc, args.verbose)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


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
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES and q.is_file())
            if not found:
                raise InputError(f"folder {p} has no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
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
    return [(p, out / p.stem, None) for p in inputs]  # suffix added once the format is known


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


def _restore(args: argparse.Namespace) -> int:
    from .restorer import Restorer, RestoreOptions

    detector = {"mobilenet": "mobilenet0.25", "resnet50": "resnet50"}.get(args.detector) if args.detector else None
    inputs = _collect_inputs(args.inputs)
    plan = _plan_outputs(inputs, args.output, None)
    restorer = Restorer(models_dir=args.models_dir, device=args.device)
    bar = _Bar(len(plan))
    worst = 0
    for src, dst, fmt in plan:
        opts = RestoreOptions(
            mode=args.mode,
            model=args.model,
            detector=detector,  # type: ignore[arg-type]
            alpha=args.alpha,
            threshold=args.threshold,
            max_faces=args.max_faces,
            aligned=args.aligned,
            output_format=fmt,
        )
        record: dict[str, Any] = {"input": str(src)}
        if dst.suffix == "" and not args.overwrite:
            existing = [dst.with_suffix(s) for s in SUFFIX_BY_FORMAT.values() if dst.with_suffix(s).exists()]
            if existing:
                record.update(status="skipped", output=str(existing[0]), note="output exists; use --overwrite")
                _emit(args, record)
                bar.step(src.name)
                continue
        elif dst.exists() and not args.overwrite:
            record.update(status="skipped", output=str(dst), note="output exists; use --overwrite")
            _emit(args, record)
            bar.step(src.name)
            continue
        try:
            result = restorer(src, opts)
        except GPENError as exc:
            record.update(status="error", error=str(exc), exit_code=exc.exit_code)
            _emit(args, record)
            if not args.json:
                _print_error(exc, args.verbose, prefix=f"{src}: ")
            worst = worst or exc.exit_code
            bar.step(src.name)
            continue
        if dst.suffix == "":
            dst = dst.with_suffix(SUFFIX_BY_FORMAT[result.output_format])
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.partial")
        tmp.write_bytes(result.encoded)
        tmp.replace(dst)
        record.update(status="ok", output=str(dst), **result_record(result))
        _emit(args, record)
        if not args.json:
            _print_human(record)
        bar.step(src.name)
    return worst


def result_record(result: Any) -> dict[str, Any]:
    """The JSON-able summary of a RestoreResult (CLI --json, benchmarks, the API)."""
    p = result.peaks
    return {
        "faces": len(result.faces),
        "mode": result.mode.name,
        "requested_mode": result.requested_mode,
        "mode_reason": result.mode_reason,
        "checkpoint": result.checkpoint,
        "detector": result.detector,
        "device": result.device,
        "dtype": result.dtype,
        "format": result.output_format,
        "input_size": list(result.input_size),
        "processed_size": list(result.processed_size),
        "peaks": {
            "rss_bytes": p.rss_bytes,
            "baseline_rss_bytes": p.baseline_rss_bytes,
            "vram_bytes": p.vram_allocated_bytes,
            "vram_reserved_bytes": p.vram_reserved_bytes,
            "method": p.method,
        },
        "timings": {"total_s": round(result.timings.total_s, 4), **{f"{k}_s": round(v, 4) for k, v in result.timings.stages().items()}},
        "notes": list(result.notes),
    }


def _emit(args: argparse.Namespace, record: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(record), flush=True)


def _print_human(rec: dict[str, Any]) -> None:
    from .meter import format_bytes

    pk = rec["peaks"]
    vram = f", peak VRAM {format_bytes(pk['vram_bytes'])}" if pk["vram_bytes"] is not None else ""
    print(
        f"{rec['input']} -> {rec['output']}: {rec['faces']} face(s), mode {rec['mode']}, "
        f"{rec['timings']['total_s']:.2f}s, peak RAM {format_bytes(pk['rss_bytes'])}{vram}",
        file=sys.stderr,
    )
    for note in rec["notes"]:
        print(f"  note: {note}", file=sys.stderr)


# ---------------------------------------------------------- download, info


def _download(args: argparse.Namespace) -> int:
    from . import weights

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
    return worst


def _info(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .info import collect_info, format_info

    info = collect_info(models_dir=args.models_dir)
    if args.json:
        print(json.dumps(asdict(info), default=str, indent=2))
    else:
        print(format_info(info))
    return 0
