"""Atomic, and where it matters durable, replacement of a file: the one place gpen_core renames into place.

A write goes to ``.NAME.PID.partial`` beside the destination and is renamed onto it only when whole; a failure
leaves the destination as it was. ``sync=True`` fsyncs the file and the folder too (no empty file after a power
cut), for what costs a long rerun or would be trusted torn (videos, weights, measurements), not for a photo.
A symbolic link at either name is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from gpen_core.platform.leftovers import partial_name, sweep_partials

PathLike = str | os.PathLike[str]

# One writer per destination in this process (two threads would share the pid's temporary name); weakly held,
# as a server writes many names over its life.
_writers_lock = threading.Lock()
_writers: weakref.WeakValueDictionary[Path, threading.Lock] = weakref.WeakValueDictionary()  # by temporary


def partial_path(dst: PathLike) -> Path:
    """Where ``dst`` is written until whole: ``.NAME.PID.partial`` beside it (swept once this process is gone)."""
    dst = Path(dst)
    return dst.with_name(partial_name(dst.name, os.getpid()))


def _fsync(path: Path, *, folder: bool = False) -> None:
    """Flush a file (never through a link), or a ``folder``'s entries (a rename in it) where it can be: Windows
    cannot open a folder, and some file systems refuse its fsync (the rename itself still happened)."""
    # Windows flushes only a handle opened for writing; POSIX flushes the file whichever way it is opened.
    file_flags = (os.O_RDWR if os.name == "nt" else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDONLY if folder else file_flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not folder:
            raise


def install(tmp: PathLike, dst: PathLike, *, sync: bool) -> None:
    """Rename the whole ``tmp`` (a file, or a folder) onto ``dst`` in the same folder, for writers that make the file
    themselves (PyAV, torch.save, a download); with ``sync``, fsync ``tmp`` first and the folder after. OSError as
    os.replace raises it."""
    tmp, dst = Path(tmp), Path(dst)
    if sync:
        _fsync(tmp)
    os.replace(tmp, dst)
    if sync:
        _fsync(dst.parent, folder=True)


def move_aside(path: PathLike, to: PathLike) -> None:
    """Rename ``path`` (a file or a folder) to ``to`` on the same disk before it is deleted: a reader holding its
    files keeps them, no new reader finds it. Not flushed: it is going."""
    os.replace(path, to)


@contextlib.contextmanager
def replacing(dst: PathLike, *, sync: bool, sweep: bool = False) -> Iterator[Path]:
    """Yield the temporary path for ``dst``'s new content and :func:`install` it when the block ends (on an
    exception it is removed, ``dst`` untouched). ``sweep``: first remove what killed writers of ``dst`` left
    (it lists the folder: not for thousands of photos)."""
    dst = Path(dst)
    tmp = partial_path(dst)
    if sweep:
        sweep_partials(dst)
    with _writers_lock:  # one key for one file, however the caller spelled it
        lock = _writers.setdefault(Path(os.path.abspath(tmp)), threading.Lock())
    with lock:
        if tmp.is_symlink():  # this pid's name, planted or left by a dead process: never written through
            tmp.unlink()
        try:
            yield tmp
            install(tmp, dst, sync=sync)
        finally:
            # Gone once it became dst; one that cannot be removed is left to the sweep, not hiding our error.
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_bytes(dst: PathLike, data: bytes, *, sync: bool, sweep: bool = False) -> None:
    """Replace ``dst`` with ``data`` atomically (see :func:`replacing`)."""
    with replacing(dst, sync=sync, sweep=sweep) as tmp:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(tmp, flags, 0o666), "wb") as f:
            f.write(data)


def write_text(dst: PathLike, text: str, *, sync: bool, sweep: bool = False) -> None:
    """Replace ``dst`` with ``text`` in UTF-8 atomically (see :func:`replacing`)."""
    write_bytes(dst, text.encode("utf-8"), sync=sync, sweep=sweep)
