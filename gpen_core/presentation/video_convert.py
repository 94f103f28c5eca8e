"""The Video tab's conversion before a clip's first frame: the CLI's rule (:func:`gpen_core.engine.convert_first.convert_before`)
for the part of the clip the page restores, and the words its progress bar shows while the child converts.

Why in the page too: on weights placed by hand (no ``download`` run), a clip in ``balanced`` or ``auto``
otherwise ran its generator on torch from the first frame to the last, hours more on a long clip.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from gpen_core.engine.convert_first import BUILT_IN_SOURCE, ConvertFirst, Figure, Run, convert_before
from gpen_core.presentation.cli_convert import clip_frames
from gpen_core.presentation.video_tab import duration_text


def converting_text(model: str, seconds: Figure) -> str:
    """The progress bar's line while the child converts: "converting GPEN-BFR-512 for OpenVINO, once: about 13 s
    (estimate)"; a figure this machine's hardware check measured says so."""
    label = "estimate" if seconds.source == BUILT_IN_SOURCE else "estimate from this machine's hardware check"
    return f"converting {model} for OpenVINO, once: about {duration_text(seconds.value)} ({label})"


def convert_before_clip(video: str, part: tuple[float | None, float | None], cap_frames: int | None, mode: str,
                        engine: object, stop: threading.Event, show: Callable[[str], None]) -> ConvertFirst:
    """Before the clip's first frame: convert the generator ``mode`` runs (a name or "auto") for OpenVINO when
    the part's frames (``part``: start and end seconds; at most ``cap_frames``, the server's cap) on torch
    outlast the conversion. ``engine``: the app's Restorer (its device and models folder); ``show(text)``: the
    page's progress; ``stop``: the visitor's own Stop, which kills the conversion (outcome "stopped")."""
    frames, size = clip_frames(Path(video), *part)
    if cap_frames:
        frames = min(frames, cap_frames)
    models_dir: str | os.PathLike[str] | None = getattr(engine, "models_dir", None)
    run = Run(mode, frames, size, str(getattr(engine, "device", "cpu")))
    return convert_before(run, models_dir=models_dir, starting=lambda model, s: show(converting_text(model, s)), stop=stop)
