"""What the app says about a clip longer than a shared server restores: the command that restores it, resumable."""

from __future__ import annotations

import shlex
from pathlib import PurePath


def resume_command(input_name: str) -> str:
    """The CLI command that restores ``input_name`` into ``<stem>_restored.mp4`` beside it, in segments a rerun
    resumes after a stop; names shell-quoted."""
    out = str(PurePath(input_name).with_name(PurePath(input_name).stem + "_restored.mp4"))
    return shlex.join(["python", "-m", "gpen_core", "restore", input_name, "-o", out, "--segments"])
