"""``python -m gpen_core profile``, ``selfcheck`` and ``info``: this room's subcommands (argparse wiring and runs)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpen_core.modes import MODES
from gpen_core.platform.paths import HELP as MODELS_DIR_HELP


def add_profile(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "profile",
        help="hardware check: measure each mode's peak memory and speed on this machine",
        description="Run the standard workloads (an aligned face, a 12 MP photo, a group photo) through every "
        "memory mode, print what each needs, and save them in the models folder's measurements.json for `auto`.",
    )
    p.add_argument("--modes", nargs="+", choices=tuple(MODES), metavar="MODE", help=f"modes to measure (default: all; {', '.join(MODES)})")
    p.add_argument("--json", metavar="PATH", help="also write this profile as JSON to PATH")
    p.add_argument("--models-dir", help="models folder (default: $GPEN_HOME or ~/.cache/gpen); measurements.json is saved there")
    p.add_argument("--synthetic", action="store_true", help="random weights for every generator even when real ones are present")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--saved", action="store_true", help="print the saved profile instead of measuring (exit 1 if none is valid)")
    p.add_argument("--no-save", action="store_true", help="do not write measurements.json")
    p.add_argument("--in-process", action="store_true",
                   help="measure every mode in this process (starts faster; an out-of-memory mode then kills the check)")
    p.add_argument("--no-backends", action="store_true",
                   help="skip timing torch against OpenVINO on the CPU (by default recorded for `--backend auto`; "
                   "the first run converts each generator, tens of seconds)")
    p.add_argument("--no-tasks", action="store_true",
                   help="skip GPEN's other tasks (colorize, inpaint, seg2face: one workload per mode that runs them)")
    return p


def progress_line() -> Callable[[float, str], None]:
    """A one-line progress display on the ``sys.stderr`` of the call (not of the import)."""
    stream, t0 = sys.stderr, time.perf_counter()
    state = {"last": "", "ended": False}

    def show(f: float, desc: str) -> None:
        if state["ended"]:
            return
        line = f"[{100 * f:5.1f}%] {time.perf_counter() - t0:6.1f}s  {desc}"[:110]
        if line != state["last"]:
            stream.write("\r" + line.ljust(110))
            stream.flush()
            state["last"] = line
        if f >= 1.0 and desc == "done":
            stream.write("\n")
            state["ended"] = True

    return show


def profile_command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args`` (recorded in the profile and printed under tables)."""
    parts = ["python -m gpen_core profile", "--modes " + " ".join(args.modes) if args.modes else "",
             "--synthetic" if args.synthetic else "", f"--device {args.device}" if args.device else "",
             "--in-process" if args.in_process else "", "--no-backends" if args.no_backends else "",
             "--no-tasks" if args.no_tasks else "",
             f"--models-dir {args.models_dir}" if args.models_dir else ""]
    return " ".join(p for p in parts if p)


def profile(args: argparse.Namespace) -> int:
    """Run the ``profile`` subcommand: 0 done, 1 ``--saved`` found nothing valid."""
    from gpen_core.hwcheck import report, runner
    from gpen_core.engine import profile_store as store
    from gpen_core.platform.measurements import path as store_path

    if args.saved:
        from gpen_core.restorer import Restorer

        dev = Restorer(device=args.device).device
        prof = store.load_profile(dev, args.models_dir)
        if prof is None:
            print(f"no valid saved profile for {store.device_key(dev)} in {store_path(args.models_dir)}: run `python -m gpen_core profile`", file=sys.stderr)
            return 1
    else:
        prof = runner.run_profile(modes=args.modes, models_dir=args.models_dir, progress=progress_line(),
                                  synthetic=True if args.synthetic else None, device=args.device,
                                  isolate=not args.in_process, save=not args.no_save, command=profile_command_line(args),
                                  backends=False if args.no_backends else None,
                                  tasks=False if args.no_tasks else None)
    print(report.format_report(prof, models_dir=args.models_dir))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(prof.to_dict(), indent=2), encoding="utf-8")
        print(f"\nwrote {out}", file=sys.stderr)
    if not args.saved and not args.no_save:
        print(f"saved {store_path(args.models_dir)} (read by `auto`)", file=sys.stderr)
    return 0


def add_selfcheck(subparsers: Any) -> None:
    c = subparsers.add_parser("selfcheck", help="build and run every network of every mode on a device: does this set-up work?")
    c.add_argument("--device", help="cpu, cuda, cuda:N or meta (default: cuda when available, else cpu)")
    c.add_argument("--json", action="store_true", help='one JSON object: {"device", "ok", "checks": [{network, path, dtype, ok, problem}]}')


def selfcheck(args: argparse.Namespace) -> int:
    """Exit 0 when every network is placed and runs on the device; 1 naming the first offending tensor."""
    from gpen_core.hwcheck.selfcheck import run_selfcheck
    from gpen_core.restorer import default_device

    device = args.device or default_device()
    progress = None if args.json else (lambda what: print(f"checking {what}", file=sys.stderr, flush=True))
    report = run_selfcheck(device, progress=progress)
    print(json.dumps(report.to_json(), indent=1) if args.json else report.table())
    bad = report.first_problem
    if bad is not None:
        print(f"selfcheck failed: {bad.network} ({bad.dtype}): {bad.problem}", file=sys.stderr)
    return 0 if report.ok else 1


def add_info(subparsers: Any) -> None:
    i = subparsers.add_parser("info", help="versions, device, and which weights are present")
    i.add_argument("--models-dir", help=MODELS_DIR_HELP)
    i.add_argument("--json", action="store_true", help="the same facts as one JSON object")


def info(args: argparse.Namespace) -> int:
    from gpen_core.hwcheck.info import collect_info, format_info

    found = collect_info(models_dir=args.models_dir)
    print(json.dumps(asdict(found), default=str, indent=2) if args.json else format_info(found))
    return 0
