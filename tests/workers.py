"""The test command's workers: pytest-xdist runs one per core (``scripts/test.sh``), and this plugin
makes that as safe as one process running everything (loaded by conftest's ``pytest_plugins``).

- **A core each.** Imported by conftest before torch or OpenVINO loads, it gives each worker its
  share of the CPUs (the affinity mask): torch's OpenMP team, OpenVINO's CPU plugin and every child
  process size themselves from it, so the two workers never oversubscribe the 2 cores (two 2-thread
  OpenMP teams on 2 cores spin against each other: a compute-bound module ran 4x slower).
  ``whole_machine`` gives a test every CPU back, for the tests whose subject is the thread count.
- **A temporary folder each** (``TMPDIR``): the app's uploads and results, Ray's session files and
  the tips' scratch folders of one worker are out of the other's sweeps.
- **Whole modules, some together.** Each worker takes whole modules (their module fixtures, an app
  server or a Chromium, set up once); modules sharing a session fixture or a machine-wide resource
  form one group on one worker (``GROUPS``).
- **The longest first** (``FIRST``), so that the workers finish together rather than one waiting on
  the other's last long module.

Without xdist (``-n 0``, or a single test file run by hand) nothing changes but the order of modules.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Every CPU this run was given, before a worker takes its share.
ALL_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()

# Modules on one worker: the OpenVINO modules share the session's converted networks
# (fixtures_openvino) and the hardware-check ones its isolated run (fixtures_profile); the Ray
# modules start and look for Ray processes machine-wide, and the segment modules share the
# session's reference restore of one clip (conftest.face_clip_and_reference); the browser modules
# share one Chromium while they run back to back (conftest closes it between other modules), and
# test_restorer and test_mode_ordering the session's 280 MB GPEN-BFR-512 (conftest.gen512). No browser
# module loads that one: two groups of ~110 and ~75 s (an estimate from CI's --durations), not one of
# ~200, let the two workers end the run closer together.
GROUPS = {
    **dict.fromkeys(("test_ov_backend.py", "test_ov_cache_repair.py", "test_ov_detect.py", "test_ov_export.py",
                     "test_profile.py", "test_profile_backends.py"), "openvino-and-profile"),
    **dict.fromkeys(("test_ray.py", "test_ray_reaper.py", "test_ray_identity.py", "test_video_resume.py"),
                    "ray-and-segments"),
    **dict.fromkeys(("test_browser.py", "test_browser_identity.py", "test_browser_layout.py", "test_browser_tables.py",
                     "test_browser_upscale.py", "test_browser_video.py", "test_browser_visitor.py"), "browser"),
    **dict.fromkeys(("test_restorer.py", "test_mode_ordering.py"), "gen512"),
}
# The longest groups and modules (by `--durations` on the 2-core machines, 60-180 s each), started
# first; every other module follows in its usual order.
FIRST = ("browser", "ray-and-segments", "openvino-and-profile", "gen512", "test_app_tasks.py", "test_advice.py",
         "test_app_video_convert.py", "test_tasks.py", "test_fast_strips.py", "test_oom.py")


def _take_own_share() -> None:
    """This worker's temporary folder and CPUs (nothing outside pytest-xdist's workers)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw"):
        return
    # A temporary folder of its own: the app's upload and result folder, Ray's session files and the
    # tips' scratch folders live under it, and one worker's sweeps must not touch the other's files.
    own = Path(tempfile.gettempdir()) / f"gpen-tests-{worker}"
    own.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    if count < 2 or not ALL_CPUS:
        return
    cpus = sorted(ALL_CPUS)
    share = len(cpus) // count
    if share < 1:  # more workers than CPUs: sharing them out is impossible, leave the kernel to it
        return
    index = int(worker[2:]) % count
    os.sched_setaffinity(0, cpus[index * share:(index + 1) * share])


_take_own_share()


def group_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module's group, or its module (the file's name: every
    test module is in tests/)."""
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with GROUPS: each group's modules are one unit of work, on one worker.
    (xdist's own ``loadgroup`` renames nodes to group them, which pytest 9 no longer allows.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupedFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupedFiles(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable: modules stay whole, in order


@pytest.fixture()
def whole_machine() -> Iterator[None]:
    """Every CPU of the run for this test, its torch threads and the processes it starts, as a user's
    process has them: for the tests whose subject changes with the thread count (torch's OpenMP team,
    what importing the engine reserves per thread). Under the workers that test shares the cores with
    the other worker while it runs; elsewhere nothing changes."""
    import torch

    if not ALL_CPUS or os.sched_getaffinity(0) == ALL_CPUS:
        yield
        return
    mask, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, ALL_CPUS)
    torch.set_num_threads(len(ALL_CPUS))
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        os.sched_setaffinity(0, mask)


# Each worker's busy time and its longest units of work, summed from the reports the controller gets:
# the suite's wall time is the busier worker's, so this says where balancing (GROUPS, FIRST) can help.
_BUSY: dict[str, dict[str, float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set by pytest-xdist on the controller; None inside a worker
    worker = getattr(getattr(node, "gateway", None), "id", None)
    if worker is not None:
        units = _BUSY.setdefault(worker, {})
        unit = group_of(report.nodeid)
        units[unit] = units.get(unit, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: object) -> None:
    if not _BUSY:
        return
    write = terminalreporter.write_line  # type: ignore[attr-defined]
    write("")
    for worker, units in sorted(_BUSY.items()):
        top = sorted(units.items(), key=lambda kv: -kv[1])[:8]
        write(f"{worker}: {sum(units.values()):.0f} s of tests in {len(units)} modules; longest: "
              + ", ".join(f"{name} {s:.0f} s" for name, s in top))
