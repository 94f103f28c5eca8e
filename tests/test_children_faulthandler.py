"""A child process a test starts keeps its Python stack when it dies of a signal.

A capped child of test_oom once died of SIGSEGV with nothing on stderr but its return code:
conftest sets PYTHONFAULTHANDLER for the whole session, so every Python child (subprocess,
multiprocessing's spawn, Ray's workers) writes where it was when the signal came.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CRASH = textwrap.dedent(
    """
    import ctypes

    def where_it_died():
        ctypes.string_at(0)  # reads address 0: SIGSEGV

    where_it_died()
    """
)


def test_a_subprocess_that_segfaults_leaves_its_python_stack() -> None:
    p = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True, timeout=60)
    assert p.returncode == -11, (p.returncode, p.stderr[-2000:])
    assert "Segmentation fault" in p.stderr and "where_it_died" in p.stderr, p.stderr[-2000:]


def test_a_spawned_worker_has_the_fault_handler_on() -> None:
    import multiprocessing
    import faulthandler

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(faulthandler.is_enabled) is True
