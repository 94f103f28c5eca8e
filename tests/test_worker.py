"""One way to run work in a child process: typed outcomes, progress as it runs, no worker outlives its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpen_core.platform import worker

from . import worker_jobs as jobs
from .conftest import ROOT


def test_the_value_comes_back_typed_with_each_progress_event_on_the_way() -> None:
    events: list[object] = []
    out = worker.run(jobs.look, 3, on_event=events.append, niceness=5, env={"OMP_NUM_THREADS": "2"})
    assert isinstance(out, worker.Done) and isinstance(out.value, jobs.Seen)
    assert out.value.pid != os.getpid() and out.value.omp == "2"
    assert out.value.niceness >= os.nice(0) + 5
    assert events == [worker.ProgressEvent(0.0, "step 1 of 3"), worker.ProgressEvent(1 / 3, "step 2 of 3"),
                      worker.ProgressEvent(2 / 3, "step 3 of 3")]


def test_an_exception_a_kill_and_a_timeout_each_say_how_the_child_ended() -> None:
    raised = worker.run(jobs.fail)
    assert raised == worker.Failed("raised", "the spec names no mode", "ValueError")
    killed = worker.run(jobs.die)
    assert isinstance(killed, worker.Failed) and killed.how == "killed" and killed.exitcode == -9 and killed.oom
    started = time.monotonic()
    late = worker.run(jobs.sleep, 60, timeout=2)
    assert isinstance(late, worker.Failed) and late.how == "timed out" and time.monotonic() - started < 30
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    stopped = worker.run(jobs.sleep, 60, stop=stop)  # set from another thread, as a visitor's Stop button does
    assert isinstance(stopped, worker.Failed) and stopped.how == "stopped" and stopped.exitcode == -9


def test_a_child_busy_with_events_still_times_out_and_stops() -> None:
    """The limit and the Stop were looked at only in a tenth of a second with no event: a chatty child ran on."""
    started = time.monotonic()
    late = worker.run(jobs.chatter, 60, on_event=lambda e: None, timeout=1)
    assert isinstance(late, worker.Failed) and late.how == "timed out" and time.monotonic() - started < 15
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    stopped = worker.run(jobs.chatter, 60, on_event=lambda e: None, stop=stop)
    assert isinstance(stopped, worker.Failed) and stopped.how == "stopped" and time.monotonic() - started < 30


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z" if Path(f"/proc/{pid}").exists() else True


def test_the_child_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", "from gpen_core.platform import worker\n"
                               "from tests import worker_jobs as jobs\n"
                               f"worker.run(jobs.sleep, 120, {str(pid_file)!r})\n"], cwd=str(ROOT))
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and parent.poll() is None, "the child never started"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.kill()  # kill -9: no exit handler of the parent runs
        parent.wait()
        deadline = time.monotonic() + 20
        while _alive(child):
            assert time.monotonic() < deadline, "the child outlived its killed parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
