"""``python -m gpen_core``: the parser, dispatch and exit codes; ``restore`` and ``export`` are here, the other
subcommands in their rooms' command modules.

Exit codes: 0 success (a photo with no face too, with a note), 2 bad usage or input, 3 missing or corrupt weights,
4 out of memory, 5 a damaged video (the frames before the damage kept), 130 Ctrl-C and 143 SIGTERM (a partial video
removed); ``selfcheck``: 1 when a network fails the check.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpen_core.errors import GPENError, InputError
from gpen_core.images.limits import DEFAULT_LIMITS, IMAGE_SUFFIXES, MISSING, input_limits, not_a_file, not_a_photo, sniff_file
from gpen_core.images.outputs import (check_result_paths, check_writable, existing_result, folder_inputs, format_for,
                                     once_each, one_file_for_several, output_stems, result_path, write_atomic)
from gpen_core.platform.paths import HELP as MODELS_DIR_HELP
from gpen_core.cli_words import (MAX_MEGAPIXELS_HELP, ProgressLine, RunSummary, add_face_arguments, convert_before_clips,
                                 convert_before_photos, megapixels, print_error, with_run_notes)
from gpen_core.result_json import NOT_REPLACED, passed_over_record, result_record

DETECTORS = {"resnet50": "resnet50", "mobilenet": "mobilenet0.25"}  # --detector's words → the detector names


def _parser() -> argparse.ArgumentParser:
    from gpen_core.hwcheck.command import add_info, add_profile, add_selfcheck
    from gpen_core.cli_words import add_download
    from gpen_core.scaleout.cli import add_serve

    p = argparse.ArgumentParser(prog="python -m gpen_core", description="GPEN blind face restoration that measures what it costs.")
    p.add_argument("-v", "--verbose", action="store_true", help="print error details (every place looked, each attempt)")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_restore, add_download, add_serve, add_info, add_selfcheck, _add_export, add_profile):
        add(sub)
    # ``restore … -v`` as well as ``-v restore …``; SUPPRESS: without a -v after the command, the one before stands
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def _add_restore(sub: Any) -> None:
    from gpen_core.modes import MODE_CHOICES, TASK_CHOICES
    from gpen_core.scaleout.cli import add_segment_arguments
    from gpen_core.video.command import add_video_arguments

    r = sub.add_parser("restore", help="restore the faces in photos and videos")
    r.add_argument("inputs", nargs="+", metavar="INPUT", help="image or video files, or folders of them")
    r.add_argument("-o", "--output", required=True, help="output file (one input; png/jpeg by extension, .mp4 for a video) or folder")
    r.add_argument("--mode", default="auto", choices=MODE_CHOICES, help="memory mode (default: auto)")
    r.add_argument("--model", help="generator: registry name (GPEN-BFR-1024) or path to any GPEN checkpoint")
    r.add_argument("--detector", choices=tuple(DETECTORS), help="override the mode's face detector")
    r.add_argument("--models-dir", help=MODELS_DIR_HELP)
    r.add_argument("--device", help="cpu or cuda (default: cuda when available; with --ray: with --gpus-per-worker)")
    r.add_argument("--aligned", action="store_true", help="inputs are already aligned face crops")
    r.add_argument("--task", default="enhance", choices=TASK_CHOICES,
                   help="enhance (restore faces, default), colorize (grey faces), inpaint (white = damaged), "
                        "seg2face (aligned colour label maps); docs/tasks.md")
    r.add_argument("--mask", help="with --task inpaint and one input: the damage, white on black at the photo's size "
                                  "(default: white strokes in the photo itself)")
    add_face_arguments(r)
    r.add_argument("--overwrite", action="store_true", help="replace outputs that already exist (default: skip them)")
    r.add_argument("--max-megapixels", dest="max_pixels", type=megapixels, metavar="N", help=MAX_MEGAPIXELS_HELP)
    r.add_argument("--json", action="store_true", help="one JSON object per image on stdout (a video: one per frame, then a summary)")
    add_video_arguments(r)
    add_segment_arguments(r)
    r.add_argument("--ray", action="store_true",
                   help="restore with Ray Data (one folder, file or URI such as s3://…; writes OUT/manifest.jsonl); "
                   "needs requirements-ray.txt")
    r.add_argument("--address", help="with --ray: join this Ray cluster (auto, HOST:PORT, ray://HOST:PORT); "
                   "default: a local Ray on 127.0.0.1 only, stopped at the end")
    r.add_argument("--workers", type=int, help="with --ray: actors in the pool (default: one per GPU share, else one per 2 CPUs)")
    r.add_argument("--gpus-per-worker", type=float, default=0.0, help="with --ray: GPUs per actor (0.5: two per GPU; default 0)")


def _add_export(sub: Any) -> None:
    e = sub.add_parser("export", help="write a GPEN generator as ONNX (or OpenVINO IR) for other tools, checked after writing")
    e.add_argument("model", metavar="MODEL", help="registry generator name (GPEN-BFR-512) or path to a GPEN checkpoint")
    e.add_argument("-o", "--output", required=True, help="the file to write: FILE.onnx, or FILE.xml with --format openvino")
    e.add_argument("--format", choices=("onnx", "openvino"), default="onnx", help="onnx (default; opset 17) or openvino (IR)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing output (default: refuse it)")
    e.add_argument("--models-dir", help=MODELS_DIR_HELP)


def main(argv: Sequence[str] | None = None) -> int:
    from gpen_core.platform.stop_signals import SIGTERM_EXIT, sigterm_as_interrupt

    with sigterm_as_interrupt() as stop:  # a plain kill cleans up as Ctrl-C does
        code = _main(argv)
    return SIGTERM_EXIT if stop.is_set() and code == 130 else code


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except (ImportError, MemoryError) as exc:  # under a memory cap even the parser's imports can fail
        return _startup_failure(exc, verbose=False)
    try:
        from gpen_core.hwcheck.command import info, profile, selfcheck  # the parser imported these modules
        from gpen_core.cli_words import download
        from gpen_core.scaleout.cli import serve

        commands = {"restore": _restore, "download": download, "info": info, "serve": serve, "export": _export,
                    "selfcheck": selfcheck, "profile": profile}
        return commands[args.command](args)
    except GPENError as exc:
        print_error(exc, args.verbose)
        return exc.exit_code
    except (ImportError, MemoryError) as exc:  # a lazy import under a memory cap, or a broken install
        return _startup_failure(exc, args.verbose)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _export(args: argparse.Namespace) -> int:
    """``export``: gpen_core/runtimes/openvino/onnx_export.py; docs/export.md."""
    from gpen_core.runtimes.openvino.onnx_export import export_generator

    print(export_generator(args.model, args.output, fmt=args.format, models_dir=args.models_dir, overwrite=args.overwrite,
                           progress=lambda m: print(m, file=sys.stderr, flush=True)).summary())
    return 0


def _startup_failure(exc: BaseException, verbose: bool) -> int:
    """Exit 4 with what the engine needs when an import ran out of memory; else how to repair the install."""
    from gpen_core.errors import OutOfMemory
    from gpen_core.platform.oom import import_failure

    err = import_failure(exc) if isinstance(exc, ImportError) else None
    if err is None:
        err = OutOfMemory("out of memory outside a restore (MemoryError). Close other programs or raise this "
                          "process's memory limit, and try again.")
    if not isinstance(err, GPENError):
        raise exc
    print_error(err, verbose)
    return err.exit_code


def _load_engine() -> None:
    """Import PyTorch, OpenCV and facexlib now, so a memory cap fails here with what they need (exit 4)."""
    from gpen_core.platform.engine_probe import probe_engine_import
    from gpen_core.platform.oom import import_failure, memory_limited

    if memory_limited():  # under a cap the import can crash the process: try it in a child first
        problem = probe_engine_import()
        if problem is not None:
            raise problem
    try:
        from gpen_core.engine.pipeline import import_engine

        import_engine()
    except (ImportError, MemoryError, OSError, SystemError) as exc:
        raise import_failure(exc) from None


# ----------------------------------------------------------------- restore


def _collect_inputs(items: Sequence[str], output: str) -> tuple[list[Path], list[tuple[str, str]]]:
    """(the photos and videos to restore, (path, why) for each entry of a folder skipped: images.outputs.folder_inputs)."""
    paths: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found, skips = folder_inputs(p, Path(output))
            paths += found
            skipped += [(str(q), why) for q, why in skips]
        elif p.is_file():
            paths.append(p)
        else:
            why = not_a_file(p)
            raise InputError(f"input {p} does not exist" if why == MISSING else f"input {p} is {why}")
    kept, repeats = once_each(paths)  # a folder and a file in it, or a glob that meets itself
    return kept, skipped + [(str(p), "the same file as an input before it") for p in repeats]


def _plan_outputs(inputs: list[Path], output: str) -> list[tuple[Path, Path, str | None]]:
    """(input, output, format override) per input; format None = the mode's, and the output a name in a folder
    that gets the format's suffix once restored (images.outputs.result_paths)."""
    from gpen_core.video.output import VIDEO_SUFFIXES

    out = Path(output)
    if out.suffix.lower() in VIDEO_SUFFIXES and not out.is_dir():  # else a folder named x.mp4 would be made
        if odd := next(((p, what) for p in inputs if (what := not_a_photo(p))), None):  # a clip whose start is gone
            raise InputError(f"{odd[0].name} is neither a video nor a photo this can read ({odd[1]}): if it is a video, it "
                             "is damaged or its start is missing. Re-export or re-download it and try again")
        raise InputError(f"{out.name} names a video, but {'these inputs are photos' if len(inputs) > 1 else f'{inputs[0].name} is a photo'} "
                         f"(a GIF is restored as a still): name the output {out.with_suffix('.png').name}, or a folder")
    # One photo's out.jxl names a file: never a folder made for it (as for a clip). Several photos need a folder,
    # so results.2024 is made as one, unless it names an image or a file already has its name.
    as_folder = len(inputs) > 1 and out.suffix.lower() not in IMAGE_SUFFIXES and not out.exists()
    if out.suffix and not out.is_dir() and not as_folder:
        if len(inputs) > 1 and out.suffix.lower() in IMAGE_SUFFIXES:
            raise one_file_for_several(0, len(inputs), out)
        return [(inputs[0], out, format_for(out))]
    # Unique per input (same.jpg and same.png → same_jpg, same_png); suffix added once the format is known.
    return [(p, out / stem, None) for p, stem in zip(inputs, output_stems([p.name for p in inputs]))]


