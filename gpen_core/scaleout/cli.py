"""The Ray front ends of ``python -m gpen_core``: ``restore … --ray`` and ``serve``; arguments in, an exit code out."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.scaleout.runtime import RaySettings


def restore_ray(args: argparse.Namespace, bar_type: Any, options: Any, say_record: Any) -> int:
    """``restore … --ray`` on one folder, file or URI: exit 0 when all restored, else the first failure's code.
    ``bar_type(total)``: the progress bar drawn without ``--json``; ``options``: the CLI's RestoreOptions;
    ``say_record(record, said, say)``: what the CLI prints for a restored or skipped photo (its notes once a run)."""
    from gpen_core.scaleout.batch import BatchConfig, run_batch

    if len(args.inputs) != 1:
        raise InputError(f"--ray takes one folder, file or URI (s3://…), got {len(args.inputs)} inputs")
    options = options.validated()
    if getattr(args, "mask", None) is not None:
        raise InputError("--mask is the damage of one photo; a --ray batch takes the white strokes in each photo")
    bar = bar_type(0)
    said: set[str] = set()  # the notes printed so far: each once per run, as a folder's run says them

    def on_record(rec: dict[str, Any], done: int, total: int) -> None:
        bar.total = total
        if args.json:
            print(json.dumps(rec), flush=True)
            return
        if rec["status"] == "error":
            print(f"\nerror: {rec['input']}: {rec['error']}", file=sys.stderr)
        else:
            say_record(rec, said, bar.say)
        bar.step(Path(rec["input"]).name)

    config = BatchConfig(source=args.inputs[0], output=Path(args.output), options=options, ray=ray_settings(args),
                         overwrite=args.overwrite)
    summary = run_batch(config, on_record)
    if not args.json:
        print(f"{summary.count('ok')} restored, {summary.count('error')} failed, {summary.count('skipped')} skipped in "
              f"{summary.seconds:.0f} s with {summary.workers} Ray worker(s) at {summary.cpus_per_worker:g} CPU each; "
              f"records appended to {summary.manifest} (run {summary.run_id})", file=sys.stderr)
    return summary.exit_code


def ray_settings(args: argparse.Namespace) -> RaySettings:
    """The Ray flags of ``restore … --ray``, for photos and a clip's segments alike."""
    return RaySettings(address=args.address, workers=args.workers, gpus_per_worker=args.gpus_per_worker,
                       device=args.device, models_dir=args.models_dir)


def add_serve(sub: Any) -> None:
    """Register ``python -m gpen_core serve`` (Ray is imported only when it runs)."""
    from gpen_core.modes import MODE_CHOICES

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


def serve(args: argparse.Namespace) -> int:
    """``serve``: deploy RestoreDeployment with Ray Serve and keep it up until Ctrl-C or SIGTERM (exit 0)."""
    from gpen_core.platform.meter import format_bytes
    from gpen_core.scaleout.runtime import import_ray
    from gpen_core.scaleout.serve import ServeConfig, run_serve

    import_ray()  # Ray missing: say how to install it

    if args.replicas != "auto" and not args.replicas.isdigit():
        raise InputError(f"--replicas must be a number or auto, got {args.replicas!r}")
    ray = RaySettings(address=args.address, workers=None if args.replicas == "auto" else int(args.replicas),
                      gpus_per_worker=args.num_gpus, device=args.device, models_dir=args.models_dir)
    config = ServeConfig(ray=ray, max_replicas=args.max_replicas, num_cpus=args.num_cpus, port=args.port,
                         warm_mode=args.mode)

    def ready(address: str, statuses: list[dict[str, Any]]) -> None:
        for st in statuses:
            warn = f"; warm-up failed, each request will say so: {st['warm_error']}" if st["warm_error"] else ""
            print(f"replica {st['replica']} ready: warm-up {st['warmup_s']} s, {format_bytes(st['rss_bytes'])} RSS{warn}",
                  file=sys.stderr)
        print(f"serving on Ray at {address}; start the app with: python app.py --backend ray --address {address}  "
              "(Ctrl-C stops)", flush=True)

    run_serve(config, ready)
    return 0
