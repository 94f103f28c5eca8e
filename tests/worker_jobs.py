"""Module-level functions for tests/test_worker.py to run in a child process (a child imports them by name)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

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


def chatter(seconds: float) -> None:
    """Reports every 10 ms for ``seconds``: a child whose events never leave a quiet tenth of a second."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        worker.report(0.0, "busy")
        time.sleep(0.01)


def sleep(seconds: float, pid_file: str = "") -> None:
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(seconds)


# ------------------------------------------------ stand-ins for the app's background preparation's child

GEN, PAR = "generator:GPEN-BFR-512", "parser:512"
GEN_LABEL, PAR_LABEL = "GPEN-BFR-512 (float32)", "the 512 px parser (float32)"


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.02)


def scripted_preparation(folder: str):
    """Plans two networks and reports each step, waiting for the test's go-ahead files in ``folder``."""
    from gpen_core.engine.prepare import PrepareReport
    from gpen_core.engine.prepare import Planned, Started

    f = Path(folder)
    _wait_for(f / "plan")
    print("a library printing", flush=True)
    worker.send(Planned(((GEN, GEN_LABEL), (PAR, PAR_LABEL))))
    worker.send(Started(GEN, GEN_LABEL))
    worker.report(0.0, f"OpenVINO: preparing {GEN_LABEL} (1 of 2)")
    _wait_for(f / "next")
    worker.send(Started(PAR, PAR_LABEL))
    worker.report(0.5, f"OpenVINO: preparing {PAR_LABEL} (2 of 2)")
    _wait_for(f / "end")
    return PrepareReport(converted=[GEN_LABEL, PAR_LABEL])


def preparation_that_dies(folder: str) -> None:
    """Plans the generator, then exits abruptly (as a crash in the runtime would), every time it runs."""
    from gpen_core.engine.prepare import Planned

    worker.send(Planned(((GEN, GEN_LABEL),)))
    time.sleep(0.2)
    os._exit(3)


def preparation_killed_once(folder: str):
    """First run: plans and starts the generator, then sleeps until the test kills it. Second run: converts it."""
    from gpen_core.engine.prepare import PrepareReport
    from gpen_core.engine.prepare import Planned, Started

    first = Path(folder) / "first-run"
    if not first.exists():
        worker.send(Planned(((GEN, GEN_LABEL),)))
        worker.send(Started(GEN, GEN_LABEL))
        first.write_text(str(os.getpid()))
        time.sleep(120)
    return PrepareReport(converted=[GEN_LABEL])


def conversion_that_hangs(models_dir: str | None, modes: object) -> None:
    """The conversion child's stand-in (prepare_in_child's arguments): leaves a conversion folder half written, as
    ``save_ir`` names it (its own pid), then hangs until it is killed."""
    from gpen_core.runtimes.openvino.base import cache_root

    folder = cache_root(models_dir) / "GPEN-BFR-256-0123456789abcdef" / f".convert-{os.getpid()}-half"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"\0" * 1024)
    time.sleep(120)