def _restore(args: argparse.Namespace) -> int:
    from gpen_core.scaleout.cli import local_videos

    _no_unused_flags(args)
    clips = local_videos(args.inputs) if args.ray else []  # told by their bytes once
    if args.ray and not clips:
        from gpen_core.scaleout.cli import restore_ray

        _no_clip_flags(args, args.inputs[0] if len(args.inputs) == 1 else "the inputs")
        return restore_ray(args, ProgressLine, _options(args), say_record)
    inputs, not_files = _collect_inputs(args.inputs, args.output)
    for path, why in not_files:  # said when found, before any clip (hours) or photo: a run of clips says it too
        _emit(args, passed_over_record(path, why))
        print(f"skipped: {path}: {why}", file=sys.stderr, flush=True)
    videos = clips or [p for p in inputs if sniff_file(p)]  # told apart by their bytes, whatever the extension
    inputs = [p for p in inputs if p not in videos]
    if not videos and inputs:
        _no_clip_flags(args, inputs[0].name)
    plan: list[tuple[Path, Path, str | None]] = []

    def plan_photos() -> None:  # with clips too, before the first clip's engine loads: never after hours of video
        if args.mask is not None and (len(inputs) != 1 or args.task != "inpaint"):
            raise InputError("--mask is the damage of one photo: use it with --task inpaint and a single input")
        _options(args).validated()  # bad options: before any work
        plan.extend(_plan_outputs(inputs, args.output))
        check_writable([dst for _, dst, _ in plan])  # bad output paths fail now (exit 2), not after the restore
        check_result_paths(plan)  # a folder in the way, or the input itself (the same rule as --ray and videos)

    worst = _restore_videos(args, videos, len(inputs), plan_photos if inputs else None) if videos else 0
    if not inputs:
        return worst
    if not videos:
        plan_photos()
    mask = _read_mask(args.mask, _options(args).max_pixels) if args.mask is not None else None
    _load_engine()  # under a memory cap: exit 4 saying what the engine needs, never a traceback

    from gpen_core.engine.lifetime import Lifetime
    from gpen_core.restorer import Restorer

    # One photo: the process ends after it, so each network is dropped once its stage is done
    # (a lower peak); several photos keep them loaded from one to the next.
    restorer = Restorer(models_dir=args.models_dir, device=args.device, lifetime=Lifetime.ONE_SHOT if len(plan) == 1 else Lifetime.RESIDENT)
    _ = restorer.device  # an unknown or absent device: exit 2 once, before any photo
    bar, summary = ProgressLine(len(plan)), RunSummary()
    said: set[str] = set()  # the notes printed so far: each once per run
    args.run_notes = convert_before_photos(args, [src for src, _, _ in plan], bar.say).notes
    summary.skipped += not_files
    for src, dst, fmt in plan:
        record = _restore_one(args, restorer, (src, dst, fmt), mask, bar, said)
        summary.add(record)
        worst = worst or int(record.get("exit_code", 0))
        bar.step(src.name)
    if len(plan) + len(not_files) > 1:
        for line in summary.lines():  # with --json, stdout holds only the records
            bar.say(line, sys.stderr if args.json else sys.stdout)
    return worst


