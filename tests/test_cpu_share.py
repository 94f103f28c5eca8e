"""PyTorch runs as many threads as the cores other programs leave free: a team of threads sharing a core
with another program waits for its slowest member at every layer (4x slower measured), so a busy
machine gets fewer threads, said in the result, and a quiet one all of them."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gpen_core.engine import threads as engine_threads
from gpen_core.engine.threads import TorchThreads
from gpen_core.modes import get_mode
from gpen_core.platform import cpu_share
from gpen_core.platform.cpu_share import CoreShare

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/loadavg and /proc/self/task are Linux's")


@pytest.fixture()
def two_threads() -> Iterator[None]:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


def _machine(others: int, cores: int = 2):
    """A stand-in for cpu_share.sample: ``others`` runnable threads of other programs on ``cores`` cores."""
    return lambda *a, **k: CoreShare(cores=cores, others=others)


def test_the_median_of_the_samples_decides_so_a_passing_blip_does_not() -> None:
    counts = iter([3, 1, 1, 9, 1])  # machine-wide runnable threads, sample by sample; this process: 1 of them
    share = cpu_share.sample(samples=5, gap_s=0.0, machine=lambda: next(counts), here=lambda: 1)
    assert share is not None and share.others == 0 and share.free == share.cores
    counts = iter([2, 3, 2, 2, 9])  # one other program runs throughout
    share = cpu_share.sample(samples=5, gap_s=0.0, machine=lambda: next(counts), here=lambda: 1)
    assert share is not None and share.others == 1


def test_free_cores_are_never_fewer_than_one() -> None:
    assert CoreShare(cores=2, others=0).free == 2
    assert CoreShare(cores=2, others=1).free == 1
    assert CoreShare(cores=2, others=7).free == 1


def test_an_unreadable_kernel_gives_no_answer_not_a_guess() -> None:
    def gone() -> int:
        raise OSError("no /proc here")

    assert cpu_share.sample(machine=gone) is None


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2, `docker --cpus 1.5`: 1.5 cores round up to 2
    ({"cpu.max": "50000 100000\n"}, 1),  # half a core: still one thread
    ({"cpu.max": "max 100000\n"}, None),  # no quota: the affinity decides
    ({"quota": "100000\n", "period": "100000\n"}, 1),  # cgroup v1 pair: one core
    ({"quota": "-1\n", "period": "100000\n"}, None),
    ({}, None),  # no cgroup files (not Linux, or not mounted)
    ({"cpu.max": "garbage"}, None),
])
def test_a_containers_cpu_quota_caps_the_usable_cores(tmp_path, files: dict[str, str], quota: int | None) -> None:
    """Threads past a container's quota only wait to be throttled, so the quota caps the count the affinity gives."""
    import os

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    got = cpu_share.usable_cores(((str(tmp_path / "cpu.max"),), (str(tmp_path / "quota"), str(tmp_path / "period"))))
    assert got == (affinity if quota is None else min(affinity, quota))


@linux_only
def test_busy_programs_on_the_machine_are_counted_and_this_process_is_not() -> None:
    idle = cpu_share.sample()
    assert idle is not None and idle.cores >= 1
    # Busy threads of this very process (its own decode/encode) are its own work, not another program's.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)  # both started and spinning
        share = cpu_share.sample()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert share is not None
    # Other load on the machine can only add to what the two spinning programs make.
    assert share.others >= 2, share
    assert share.free == max(1, share.cores - share.others)


def test_a_busy_machine_gets_fewer_threads_said_once_and_the_count_comes_back(monkeypatch: pytest.MonkeyPatch,
                                                                              two_threads: None) -> None:
    import torch

    monkeypatch.setattr(cpu_share, "sample", _machine(others=1))
    with TorchThreads(get_mode("balanced"), "cpu") as threads:
        assert torch.get_num_threads() == 1
        threads.refresh()
    assert torch.get_num_threads() == 2
    assert len(threads.notes) == 1 and "PyTorch ran on 1 of 2 threads" in threads.notes[0], threads.notes
    assert "other programs were keeping 1 thread busy" in threads.notes[0]


def test_a_quiet_machine_gets_every_thread_the_mode_allows_and_no_note(monkeypatch: pytest.MonkeyPatch,
                                                                        two_threads: None) -> None:
    import torch

    monkeypatch.setattr(cpu_share, "sample", _machine(others=0))
    with TorchThreads(get_mode("balanced"), "cpu") as threads:
        assert torch.get_num_threads() == 2
    assert threads.notes == []
    # The mode's own cap still holds on a quiet machine.
    with TorchThreads(replace(get_mode("low"), threads=1), "cpu") as threads:
        assert torch.get_num_threads() == 1
    assert threads.notes == [] and torch.get_num_threads() == 2


def test_a_clip_follows_the_load_as_it_moves(monkeypatch: pytest.MonkeyPatch, two_threads: None) -> None:
    import torch

    monkeypatch.setattr(engine_threads, "RECHECK_S", 0.0)
    load = {"others": 0}
    monkeypatch.setattr(cpu_share, "sample", lambda *a, **k: CoreShare(cores=2, others=load["others"]))
    with TorchThreads(get_mode("low"), "cpu") as threads:
        assert torch.get_num_threads() == 2 and threads.notes == []
        load["others"] = 1  # another program starts mid-clip
        threads.refresh()
        assert torch.get_num_threads() == 1 and len(threads.notes) == 1
        load["others"] = 0  # and stops
        threads.refresh()
        assert torch.get_num_threads() == 2
    # What the clip said stays: it did run on fewer threads for a while.
    assert len(threads.notes) == 1


def test_cuda_requests_leave_the_cpu_threads_alone(monkeypatch: pytest.MonkeyPatch, two_threads: None) -> None:
    import torch

    asked = []
    monkeypatch.setattr(cpu_share, "sample", lambda *a, **k: asked.append(1) or CoreShare(cores=2, others=1))
    with TorchThreads(get_mode("balanced"), "cuda") as threads:
        assert torch.get_num_threads() == 2
    assert asked == [] and threads.notes == []


def test_a_photo_request_on_a_busy_machine_says_so_in_its_notes(monkeypatch: pytest.MonkeyPatch, two_threads: None) -> None:
    import numpy as np
    import torch

    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    monkeypatch.setattr(cpu_share, "sample", _machine(others=1))
    crop, opts = np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="low", aligned=True)
    res = Restorer(device="cpu", synthetic_weights=True)(crop, opts)  # a random GPEN-BFR-256: one aligned face
    assert any("PyTorch ran on 1 of 2 threads" in n for n in res.notes), res.notes
    assert torch.get_num_threads() == 2  # given back after the request
