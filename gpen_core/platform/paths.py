"""The models folder: ``$GPEN_HOME`` or ``~/.cache/gpen``, where weights and every cache live."""

from __future__ import annotations

import os
from pathlib import Path

from gpen_core.errors import WeightsError


def folder(arg: str | os.PathLike[str] | None = None) -> Path:
    """``arg``, or ``$GPEN_HOME``, or ``~/.cache/gpen``; created if missing (else a WeightsError saying how to fix it)."""
    p = Path(arg) if arg is not None else Path(os.environ.get("GPEN_HOME") or "~/.cache/gpen")
    p = p.expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WeightsError(f"cannot create the models folder {p}: {exc.strerror or exc}. "
                           "Set GPEN_HOME to a writable folder.") from exc
    return p


def models_dir() -> Path:
    """Our models folder: ``$GPEN_HOME`` or ``~/.cache/gpen``; created if missing."""
    return folder(None)
