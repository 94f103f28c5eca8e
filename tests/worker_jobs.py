"""Module-level functions for tests/test_worker.py to run in a child process (a child imports them by name)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from gpen_core.platform import worker


@dataclass(frozen=True)
class Seen:
    pid: int
    omp: str | None
    niceness: int


def look(steps: int) -> Seen:
    for i in range(steps):
        worker.report(i / steps, f"step {i + 1} of {steps}")
    return Seen(os.getpid(), os.environ.get("OMP_NUM_THREADS"), os.nice(0))


def fail() -> None:
    raise ValueError("the spec names no mode")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleep(seconds: float, pid_file: str = "") -> None:
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(seconds)