def _no_clip_flags(args: argparse.Namespace, photo: str) -> None:
    """InputError for a clip's flags in a run of photos only (``photo`` names them): a photo's options have no place for them."""
    segments = getattr(args, "segments", None)
    asked = {"--start": args.start is not None, "--end": args.end is not None,
             "--tracks": getattr(args, "tracks", None) is not None, "--no-audio": args.no_audio,
             "--segments": segments is True, "--no-segments": segments is False,
             "--segment-seconds": getattr(args, "segment_seconds", None) is not None,
             "--fresh": getattr(args, "fresh", False), "--crf": args.crf is not None,
             "--identity-every": args.identity_every is not None}
    _refuse_flags(asked, f"for videos, and there is no video to restore ({photo}: photos only)")


def _no_unused_flags(args: argparse.Namespace) -> None:
    """InputError for flags this run would drop (None in argparse: not typed; _options fills the defaults); a blend
    without a limit is RestoreOptions' to refuse."""
    if not args.ray:
        _refuse_flags({"--address": args.address is not None, "--workers": args.workers is not None,
                       "--gpus-per-worker": bool(args.gpus_per_worker)}, "for --ray runs", ", or add --ray")
    if args.aligned:
        _refuse_flags({"--detector": args.detector is not None, "--orientations": args.orientations,
                       "--no-face-check": not args.face_check, "--threshold": args.threshold is not None,
                       "--max-faces": args.max_faces is not None},
                      "for finding faces, and --aligned restores each input as one face crop without looking for faces",
                      ", or drop --aligned")


