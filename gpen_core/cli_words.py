"""What ``python -m gpen_core restore`` and ``download`` print (results on stdout; progress, one :class:`StatusLine`,
and errors on stderr) and the flags whose words these are, and the OpenVINO conversion a long run does first from the
header figures (a clip's frames, a photo's size) the app's tabs read too. No numpy at import: ``--help`` stays quick."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from gpen_core.engine.convert_first import ConvertFirst, Run, convert_before
from gpen_core.errors import GPENError, InputError, ResourceError, megabytes
from gpen_core.images.limits import DEFAULT_LIMITS
from gpen_core.modes import IDENTITY_THRESHOLD_TEXT, PILLOW_MAX_PIXELS
from gpen_core.platform.paths import HELP as MODELS_DIR_HELP

DEFAULT_DOWNLOADS = ("GPEN-BFR-512", "GPEN-BFR-256", "retinaface-mobilenet0.25", "retinaface-resnet50", "ParseNet-latest")


def print_error(exc: GPENError, verbose: bool, prefix: str = "", say: Callable[[str], None] | None = None) -> None:
    """``error: …`` on stderr (or through ``say``), with ``-v`` the details; ``prefix`` ("FILE: ") left out when the
    message starts with that file."""
    say = say or (lambda line: print(line, file=sys.stderr))
    subject = prefix.rstrip().rstrip(":")
    say(f"error: {'' if subject and str(exc).startswith(subject) else prefix}{exc}")
    if verbose and exc.details:
        say(exc.details)


class StatusLine:
    """Progress on ``stream`` (stderr): in a terminal one line redrawn in place (:meth:`end` leaves it standing), in
    a log each new text on a line of its own."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream, self.drawn, self.last = stream or sys.stderr, "", ""
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or replaced stream
            self.tty = False

    def show(self, text: str) -> None:
        if text == self.last:
            return
        if self.tty:  # padded to the line it replaces: no tail of a longer one is left
            self.stream.write("\r" + text.ljust(len(self.drawn)))
            self.drawn = text
        else:
            self.stream.write(text + "\n")
        self.last = text
        self.stream.flush()

    def end(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = ""


class ProgressLine(StatusLine):
    """The run's progress: ``step(label)`` after each photo (a bar in a terminal, in a log a line per photo);
    nothing for one photo."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.total, self.t0, self.done = total, time.perf_counter(), 0

    def step(self, label: str) -> None:
        self.done += 1
        if self.total < 2:
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        if not self.tty:
            self.show(f"[{self.done}/{self.total}] {label}: {elapsed:.1f} s elapsed, ETA {eta:.1f} s")
            return
        bar = "#" * int(self.WIDTH * self.done / self.total)
        self.show(f"[{bar:<{self.WIDTH}}] {self.done}/{self.total} {elapsed:5.1f}s elapsed, ETA {eta:5.1f}s  {label[:40]:<40}")
        if self.done == self.total:  # the bar left on its own line once the last photo is done
            self.end()

    def say(self, text: str, out: TextIO | None = None) -> None:
        """Print ``text`` as its own line on ``out`` (default: the progress stream), the bar redrawn under it."""
        out = out or self.stream
        if self.drawn:
            self.stream.write("\r" + " " * len(self.drawn) + "\r")
            self.stream.flush()
        out.write(text + "\n")
        out.flush()
        if self.drawn:
            self.stream.write(self.drawn)
            self.stream.flush()


@dataclass
class RunSummary:
    """What a run over several photos did, from its records (``status`` ok / error / skipped)."""

    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    without_face: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (input, why)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (input, why)
    peak_rss: int = 0
    identities: list[dict[str, Any]] = field(default_factory=list)  # every measured face's identity record

    def add(self, record: dict[str, Any]) -> None:
        status = record.get("status")
        if status == "ok":
            self.done += 1
            self.identities += [f for f in (record.get("identity") or {}).get("faces", ()) if f]
            self.without_face += record.get("faces") == 0
            self.peak_rss = max(self.peak_rss, int((record.get("peaks") or {}).get("rss_bytes") or 0))
        elif status == "skipped":
            self.skipped.append((record["input"], record.get("note", "skipped")))
        else:
            self.failed.append((record["input"], record.get("error", "failed")))

    def lines(self) -> list[str]:
        from gpen_core.platform.meter import format_bytes  # here: numpy comes with it, and --help needs none

        total = self.done + len(self.failed) + len(self.skipped)
        faceless = f" ({self.without_face} without a face)" if self.without_face else ""
        peak = f"; peak RAM {format_bytes(self.peak_rss)}" if self.peak_rss else ""
        out = [f"summary: {total} files: {self.done} restored{faceless}, {len(self.failed)} failed, "
               f"{len(self.skipped)} skipped; {time.perf_counter() - self.started:.1f} s in all{peak}"]
        if self.identities:
            out.append(f"  identity:{identity_text({'identity': {'faces': self.identities}})[1:]}")
        out += [f"  failed: {path}: {why}" for path, why in self.failed]
        out += [f"  skipped: {path}: {why}" for path, why in self.skipped]
        return out


def identity_text(record: dict[str, Any]) -> str:
    """", identity distance up to 0.42 over 3 faces, 1 over 0.6 (dlib's own …), 1 kept original" from a record's
    ``identity``; "" when nothing was measured."""
    faces = [f for f in (record.get("identity") or {}).get("faces", ()) if f]
    if not faces:
        return ""
    over = sum(bool(f["over_threshold"]) for f in faces)
    acted = [f["action"] for f in faces if f["action"] != "restored"]
    text = (f", identity distance up to {max(f['distance'] for f in faces):.2f} over {len(faces)} face"
            f"{'s' if len(faces) > 1 else ''}, {over} over {IDENTITY_THRESHOLD_TEXT}")
    return text + "".join(f", {n} {action}" for action, n in Counter(acted).items())


# ------------------------------------------------------------------ restore's flags


_MP = DEFAULT_LIMITS.max_pixels // 10**6
MAX_MEGAPIXELS_HELP = (f"photos over N megapixels are refused (default {_MP}, which bounds the memory a restore takes; at "
                       f"most {PILLOW_MAX_PIXELS // 10**6}, Pillow's own limit); raised above {_MP}, a file may hold 8 bytes "
                       f"a pixel (a scan's TIFF), not only {megabytes(DEFAULT_LIMITS.max_file_bytes)}; docs/files-and-limits.md")


def megapixels(text: str) -> int:
    """``--max-megapixels N`` in pixels; ValueError (argparse's "invalid megapixels value", exit 2) for no finite number."""
    n = float(text)
    if not math.isfinite(n):
        raise ValueError(text)
    return round(n * 1e6)


def add_face_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of finding, restoring and pasting faces, and of upscaling the rest."""
    from gpen_core.options import BACKENDS, IDENTITY_CHOICES, MAX_FACES_HELP, UPSCALES, RestoreOptions

    r.add_argument("--alpha", type=float, default=1.0, help="blend: 1 restored only … 0 original (default 1)")
    r.add_argument("--threshold", type=float, help=f"face detection confidence (default {RestoreOptions.threshold})")
    r.add_argument("--max-faces", type=int, help=MAX_FACES_HELP)
    r.add_argument("--no-face-check", dest="face_check", action="store_false",
                   help="keep every detection above the threshold; the notes name those the face check would drop")
    r.add_argument("--orientations", action="store_true",
                   help="also search the photo turned 90/180/270° when upright faces were found (always done when none "
                   "are); a video's frames, upright by the file's rotation, are searched turned only with it")
    r.add_argument("--identity", default="auto", choices=IDENTITY_CHOICES,
                   help="measure how far each restored face moved from the input face (dlib's descriptor, requirements-"
                   "identity.txt): auto = every mode but low when installed, low too with --identity-limit or --identity-every "
                   "(default), on, off; on a video, per frame, and the frames where a face's identity jumped more than the "
                   "input's own (--identity-every N: every Nth frame)")
    r.add_argument("--identity-limit", type=float, metavar="DISTANCE",
                   help=f"over this identity distance keep the original face ({IDENTITY_THRESHOLD_TEXT}); "
                   "with --identity-alpha A, blend toward it instead")
    r.add_argument("--identity-alpha", type=float, default=0.0, metavar="A",
                   help="for a face over --identity-limit: A × restored + (1 − A) × original (default 0: the original)")
    r.add_argument("--upscale", type=int, default=1, choices=UPSCALES,
                   help="upscale the whole photo ×2 or ×4 with RealESRNet, faces restored at that size (default 1: off)")
    r.add_argument("--upscaler", help="upscaler: registry name (realesrnet_x2, realesrnet_x4) or checkpoint path "
                   "(default: realesrnet_x<upscale>)")
    r.add_argument("--tile", type=int, help="upscaler tile side in input px (default: the largest that fits the mode's budget)")
    r.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="generator runtime on the CPU: torch, openvino (converted on first use, cached in the models "
                   "folder), or auto: the one measured faster on this CPU (default)")


# ------------------------------------------------------------------ download


def add_download(sub: Any) -> None:
    d = sub.add_parser("download", help="download weights into the models folder")
    d.add_argument("names", nargs="*", metavar="NAME", help=f"registry names (default: {' '.join(DEFAULT_DOWNLOADS)})")
    d.add_argument("--models-dir", help=MODELS_DIR_HELP)
    d.add_argument("--no-convert", action="store_true",
                   help="do not convert for OpenVINO afterwards (by default, what `auto` runs on OpenVINO on this CPU is "
                        "converted now, so no restore waits for it)")


def download(args: argparse.Namespace) -> int:
    """Run ``download``: fetch weights (progress on stderr, paths on stdout), then convert for OpenVINO what ``auto``
    will run on it; 0 when every file is there (and converted), else the first failure's exit code."""
    from gpen_core.weights import lookup as weights

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


class DownloadProgress(StatusLine):
    """A download's progress: redrawn 5 times a second in a terminal; in a log, a line per tenth of the file (per
    10 MB when its size is unknown)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.at, self.step = name, 0.0, -1

    def __call__(self, done: int, total: int | None) -> None:
        from gpen_core.weights.missing import size_text

        pct = f"{100 * done / total:5.1f}%" if total else size_text(done, False)
        if self.tty:
            now = time.perf_counter()
            if now - self.at < 0.2 and (total is None or done < total):
                return
            self.at = now
        else:
            step = int(10 * done / total) if total else done // 10_000_000
            if step == self.step:
                return
            self.step = step
        self.show(f"{self.name}: {pct if self.tty else pct.strip()}")


def convert_ahead(models_dir: str | None) -> int:
    """The OpenVINO conversions ``auto`` will run, with progress: 0, or an exit code when a network could not be
    converted (each named, with why)."""
    from gpen_core.engine import prepare
    from gpen_core.runtimes.openvino.base import cache_root, unwritable_reason

    planned: list[str] = []
    line = StatusLine()

    def progress(f: float, m: str) -> None:
        if f < 1.0:  # the last word is the report's, below: "ready" would be wrong after a failure
            line.show(m)

    report = prepare.convert_ahead(models_dir=models_dir, progress=progress,
                                   on_plan=lambda todo: planned.extend(label for _, label in todo))
    line.end()
    unwritable = unwritable_reason(cache_root(models_dir)) if planned else None
    for text in report.lines():
        if not (unwritable and text.startswith("left on torch")):  # said once below instead
            print(f"openvino: {text}")
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


# ------------------------------------------------------------------ a long run converts first


def clip_frames(path: Path, start_s: float | None = None, end_s: float | None = None) -> tuple[int, tuple[int, int]]:
    """(frames from ``start_s`` to ``end_s`` by the header or the packets, an estimate (0: unknown); frame size);
    (0, (0, 0)) when it cannot be opened (the restore says why)."""
    from gpen_core.video.probe import expected_frames, open_video  # here: the CLI's --help imports no numpy

    try:
        container, info = open_video(path, count=True)
    except GPENError:
        return 0, (0, 0)
    container.close()
    return expected_frames(info, start_s, end_s), info.size


def photo_header(path: str | os.PathLike[str]) -> tuple[str, tuple[int, int]] | None:
    """(format as our decoder names it, (width, height) upright) from one read of its header; a file only our own
    header reader reads (a float RGB TIFF) gives its size as stored; None when unreadable (the restore says why)."""
    from PIL import Image

    from gpen_core.images.decode import OUR_NAME, probe_image
    from gpen_core.images.metadata import read, upright

    try:
        # a photo over 89 MP (--max-megapixels): Pillow warns, and the restore's own limit is what speaks
        with warnings.catch_warnings(action="ignore", category=Image.DecompressionBombWarning), Image.open(path) as im:
            return OUR_NAME.get(str(im.format), str(im.format)), upright(im.size, read(im).orientation)
    except Exception:  # noqa: BLE001 - not Pillow's: a float RGB TIFF is read by our decoder's own header reader
        pass
    try:
        return probe_image(path)
    except Exception:  # noqa: BLE001 - unreadable: its restore says why
        return None


def convert_before_run(args: Any, faces: int, size: tuple[int, int], say: Callable[[str], None]) -> ConvertFirst:
    """The conversion a run of ``faces`` expected faces does first, for the CLI's ``args`` (nothing for another
    generator or task)."""
    if args.model or args.task != "enhance":
        return ConvertFirst("nothing to convert")
    from gpen_core.restorer import default_device

    device = args.device or default_device()
    return convert_before(Run(args.mode, faces, size, device, args.backend), models_dir=args.models_dir, say=say)


def convert_before_clips(args: Any, videos: Sequence[Path], say: Callable[[str], None]) -> ConvertFirst:
    """:func:`convert_before_run` for the clips of a run: one face a frame over the parts restored."""
    counted = [clip_frames(v, args.start, args.end) for v in videos]
    return convert_before_run(args, sum(n for n, _ in counted), counted[0][1] if counted else (0, 0), say)


def convert_before_photos(args: Any, photos: Sequence[Path], say: Callable[[str], None]) -> ConvertFirst:
    """:func:`convert_before_run` for a folder's photos; nothing for a single photo (it cannot repay a conversion)."""
    if len(photos) < 2:
        return ConvertFirst("nothing to convert")
    header = photo_header(photos[0])
    return convert_before_run(args, len(photos), header[1] if header else (0, 0), say)


def with_run_notes(result: Any, first: ConvertFirst) -> Any:
    """A clip's result (a VideoResult) with what the run did before its first frame first among its notes."""
    return replace(result, notes=(*first.notes, *result.notes)) if first.notes else result
