"""Stops a local Ray's leftover processes when the process that started it dies.

Ray fate-shares its GCS and raylet with the driver that called ``ray.init()``, but its
two agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``: about 210 MB and four
loopback ports, measured with Ray 2.60) notice the raylet's death at once and then spend
60 s trying to report it to the dead GCS (``publish_error_to_driver``'s fixed 60 s timeout)
before they exit. Ray has no setting for that wait, so a driver killed with SIGKILL left
them behind for a minute or two.

This file runs as its own small process (standard library only, started with the file's
path so it needs no package on ``sys.path``): it blocks reading a pipe whose write end
only the driver holds. When the driver exits, however it exits, the read returns; after a
short grace for Ray's own shutdown it kills every process whose stdout or stderr is a log
file in that Ray session's folder (the processes that session started, and no others),
then exits. In its own session, so a signal to the driver's process group spares it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# Ray's own fate-sharing stops the GCS and raylet within about a second of the driver's
# death (measured); the reaper acts after that, on whatever is left.
GRACE_S = 2.0
TERM_WAIT_S = 3.0
_CLEAN = b"c"  # written by stop(): the driver shut Ray down itself


def session_processes(session_dir: str, skip: tuple[int, ...] = ()) -> list[int]:
    """PIDs (other than ``skip``) holding a file under ``session_dir`` open: every process of a
    Ray session keeps a log there (the agents' stdout is a pipe, but their log files are open)."""
    root = os.path.realpath(session_dir) + os.sep
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # gone, or not ours to look at
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(root):
                found.append(int(entry))
                break
    return found


def reap(session_dir: str, driver: int | None = None) -> list[int]:
    """SIGTERM the session's processes (never ``driver`` or this one), SIGKILL those still there
    after TERM_WAIT_S; the PIDs signalled."""
    pids = session_processes(session_dir, skip=(os.getpid(),) + ((driver,) if driver else ()))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + TERM_WAIT_S
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def start(session_dir: str) -> subprocess.Popen[bytes] | None:
    """The reaper for ``session_dir``, watching this process; None where /proc is absent (not Linux).

    Keep the returned object: closing its ``stdin`` (or this process ending) starts the reaping.
    """
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
    try:
        while chunk := sys.stdin.buffer.read(1):  # b"" once the driver's end is closed, however it died
            clean = clean or chunk == _CLEAN
    except OSError:
        pass
    if not clean:
        time.sleep(GRACE_S)
    reap(session_dir, driver)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
