"""The models folder: ``$GPEN_HOME`` or ``~/.cache/gpen``, where weights and every cache live."""

from __future__ import annotations

import os
from pathlib import Path

from gpen_core.errors import WeightsError

HELP = "models folder for this run (default: $GPEN_HOME or ~/.cache/gpen)"  # every command's --models-dir


def folder(arg: str | os.PathLike[str] | None = None) -> Path:
    """``arg``, or ``$GPEN_HOME``, or ``~/.cache/gpen``; not created here: what writes into it makes it
    (:func:`made`), so a run that only reads, or fails first, leaves no folder behind."""
    return (Path(arg) if arg is not None else Path(os.environ.get("GPEN_HOME") or "~/.cache/gpen")).expanduser()


def made(p: Path) -> Path:
    """The models folder ``p``, created if missing, before a file is written into it (a download, a measurement);
    else a WeightsError saying how to fix it."""
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WeightsError(f"cannot create the models folder {p}: {exc.strerror or exc}. "
                           "Set GPEN_HOME to a writable folder.") from exc
    return p


def models_dir() -> Path:
    """Our models folder: ``$GPEN_HOME`` or ``~/.cache/gpen`` (not created here: :func:`made`)."""
    return folder(None)
