"""Where results are written: checked before any work, written whole or not at all.

The command line calls :func:`check_writable` on every planned output before it loads
a model, so a bad path (its folder is a file, a kernel file system such as /proc, a
folder without write access) fails in milliseconds with exit 2 instead of after the
restore; :func:`write_atomic` never leaves a partial file under the final name.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpen_core.errors import InputError


def check_writable(outputs: Iterable[Path]) -> None:
    """Raise :class:`InputError` for the first output that cannot be written.

    For each output's folder, the nearest existing ancestor must be a folder in which a
    file can really be created (an anonymous temporary file, gone at once): permissions
    say little for root or on read-only and kernel file systems (/proc, /sys).
    """
    checked: set[Path] = set()
    for dst in outputs:
        folder = Path(dst).parent
        if folder in checked:
            continue
        checked.add(folder)
        nearest = folder
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not nearest.is_dir():
            raise InputError(f"cannot write {dst}: {nearest} is a file, not a folder. Choose another output path.")
        try:
            with tempfile.TemporaryFile(dir=nearest):
                pass
        except OSError as exc:
            raise InputError(
                f"cannot write {dst}: creating a file in {nearest} failed ({exc.strerror or exc}). "
                "Choose an output in a folder you can write to."
            ) from None


def write_atomic(dst: Path, data: bytes) -> None:
    """Write ``data`` to ``dst`` through a temporary file renamed into place.

    Raises :class:`InputError` naming the path when it cannot be written (the disk is
    full, the folder went away); the temporary file is removed.
    """
    tmp = dst.with_name(f".{dst.name}.partial")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        tmp.replace(dst)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {dst}: {exc.strerror or exc}. Choose another output path.") from None
