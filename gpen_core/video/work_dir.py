"""The segments' work folder (:func:`open_work_folder`): never reached through a link, held by one run at a time
(a ``flock`` the kernel releases however the process ends); only the run's own files are deleted.
docs/video-segments.md, "Resume, and what is on disk"."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from gpen_core.errors import InputError
from gpen_core.platform.leftovers import partial_of
from gpen_core.video.segments import PLAN, segment_index, work_folder

LOCK = ".lock"


class WorkFolderBusy(InputError):
    """Another process is restoring into the same output (it holds the work folder's lock)."""


@dataclass
class WorkFolder:
    """The work folder, locked by this process until :meth:`release` (or the process's end)."""

    path: Path
    fd: int

    def names(self, segments: int, ours: bool) -> list[str]:
        """The names in the folder (the lock aside) that are, or with ``ours`` False are not, the files this
        program writes for a plan of ``segments`` segments."""
        return [n for n in sorted(os.listdir(self.path))
                if n != LOCK and (is_ours(n, segments) and not _real_dir(self.path / n)) == ours]

    def clashes(self, segments: int) -> list[str]:
        """Segment files already there for a new plan of ``segments`` segments: not the new run's to write over."""
        return [n for n in sorted(os.listdir(self.path)) if (i := segment_index(n)) is not None and i < segments]

    def clear(self, segments: int) -> int:
        """Delete the run's own files (a plan of ``segments`` segments); how many there were. The lock stays."""
        files = self.names(segments, ours=True)
        for name in files:
            (self.path / name).unlink(missing_ok=True)
        return len(files)

    def remove(self, segments: int) -> list[str]:
        """Delete the run's own files and the folder, releasing the lock; the names left when other files keep it."""
        self.clear(segments)
        # Deleted while still held: a run waiting on this file finds it gone and locks the new one (_lock).
        (self.path / LOCK).unlink(missing_ok=True)
        left = self.names(segments, ours=False)
        if not left:
            try:
                self.path.rmdir()
            except OSError:  # a file appeared meanwhile: it is not ours to delete
                left = self.names(segments, ours=False)
        self.release()
        return left

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1


def _real_dir(path: Path) -> bool:
    """A folder under one of the run's names is not the run's; a link there is (unlinked, never followed)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def is_ours(name: str, segments: int) -> bool:
    """Whether ``name`` is a file a run of ``segments`` segments writes in its work folder."""
    written = partial_of(name)
    file = written[0] if written else name  # a partial is the run's while its file's name is
    index = segment_index(file)
    return file == PLAN or (index is not None and index < segments)


def open_work_folder(dst: Path) -> WorkFolder:
    """``dst``'s work folder, made when missing and locked. InputError for a link or a non-folder under
    its name; WorkFolderBusy when another process holds it."""
    folder = work_folder(dst)
    with suppress(FileExistsError):
        os.mkdir(folder)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{folder} (this output's work folder for segments) is a symbolic link to "
                         f"{os.readlink(folder)}; the run deletes files in its work folder, so it never follows a link "
                         f"there. Remove the link itself (rm '{folder}', which leaves what it points to), or choose "
                         "another output name")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{folder} (this output's work folder for segments) is a file, not a folder: move it away, "
                         "or choose another output name")
    return WorkFolder(folder, _lock(folder))


def _lock(folder: Path) -> int:
    """An exclusive flock on ``folder/.lock``, with this process's id and command written in it."""
    path = folder / LOCK
    for _ in range(5):  # the holder may delete the lock file as it finishes: lock the file that is there
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(f"{path} is a symbolic link; remove it (it is not the run's) and run again") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise WorkFolderBusy(f"another run is restoring into this output: {holder} holds its work folder "
                                 f"{folder}. Wait for it to finish, or stop it and run again (the same command "
                                 "resumes its segments; --fresh starts over)") from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{_command(os.getpid())}\n".encode(), 0)
            return fd
        os.close(fd)
    raise WorkFolderBusy(f"{folder} keeps being removed by another run on this output: wait for it to finish")


def _holder(fd: int) -> str:
    """'process PID (COMMAND)' from the lock file, the command from /proc when it can be read."""
    lines = os.pread(fd, 4096, 0).decode(errors="replace").splitlines()
    pid = lines[0].strip() if lines else ""
    if not pid.isdigit():
        return "another process"
    command = _command(int(pid)) or (lines[1].strip() if len(lines) > 1 else "")
    return f"process {pid}" + (f" ({command[:200]})" if command else "")


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(a.decode(errors="replace") for a in f.read().split(b"\0") if a)
    except OSError:
        return ""
