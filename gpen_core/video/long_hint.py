"""What a shared server says about a clip longer than it restores: the command that restores it, resumable.
Pure functions."""

from __future__ import annotations

import shlex
from pathlib import PurePath


def resume_command(input_name: str, output_name: str | None = None, *, mode: str = "auto", crf: int = 18,
                   ray: bool = False) -> str:
    """The CLI command that restores ``input_name`` in segments and resumes when run again after a stop.
    ``output_name`` default: ``<stem>_restored.mp4`` beside it; names shell-quoted, defaults left out."""
    out = output_name or str(PurePath(input_name).with_name(PurePath(input_name).stem + "_restored.mp4"))
    parts = ["python", "-m", "gpen_core", "restore", input_name, "-o", out, "--segments"]
    if mode != "auto":
        parts += ["--mode", mode]
    if crf != 18:
        parts += ["--crf", str(crf)]
    if ray:
        parts.append("--ray")
    return " ".join(shlex.quote(p) for p in parts)


def too_long_message(duration_s: float, cap_s: float, input_name: str, *, mode: str = "auto", crf: int = 18) -> str:
    """The refusal for a clip over the server's cap, naming both lengths and the command that restores it."""
    return (
        f"This video is {_clock(duration_s)} long; this server restores videos up to {_clock(cap_s)}. "
        f"Restore it on your own machine with the command line, in segments it can resume after a stop "
        f"(run the same command again): {resume_command(input_name, mode=mode, crf=crf)}  "
        "(add --ray to spread the segments over this machine's cores with Ray)."
    )


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"