def _refuse_flags(flags: dict[str, bool], why: str, fix: str = "") -> None:
    """InputError naming the flags asked (True in ``flags``) and ``why`` they have no place in this run."""
    asked = [flag for flag, on in flags.items() if on]
    if asked:
        one = len(asked) == 1
        raise InputError(f"{' and '.join(asked)} {'is' if one else 'are'} {why}: leave {'it' if one else 'them'} out{fix}")


def _options(args: argparse.Namespace, **only: Any) -> Any:
    """The RestoreOptions of ``args``; ``only``: what a photo (output_format) or a clip (identity_every) alone takes."""
    from gpen_core.options import RestoreOptions

    return RestoreOptions(mode=args.mode, model=args.model, alpha=args.alpha,  # type: ignore[arg-type]
                          detector=DETECTORS.get(args.detector),
                          threshold=RestoreOptions.threshold if args.threshold is None else args.threshold,
                          max_faces=RestoreOptions.max_faces if args.max_faces is None else args.max_faces,
                          face_check=args.face_check, upscale=args.upscale, upscaler=args.upscaler, tile=args.tile,
                          backend=args.backend, task=args.task, identity=args.identity,
                          identity_limit=args.identity_limit, identity_alpha=args.identity_alpha, aligned=args.aligned,
                          orientations=args.orientations,
                          max_pixels=DEFAULT_LIMITS.max_pixels if args.max_pixels is None else args.max_pixels, **only)


