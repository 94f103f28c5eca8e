"""What ``python -m gpen_core restore`` prints: results and the summary on stdout, progress and each note once on
stderr (redrawn in a terminal; in a log, one line per photo)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from gpen_core.errors import GPENError
from gpen_core.modes import IDENTITY_THRESHOLD_TEXT


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def print_error(exc: GPENError, verbose: bool, prefix: str = "", say: Callable[[str], None] | None = None) -> None:
    """``error: …`` on stderr (or through ``say``), with ``-v`` the details; ``prefix`` ("FILE: ") left out when the
    message starts with that file."""
    say = say or (lambda line: print(line, file=sys.stderr))
    subject = prefix.rstrip().rstrip(":")
    say(f"error: {'' if subject and str(exc).startswith(subject) else prefix}{exc}")
    if verbose and exc.details:
        say(exc.details)


class ProgressLine:
    """The run's progress on ``stream`` (stderr): ``step(label)`` after each photo; nothing for one photo."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.stream, self.t0, self.done = total, stream or sys.stderr, time.perf_counter(), 0
        self.redraw = is_terminal(self.stream)
        self._drawn = ""

    def step(self, label: str) -> None:
        self.done += 1
        if self.total < 2:
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        if not self.redraw:  # a log: one plain line per photo
            self.stream.write(f"[{self.done}/{self.total}] {label}: {elapsed:.1f} s elapsed, ETA {eta:.1f} s\n")
        else:  # the bar redrawn in place, left on its own line once the last photo is done
            bar = "#" * int(self.WIDTH * self.done / self.total)
            line = f"[{bar:<{self.WIDTH}}] {self.done}/{self.total} {elapsed:5.1f}s elapsed, ETA {eta:5.1f}s  {label[:40]:<40}"
            last = self.done == self.total
            self.stream.write("\r" + line + ("\n" if last else ""))
            self._drawn = "" if last else line
        self.stream.flush()

    def say(self, text: str, out: TextIO | None = None) -> None:
        """Print ``text`` as its own line on ``out`` (default: the progress stream), the bar redrawn under it."""
        out = out or self.stream
        if self._drawn:
            self.stream.write("\r" + " " * len(self._drawn) + "\r")
            self.stream.flush()
        out.write(text + "\n")
        out.flush()
        if self._drawn:
            self.stream.write(self._drawn)
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
