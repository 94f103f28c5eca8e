"""A local Ray's processes do not outlive a driver killed with SIGKILL (marker ``ray``).

Without the reaper, Ray 2.60's DashboardAgent and RuntimeEnvAgent (about 210 MB, four
loopback ports) stayed 61-65 s (measured here, two runs): they wait on a dead GCS for
its fixed 60 s timeout. With it, all were gone about 7 s after the kill (measured).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpen_core.scaleout.reaper import session_processes

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="needs Ray: bash scripts/setup.sh --ray (pip install -r requirements-ray.txt)")

_DRIVER = """
import sys, time
sys.path.insert(0, {root!r})
from gpen_core.scaleout.runtime import ray_session
with ray_session(num_cpus=1, temp_dir={tmp!r}):
    import ray
    print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
    time.sleep(600)
"""


AGENTS = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}  # what stayed 60 s without the reaper


def _name(pid: int) -> str:
    """The process's title (Ray's agents set theirs to ``ray::…``); "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def test_a_killed_drivers_ray_leaves_nothing_running(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[1])
    tmp = str(Path("/tmp") / f"gpen-reaper-test-{os.getpid()}")  # Ray's socket paths must stay short
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER.format(root=root, tmp=tmp)], stdout=subprocess.PIPE, text=True)
    session = driver.stdout.readline().strip()  # type: ignore[union-attr]
    assert session, "the driver did not start Ray"
    before: list[int] = []
    for _ in range(150):  # the agents may start after ray.init returns: wait until both are up (30 s at most)
        before = session_processes(session, skip=(driver.pid,))
        if AGENTS <= {_name(pid) for pid in before}:
            break
        time.sleep(0.2)
    assert AGENTS <= {_name(pid) for pid in before}, [_name(pid) for pid in before]
    assert len(before) >= 4  # GCS, raylet, the two agents (and more)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    left = before
    for _ in range(150):  # liveness with a margin: the agents alone used to stay 60 s
        left = session_processes(session, skip=(driver.pid,))
        if not left:
            break
        time.sleep(0.2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"still running 30 s after the driver died: {left}"