def _restore_one(args: argparse.Namespace, restorer: Any, photo: tuple[Path, Path, str | None], mask: Any, bar: Any,
                 said: set[str]) -> dict[str, Any]:
    """Restore one ``photo`` (input, output, format: a plan entry) and say so: its record (ok, error with ``exit_code``, or skipped)."""
    src, dst, fmt = photo
    existing = None if args.overwrite else existing_result(dst, fmt)
    if existing is not None:
        return _skipped(args, src, existing, bar.say, said)
    record: dict[str, Any] = {"input": str(src)}
    try:
        result = restorer(src, _options(args, output_format=fmt), mask=mask)
        dst = result_path(dst, fmt, result.output_format)
        write_atomic(dst, result.encoded)  # InputError when the disk filled up, the folder went away...
    except GPENError as exc:
        record.update(status="error", error=str(exc), exit_code=exc.exit_code)
        _emit(args, record)
        if not args.json:
            print_error(exc, args.verbose, prefix=f"{src}: ", say=bar.say)
        return record
    record.update(status="ok", output=str(dst), **result_record(result))
    record["notes"] = [*getattr(args, "run_notes", []), *record["notes"]]  # what the run did before its first photo
    _emit(args, record)
    if not args.json:
        say_record(record, said, bar.say)
    return record


def say_record(record: dict[str, Any], said: set[str], say: Any) -> None:
    """What a run without --json prints for a photo's ``ok`` or ``skipped`` record (a folder's, and --ray's): its
    line, then each of its notes not yet ``said`` this run. ``say(text, stream=stderr)``: the progress bar's."""
    if record["status"] == "skipped" and "output" in record:  # its output already there: a resumed run has many
        say(f"skipped: {record['input']}: {record['output']} is already there")
        _say_once(f"an output already there {NOT_REPLACED}", said, say)
        return
    if record["status"] == "skipped":  # a file neither a photo nor a video, or a folder
        say(f"skipped: {record['input']}: {record['note']}")
        return
    say(_result_line(record), sys.stdout)
    for note in [*_auto_choice(record, said), *record["notes"]]:
        _say_once(note, said, say)


def _say_once(note: str, said: set[str], say: Any) -> None:
    if note not in said:
        said.add(note)
        say(f"  note: {note}")


def _auto_choice(record: dict[str, Any], said: set[str]) -> list[str]:
    """``auto``'s choice and why (the app's Mode row; the engine keeps it out of the notes), once a run for each mode
    chosen: its free-memory figure changes from photo to photo, the choice and a warning do not."""
    reason, chosen = record["mode_reason"], f"auto's choice: {record['mode']}"
    if record["requested_mode"] == record["mode"] or not reason or reason in record["notes"] or chosen in said:
        return []
    said.add(chosen)
    return [reason]


def _read_mask(path: str, max_pixels: int) -> Any:
    """``--mask``, decoded here so that its errors name it (the photo's name the photo): RGB uint8 H×W×3."""
    from gpen_core.images.decode import decode_image

    why = not_a_file(Path(path))
    if why is not None:
        raise InputError(f"the mask {path} " + ("does not exist" if why == MISSING else f"is {why}"))
    try:
        return decode_image(path, input_limits(max_pixels)).rgb
    except InputError as exc:
        raise InputError(f"the mask {path}: {exc}") from None


def _skipped(args: argparse.Namespace, src: Path, existing: Path, say: Any, said: set[str]) -> dict[str, Any]:
    """The record of an input whose output is already there (no --overwrite), said on stderr (why, once a run)."""
    from gpen_core.result_json import skipped_record

    record = skipped_record(str(src), existing)
    _emit(args, record)
    say_record(record, said, say)
    return record


def _emit(args: argparse.Namespace, record: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(record), flush=True)


def _result_line(rec: dict[str, Any]) -> str:
    from gpen_core.platform.meter import format_bytes, peak_vram_text
    from gpen_core.cli_words import identity_text

    pk = rec["peaks"]
    return (f"{rec['input']} -> {rec['output']}: {rec['faces']} face(s), mode {rec['mode']}, {rec['timings']['total_s']:.2f}s, "
            f"peak RAM {format_bytes(pk['rss_bytes'])}{peak_vram_text(pk['vram_reserved_bytes'])}{identity_text(rec)}")


# ------------------------------------------------------------------ video


