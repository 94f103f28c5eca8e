"""The video parts of ``python -m gpen_core restore`` that need no exit code."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path, PurePath
from typing import Any

from gpen_core.errors import InputError
from gpen_core.images.limits import IMAGE_SUFFIXES
from gpen_core.images.outputs import check_output_file, check_writable, one_file_for_several, output_stems
from gpen_core.platform.meter import format_bytes, peak_vram_text
from gpen_core.progress import left_text
from gpen_core.video.identity import summary_lines
from gpen_core.video.output import VIDEO_SUFFIXES, check_output
from gpen_core.video.rate import FrameRate


def add_video_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("--crf", type=int, help="video: x264 quality, 0 lossless … 51 smallest (default 18)")
    r.add_argument("--start", type=float, help="video: restore from this second on (default: its start)")
    r.add_argument("--end", type=float, help="video: restore up to this second (default: its end)")
    r.add_argument("--no-audio", action="store_true",
                   help="video: write the picture only, without the sound (e.g. audio an MP4 cannot take); the notes say so")
    r.add_argument("--identity-every", type=int, metavar="N",
                   help="video: check identity (--identity) on frames 1, 1+N, 1+2N… only, to bound its cost (≈0.15 s of "
                   "CPU a face and frame); default 1: every frame")
    r.add_argument("--tracks", help="video: restore only these faces, by number (--json's per-frame \"face\": 1 is the "
                   "first face seen), e.g. 1,3; the others are left as they were (one pass: not with --segments)")


def face_numbers(text: str | None) -> frozenset[int] | None:
    """``--tracks 1,3`` as the engine's track ids (0-based); None: every face. InputError for anything else."""
    if text is None:
        return None
    try:
        numbers = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        numbers = set()
    if not numbers or min(numbers) < 1:
        raise InputError(f"--tracks takes face numbers from 1, separated by commas (e.g. 1,3), got {text!r}")
    return frozenset(n - 1 for n in numbers)


def plan_video_outputs(videos: list[Path], output: str, photos: int) -> list[tuple[Path, Path]]:
    """(input, output) per video: the file ``output`` for one video alone (no ``photos`` in the run either), else
    ``output/<name>.mp4``. Checked before any model loads (InputError, exit 2); only then is a missing output folder made."""
    out = Path(output)
    if len(videos) + photos > 1 and out.suffix.lower() in (*VIDEO_SUFFIXES, *IMAGE_SUFFIXES) and not out.is_dir():
        raise one_file_for_several(len(videos), photos, out)
    if out.suffix.lower() in VIDEO_SUFFIXES and not out.is_dir():
        check_output(out, videos[0])
        return [(videos[0], out)]
    if out.exists() and not out.is_dir():
        check_output_file(out)  # a device such as /dev/full, a FIFO: named as such
    # Several outputs need a folder: a new results.v2 is made as one; one clip's out.v2 is neither an MP4 nor a folder.
    if out.suffix and not out.is_dir() and (len(videos) + photos == 1 or out.exists()):
        raise InputError(f"a restored video is an MP4: name the output {out.with_suffix('.mp4')}, or give a folder")
    plan = [(p, out / f"{stem}.mp4") for p, stem in zip(videos, output_stems([p.name for p in videos]))]
    check_writable([dst for _, dst in plan])
    out.mkdir(parents=True, exist_ok=True)
    for src, dst in plan:
        check_output(dst, src)
    return plan


def remove_if_unused(folder: Path, made: bool) -> None:
    """Remove ``folder`` when this run ``made`` it (:func:`plan_video_outputs`) and wrote nothing there (every clip
    failed before its file): a run leaves no empty folder of its own; never one it did not make."""
    if made and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def resume_command(input_name: str) -> str:
    """The shell-quoted command that restores ``input_name`` into ``<stem>_restored.mp4`` beside it, resumably."""
    out = str(PurePath(input_name).with_name(PurePath(input_name).stem + "_restored.mp4"))
    return shlex.join(["python", "-m", "gpen_core", "restore", input_name, "-o", out, "--segments"])


class VideoBar:
    """Frames done, frames a second and time left on stderr: one line redrawn in a terminal (at most 5 a
    second); in a log, a line per tenth of the clip (per 100 frames when the count is unknown)."""

    def __init__(self, name: str) -> None:
        self.name, self.last, self.step, self.width = name, 0.0, -1, 0
        self.tty = sys.stderr.isatty()
        self.rate = FrameRate()

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        rate = self.rate(done, total)
        known = total >= done > 0
        if self.tty:
            if now - self.last < 0.2 and done != total:
                return
        else:
            step = 10 * done // total if known else done // 100
            if step == self.step:
                return
            self.step = step
        self.last = now
        fps = f", {1 / rate.seconds_per_frame:5.2f} fps" if rate.seconds_per_frame else ""
        left = f", {left_text(rate.left_s)}" if known and rate.left_s is not None else ""
        line = f"{self.name[:40]}: frame {done}{f'/{total}' if known else ''}{fps}{left}"
        self.width = max(self.width, len(line))  # redrawn in place: a shorter line is padded over the last one
        sys.stderr.write(f"\r{line.ljust(self.width)}" if self.tty else f"{line}\n")
        sys.stderr.flush()


def print_video(src: Path, r: Any, json_records: bool = False, extra: str = "") -> None:
    """A restored clip's summary (``extra`` after it) on stdout, or on stderr when stdout holds ``--json`` records;
    its notes on stderr. A terminal's progress line is ended first."""
    if sys.stderr.isatty():
        sys.stderr.write("\n")
        sys.stderr.flush()
    vram = peak_vram_text(r.peaks.vram_reserved_bytes)
    plan = getattr(r, "planned_bytes", None)
    plan = (f" (+{format_bytes(r.peaks.rss_bytes - r.peaks.baseline_rss_bytes)} over the clip's start; the mode's plan "
            f"+{format_bytes(plan)}, an estimate)") if plan is not None else ""
    print(f"{src} -> {r.output}: {r.frames} frame{'s' * (r.frames != 1)} ({r.duration_s:.2f} s, {r.fps:.2f} fps), mode {r.mode}, audio {r.audio}, "
          f"{r.seconds_per_frame:.3f} s a frame, peak RAM {format_bytes(r.peaks.rss_bytes)}{plan}{vram}{extra}"
          + "".join(f"\n  {line}" for line in summary_lines(getattr(r, "identity", None))),
          file=sys.stderr if json_records else sys.stdout, flush=True)
    for note in r.notes:
        print(f"  note: {note}", file=sys.stderr)
