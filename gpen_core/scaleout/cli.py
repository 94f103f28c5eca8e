"""The Ray and segment front ends of ``python -m gpen_core``: ``restore … --ray`` on photos, ``restore clip.mp4 -o
out.mp4 --segments [--segment-seconds N] [--fresh] [--ray [--address A]]`` (:func:`gpen_core.video.resumable.
restore_in_segments`, with this process or Ray workers) and ``serve``; arguments in, an exit code out."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.errors import GPENError, InputError
from gpen_core.scaleout.runtime import RaySettings
from gpen_core.video.errors import VideoStopped
from gpen_core.video.segments import finished_segments

if TYPE_CHECKING:
    from gpen_core.options import RestoreOptions


def restore_ray(args: argparse.Namespace, bar_type: Any, options: RestoreOptions, say_record: Any) -> int:
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
    from gpen_core.platform.paths import HELP as MODELS_DIR_HELP

    s = sub.add_parser("serve", help="serve restores with Ray Serve (for app.py --backend ray); needs requirements-ray.txt")
    s.add_argument("--replicas", default="1", help="replicas: a number, or auto (autoscale from 1 to --max-replicas)")
    s.add_argument("--max-replicas", type=int, default=4, help="with --replicas auto: the most replicas (default 4)")
    s.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica (0.5: two replicas share a GPU; default 0)")
    s.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica; torch uses as many threads (default 1)")
    s.add_argument("--address", help="deploy on this Ray cluster (auto, HOST:PORT); default: a local Ray on 127.0.0.1 only")
    s.add_argument("--port", type=int, default=8000, help="Serve's HTTP port on 127.0.0.1 (POST an image to /restore; default 8000)")
    s.add_argument("--mode", default="auto", choices=MODE_CHOICES, help="mode warmed up in each replica (requests may ask for any)")
    s.add_argument("--models-dir", help=MODELS_DIR_HELP)
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


def add_segment_arguments(r: argparse.ArgumentParser) -> None:
    """The ``restore`` flags for segments (``--ray`` and ``--address`` are the photo batch's, shared)."""
    from gpen_core.video.segments import DEFAULT_SEGMENT_SECONDS

    g = r.add_mutually_exclusive_group()
    g.add_argument("--segments", dest="segments", action="store_true", default=None,
                   help="video: restore in segments cut at keyframes; a killed run resumes with the same command "
                        f"(default for clips of {_segments_from()} or more; docs/video-segments.md)")
    g.add_argument("--no-segments", dest="segments", action="store_false", help="video: one pass, however long")
    r.add_argument("--segment-seconds", type=float,
                   help=f"with segments: their length in seconds (default {DEFAULT_SEGMENT_SECONDS:g})")
    r.add_argument("--fresh", action="store_true", help="with segments: drop an earlier run's segments and start over")


def _segments_from() -> str:
    """The clip length from which segments are the default (video.resumable.SEGMENTS_FROM_S), in words."""
    from gpen_core.video.resumable import SEGMENTS_FROM_S

    return f"{SEGMENTS_FROM_S / 60:g} minutes"


def local_videos(items: Sequence[str]) -> list[Path]:
    """``--ray`` on local video files: those files, whose segments go to Ray workers, each head read once; else []
    (a folder, URI or photo among them: a photo batch)."""
    from gpen_core.images.limits import sniff_file

    paths = [Path(i) for i in items]
    return paths if all(p.is_file() and sniff_file(p) for p in paths) else []


def restore_if_segmented(args: argparse.Namespace, src: Path, dst: Path, local: Any,
                         emit: Callable[[dict[str, Any]], None], run_notes: Sequence[str] = ()) -> bool:
    """Restore ``src`` in segments when :func:`wants_segments`, emit its record and print its summary; False: not segmented.
    ``local``: the :class:`~gpen_core.video.resumable.LocalRunner` (restorer, options, crf) the run restores with.
    ``run_notes``: what the run did before its first frame (a conversion), first among the clip's notes as in one pass."""
    from gpen_core.video.command import VideoBar

    if not wants_segments(args, src):
        return False
    result = restore_segmented(args, src, dst, local, VideoBar(src.name))
    if getattr(args, "json", False):  # a segment's frames are restored apart (a Ray worker's, or kept from a run before)
        run_notes = (*run_notes, "--json in segments: a line per segment, then this summary; the per-frame lines "
                     "(faces, boxes, landmarks) come from one pass only: add --no-segments for them")
    if run_notes:
        result = replace(result, notes=(*run_notes, *result.notes))
    emit({"input": str(src), "status": "ok", "output": str(dst), "video": result.to_json()})
    print_segmented(src, result, json_records=bool(getattr(args, "json", False)))
    return True


def wants_segments(args: argparse.Namespace, src: Path) -> bool:
    """Segments when asked (:func:`segments_asked`), else for clips of SEGMENTS_FROM_S or more, said (unasked)."""
    from gpen_core.video.resumable import SEGMENTS_FROM_S

    asked = segments_asked(args)
    if asked is not None:
        return asked
    length = _duration(src) or 0.0
    if length >= SEGMENTS_FROM_S:
        print(f"{src.name}: {length:.0f} s long, so restored in segments that resume after a stop (clips of "
              f"{_segments_from()} or more are; --no-segments for one pass)", file=sys.stderr)
    return length >= SEGMENTS_FROM_S


def segments_asked(args: argparse.Namespace) -> bool | None:
    """True: segments asked (``--segments``, ``--ray`` on a video, or a segment's own flag: ``--segment-seconds``,
    ``--fresh``); False: one pass (``--no-segments``, a trim, ``--tracks``); None: by the clip's length.
    InputError, before any model loads, where these meet: a flag is never dropped."""
    asked, seconds = getattr(args, "segments", None), getattr(args, "segment_seconds", None)
    if seconds is not None and not seconds > 0:
        raise InputError(f"--segment-seconds must be more than 0, got {seconds:g}")
    own = [f for f, on in (("--segment-seconds", seconds is not None),
                           ("--fresh", getattr(args, "fresh", False))) if on]
    # face numbers count across one pass; each segment would number its faces afresh
    one_pass = [f for f, on in (("--start", args.start is not None), ("--end", args.end is not None),
                                ("--tracks", getattr(args, "tracks", None) is not None)) if on]
    if asked is False:
        if args.ray:
            raise InputError("--ray restores a video in segments on Ray workers; leave out --no-segments, or --ray")
        if own:
            raise InputError(f"{' and '.join(own)} {'is' if len(own) == 1 else 'are'} for segments, and --no-segments "
                             "asks for one pass: leave out one or the other")
        return False
    wanted = [f for f, on in (("--segments", asked), ("--ray", args.ray)) if on] + own
    if wanted and one_pass:
        one = len(one_pass) == 1
        raise InputError(f"{' and '.join(wanted)} {'is' if len(wanted) == 1 else 'are'} for a whole clip in segments, and "
                         f"{' and '.join(one_pass)} {'restores' if one else 'restore'} in one pass: leave out one or the other")
    return True if wanted else False if one_pass else None


def _duration(src: Path) -> float | None:
    from gpen_core.video.probe import open_video

    c, info = open_video(src)
    c.close()
    return info.duration_s


def restore_segmented(args: argparse.Namespace, src: Path, dst: Path, local: Any,
                      progress: Callable[[int, int], None]) -> Any:
    """One video in segments, resuming an interrupted run: its SegmentedResult. ``local``: the LocalRunner; with
    ``--ray``, its options and crf go to Ray workers, a manifest.jsonl line per segment; ``--json``: a line per
    segment. Ctrl-C: VideoStopped saying how to resume."""
    from gpen_core.scaleout.video_ray import WorkerDied
    from gpen_core.video.output import WriteFailed
    from gpen_core.video.resumable import restore_in_segments, segment_record, settings_text
    from gpen_core.video.segments import DEFAULT_SEGMENT_SECONDS, work_folder

    seconds = args.segment_seconds if args.segment_seconds is not None else DEFAULT_SEGMENT_SECONDS
    runner: Any
    if args.ray:  # the cluster at --address was joined before the engine loaded (gpen_core.cli)
        from gpen_core.scaleout.batch import appended_manifest
        from gpen_core.scaleout.video_ray import RayRunner

        runner, manifest = RayRunner(local.options, local.crf, ray_settings(args)), appended_manifest(dst.parent)
    else:
        runner, manifest = local, nullcontext((None, ""))

    try:
        with manifest as (append, _):

            def on_record(rec: Any) -> None:
                if append is not None:
                    append(segment_record(str(src), rec))
                if args.json:
                    print(json.dumps(segment_record(str(src), rec)), flush=True)

            return restore_in_segments(src, dst, runner, settings_text(local.options, local.crf),
                                       segment_seconds=seconds,
                                       fresh=args.fresh, progress=progress, on_record=on_record,
                                       audio=not getattr(args, "no_audio", False))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it for both)
        raise VideoStopped(f"stopped: {kept_segments(work_folder(dst))} (add --fresh to start over)") from None
    except GPENError as exc:
        # The disk or a worker failed, not the input: the same command resumes. Otherwise (a weight, an option,
        # the input) what finished waits for the fixed command.
        again, folder = isinstance(exc, (WriteFailed, WorkerDied)), work_folder(dst)
        if again or finished_segments(folder):
            kept = (kept_segments(folder) if again
                    else kept_segments(folder, then="once that is fixed, the same command resumes"))
            exc.args = (f"{str(exc).rstrip('.')}. {kept[0].upper()}{kept[1:]}",)
        raise


def kept_segments(folder: Path, then: str = "run the same command again to resume") -> str:
    """What a stopped or failed segmented run keeps, counted, and ``then``, what to do when some are."""
    if not folder.is_dir():
        return "nothing was written yet; run the same command again to start"
    done = finished_segments(folder)
    if done:
        return f"the {done} finished segment{'s are' if done != 1 else ' is'} kept in {folder}; {then}"
    return f"no segment had finished; run the same command again to start ({folder} holds its plan)"


def print_segmented(src: Path, r: Any, json_records: bool = False) -> None:
    """The human summary of a clip restored in segments, where a whole clip's goes."""
    from gpen_core.video.command import print_video

    kept = f", {r.segments_kept} kept from an earlier run" if r.segments_kept else ""
    print_video(src, r, json_records, f"; {r.segments} segment{'s' * (r.segments != 1)}{kept}, {r.total_s:.1f} s (join {r.join_s:.1f} s)")