def _restore_videos(args: argparse.Namespace, videos: list[Path], photos: int, plan_photos: Callable[[], None] | None) -> int:
    """Each video streamed through one Restorer (networks resident); exit 5 when one was damaged. ``plan_photos``:
    the run's photos' outputs planned and checked once the videos' are, before any model loads."""
    from gpen_core.restorer import Restorer
    from gpen_core.scaleout.runtime import connect
    from gpen_core.scaleout.cli import restore_if_segmented, segments_asked
    from gpen_core.video.command import VideoBar, face_numbers, plan_video_outputs, print_video, remove_if_unused
    from gpen_core.video.errors import VideoStopped
    from gpen_core.video.resumable import LocalRunner
    from gpen_core.video.stream import VideoOptions, restore_video

    _refuse_flags({"--aligned": args.aligned, "--mask": args.mask is not None},  # never dropped
                  f"for photos, and {videos[0].name} is a video (its frames are whole pictures, turned upright by the "
                  "file's own rotation)", ", or restore the photos in a run of their own")
    if not photos:  # a frame's limit is the video's own (gpen_core.video.limits)
        _refuse_flags({"--max-megapixels": args.max_pixels is not None}, f"for photos, and there is no photo to restore "
                      f"({videos[0].name}: videos only)")
    made = not Path(args.output).exists()  # a folder this run makes for the clips is removed again if none is written
    plan = plan_video_outputs(videos, args.output, photos)
    crf = VideoOptions.crf if args.crf is None else args.crf  # None in argparse: _no_clip_flags tells it typed
    vopts = VideoOptions(crf=crf, start_s=args.start, end_s=args.end, audio=not args.no_audio,
                         tracks=face_numbers(getattr(args, "tracks", None))).validated()
    segments_asked(args)  # segment flags that cannot apply are refused now, not once the engine has loaded
    every = 1 if args.identity_every is None else args.identity_every
    opts = _options(args, identity_every=every).for_clip()  # likewise what a clip cannot take
    if plan_photos is not None:
        plan_photos()
    if args.ray and args.address:
        connect(args.address)  # a wrong address fails in seconds, before the engine loads
    _load_engine()
    restorer = Restorer(models_dir=args.models_dir, device=args.device)
    local = LocalRunner(restorer, opts, vopts.crf)  # a clip in segments, here; --ray: its options and crf
    say = functools.partial(print, file=sys.stderr)
    first = convert_before_clips(args, [src for src, _ in plan], say)
    on_frame = (lambda rec: print(json.dumps(rec.to_json()), flush=True)) if args.json else None
    worst, said = 0, set[str]()
    for src, dst in plan:
        if dst.exists() and not args.overwrite:
            _skipped(args, src, dst, say, said)
            continue
        record: dict[str, Any] = {"input": str(src)}
        try:
            # long or asked: in segments
            if restore_if_segmented(args, src, dst, local, lambda rec: _emit(args, rec), first.notes):
                continue
            result = restore_video(src, dst, restorer, opts, vopts, progress=VideoBar(src.name), on_frame=on_frame)
        except (KeyboardInterrupt, VideoStopped) as exc:  # Ctrl-C or SIGTERM ends the run, not only this clip
            stop = exc if isinstance(exc, VideoStopped) else VideoStopped(
                "stopped: the partial output was removed (in --segments a stopped clip resumes where it stopped)")
            sys.stderr.write("\n")
            _emit(args, {**record, "status": "error", "error": str(stop), "exit_code": stop.exit_code})
            print_error(stop, args.verbose, prefix=f"{src}: ")
            remove_if_unused(Path(args.output), made)
            return stop.exit_code
        except GPENError as exc:
            sys.stderr.write("\n")
            record.update(status="error", error=str(exc), exit_code=exc.exit_code)
            _emit(args, record)
            print_error(exc, args.verbose, prefix=f"{src}: ")
            worst = worst or exc.exit_code
            continue
        result, code = with_run_notes(result, first), 5 if result.damage is not None else 0
        record.update(status="damaged" if code else "ok", output=str(dst), video=result.to_json())
        _emit(args, record)
        print_video(src, result, json_records=args.json)
        worst = worst or code
    remove_if_unused(Path(args.output), made)
    return worst
