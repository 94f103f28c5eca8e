"""``python -m gpen_core download``: fetch weights, then convert for OpenVINO what ``auto`` will run on it.
Progress on stderr, paths and the conversions' report on stdout."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from gpen_core.engine import prepare
from gpen_core.errors import GPENError, InputError, ResourceError
from gpen_core.presentation.cli_run import is_terminal, print_error
from gpen_core.runtimes.openvino.base import cache_root, unwritable_reason
from gpen_core.weights import lookup as weights
from gpen_core.weights.missing import size_text

DEFAULT_DOWNLOADS = ("GPEN-BFR-512", "GPEN-BFR-256", "retinaface-mobilenet0.25", "retinaface-resnet50", "ParseNet-latest")


def add_download(sub: Any) -> None:
    d = sub.add_parser("download", help="download weights into the models folder")
    d.add_argument("names", nargs="*", metavar="NAME", help=f"registry names (default: {' '.join(DEFAULT_DOWNLOADS)})")
    d.add_argument("--models-dir")
    d.add_argument("--no-convert", action="store_true",
                   help="do not convert for OpenVINO afterwards (by default, what `auto` runs on OpenVINO on this CPU is "
                        "converted now, so no restore waits for it)")


def download(args: argparse.Namespace) -> int:
    """Run ``download``: 0 when every file is there (and converted), else the first failure's exit code."""
    names = args.names or list(DEFAULT_DOWNLOADS)
    unknown = [n for n in names if n not in weights.REGISTRY]
    own = [n for n in unknown if Path(n).expanduser().is_file()]
    if own:  # the same sentence a restore's note gives for such a file
        from gpen_core.engine.runtime_choice import convert_ahead_advice

        raise InputError(f"{', '.join(own)}: a checkpoint of your own, not a registry name; "
                         + convert_ahead_advice(True))
    if unknown:
        raise InputError(f"unknown weights {', '.join(unknown)}; known: {', '.join(weights.REGISTRY)}")
    worst = 0
    for name in names:
        progress = DownloadProgress(name)
        try:
            path = weights.download(name, models_dir=args.models_dir, progress=progress)
        except GPENError as exc:
            progress.end()
            print_error(exc, args.verbose)
            worst = worst or exc.exit_code
            continue
        progress.end()
        print(f"{name}: {path}")
    if not args.no_convert:
        worst = convert_ahead(args.models_dir) or worst
    return worst


class DownloadProgress:
    """A download's progress on stderr: redrawn 5 times a second in a terminal; in a log, a line per tenth of the
    file (per 10 MB when its size is unknown)."""

    def __init__(self, name: str) -> None:
        self.name, self.tty, self.last, self.step, self.open = name, is_terminal(sys.stderr), 0.0, -1, False

    def __call__(self, done: int, total: int | None) -> None:
        pct = f"{100 * done / total:5.1f}%" if total else size_text(done, False)
        if self.tty:
            now = time.perf_counter()
            if now - self.last < 0.2 and (total is None or done < total):
                return
            self.last, self.open = now, True
            sys.stderr.write(f"\r{self.name}: {pct}")
        else:
            step = int(10 * done / total) if total else done // 10_000_000
            if step == self.step:
                return
            self.step = step
            sys.stderr.write(f"{self.name}: {pct.strip()}\n")
        sys.stderr.flush()

    def end(self) -> None:
        if self.open:
            sys.stderr.write("\n")
            self.open = False


def convert_ahead(models_dir: str | None) -> int:
    """The OpenVINO conversions ``auto`` will run, with progress: 0, or an exit code when a network could not be
    converted (each named, with why)."""
    planned: list[str] = []
    tty, said = is_terminal(sys.stderr), [""]

    def progress(f: float, m: str) -> None:
        if f >= 1.0:  # the last word is the report's, below: "ready" would be wrong after a failure
            return
        if tty:
            sys.stderr.write(f"\r{m:<78}")
        elif m != said[0]:  # a log: each new message once, on its own line
            sys.stderr.write(m + "\n")
        said[0] = m
        sys.stderr.flush()

    report = prepare.convert_ahead(models_dir=models_dir, progress=progress,
                                   on_plan=lambda todo: planned.extend(label for _, label in todo))
    if tty and said[0]:
        sys.stderr.write("\n")
    unwritable = unwritable_reason(cache_root(models_dir)) if planned else None
    for line in report.lines():
        if not (unwritable and line.startswith("left on torch")):  # said once below instead
            print(f"openvino: {line}")
    if unwritable:
        sys.stderr.write(f"error: could not convert {', '.join(planned)} for OpenVINO: {unwritable}; "
                         "until then they run on torch\n")
        return ResourceError.exit_code
    if report.failed:
        sys.stderr.write(f"error: could not convert {len(report.failed)} network(s) for OpenVINO (above); they run on torch\n")
        return GPENError.exit_code
    if planned:
        print("openvino: ready")
    return 0
