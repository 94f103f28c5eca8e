"""Stops a local Ray's leftover processes when its driver dies (they outlive a SIGKILL by a minute): a small
standard-library process that, once the driver's pipe closes, kills every process with a file open in the Ray
session's folder. docs/results-and-messages.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

# Ray's fate-sharing stops the GCS and raylet within about a second of the driver's death (measured).
GRACE_S = 2.0
TERM_WAIT_S = 3.0
_CLEAN = b"c"  # written by stop(): the driver shut Ray down itself


def session_processes(session_dir: str, skip: tuple[int, ...] = ()) -> list[int]:
    """PIDs (other than ``skip``) holding a file under ``session_dir`` open: every process of a Ray
    session keeps a log there."""
    root = os.path.realpath(session_dir) + os.sep
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in skip
            and any(target.startswith(root) for target in _open_files(pid))]


def _open_files(pid: str) -> Iterator[str]:
    """What process ``pid`` holds open; nothing when it is gone or not ours to look at."""
    with suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with suppress(OSError):  # closed meanwhile
                yield os.readlink(f"/proc/{pid}/fd/{fd}")


def reap(session_dir: str, driver: int | None = None) -> list[int]:
    """SIGTERM the session's processes (never ``driver`` or this one), SIGKILL those left after TERM_WAIT_S."""
    pids = session_processes(session_dir, skip=(os.getpid(),) + ((driver,) if driver else ()))
    for pid in pids:
        with suppress(OSError):  # gone already
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_WAIT_S
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    for pid in pids:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return pids


def start(session_dir: str) -> subprocess.Popen[bytes] | None:
    """The reaper for ``session_dir``, watching this process; None without /proc. Keep it: closing its ``stdin``
    (or this process ending) starts the reaping."""
    if not Path("/proc/self/fd").is_dir():
        return None
    return subprocess.Popen([sys.executable, "-S", os.path.abspath(__file__), session_dir, str(os.getpid())], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                            start_new_session=True)


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    """After a clean ``ray.shutdown()``: let the reaper sweep what is left and wait for it."""
    if proc is None:
        return
    try:
        if proc.stdin is not None:
            proc.stdin.write(_CLEAN)  # Ray is already down: no grace to wait
            proc.stdin.close()
        proc.wait(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()


def _main(argv: list[str]) -> int:
    session_dir, driver = argv[1], int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver
    clean = False
    with suppress(OSError):
        while chunk := sys.stdin.buffer.read(1):  # b"" once the driver's end is closed, however it died
            clean = clean or chunk == _CLEAN
    if not clean:
        time.sleep(GRACE_S)
    reap(session_dir, driver)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
