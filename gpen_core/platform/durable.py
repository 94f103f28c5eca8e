"""Atomic, and where it matters durable, replacement of a file: the one place gpen_core renames into place.

Every write goes to ``.NAME.PID.partial`` (:func:`partial_path`) in the destination's folder and is
renamed onto it only when whole: a reader sees the old file or the new one, and a failure leaves the
destination as it was (a killed run's temporary is swept by :func:`gpen_core.platform.leftovers.sweep_partials`).
``sync=True`` also fsyncs the file before the rename and the folder after, so a power cut never leaves
an empty file under the final name; it is asked for where a loss costs a long rerun or a torn file
would be trusted later (a video and its segments, weights, measurements), not for a restored photo.
A destination that is a symbolic link is replaced, never followed, nor is the temporary's name.
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

# One writer per destination within this process: two threads writing one file would share its
# temporary name (the pid's); the second waits, and each write stays whole. A lock is forgotten with
# its last writer (weakly held): a server writes many names over its life.
_writers_lock = threading.Lock()
_writers: weakref.WeakValueDictionary[Path, threading.Lock] = weakref.WeakValueDictionary()  # by temporary


def partial_path(dst: PathLike) -> Path:
    """Where ``dst`` is written until whole: ``.NAME.PID.partial`` beside it (swept once this process is gone)."""
    dst = Path(dst)
    return dst.with_name(partial_name(dst.name, os.getpid()))


def fsync_folder(folder: PathLike) -> None:
    """Flush ``folder``'s entries (a rename in it) to disk; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse a folder's fsync: the rename itself still happened
        pass
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    # Windows flushes only a handle opened for writing; POSIX flushes the file whichever way it is opened.
    fd = os.open(path, (os.O_RDWR if os.name == "nt" else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install(tmp: PathLike, dst: PathLike, *, sync: bool) -> None:
    """Rename the whole ``tmp`` (a file, or a folder) onto ``dst`` in the same folder; with ``sync``, fsync
    ``tmp`` first and the folder after. For writers that make the file themselves (PyAV, torch.save,
    OpenVINO, a download) under :func:`partial_path` or a name of their own; OSError as os.replace raises it."""
    tmp, dst = Path(tmp), Path(dst)
    if sync:
        _fsync_path(tmp)
    os.replace(tmp, dst)
    if sync:
        fsync_folder(dst.parent)


def move_aside(path: PathLike, to: PathLike) -> None:
    """Rename ``path`` (a file or a folder) to ``to`` on the same disk, to take it out of the way before it is
    deleted: a reader holding its files keeps them, no new reader finds it. Nothing is flushed: it is going."""
    os.replace(path, to)


@contextlib.contextmanager
def replacing(dst: PathLike, *, sync: bool, sweep: bool = False) -> Iterator[Path]:
    """Yield the temporary path for ``dst``'s new content (the block writes it or hands it to a writer) and
    :func:`install` it when the block ends; on an exception it is removed and ``dst`` never touched. ``sweep``:
    first remove what killed writers of ``dst`` left (it lists the folder: not for thousands of photos)."""
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
            # Gone already when it became dst. One that cannot be removed is left to the leftovers sweep rather
            # than hiding the error that brought us here.
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
