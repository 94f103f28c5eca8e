"""How many of this process's cores other programs leave it right now (PyTorch's OpenMP team waits for all its
threads at every layer; measured: docs/performance.md, "PyTorch's threads on a busy machine"): runnable threads
machine-wide (``/proc/loadavg``, instantaneous) less this process's own, the median of a few samples. Linux only.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CoreShare:
    """``cores`` this process may run on (:func:`usable_cores`), ``others``: runnable threads of other processes."""

    cores: int
    others: int

    @property
    def free(self) -> int:
        """Cores not taken by other programs, at least 1."""
        return max(1, self.cores - self.others)


def _running_machine_wide() -> int:
    """Runnable threads on the whole machine now (``/proc/loadavg``: "1.0 0.5 0.2 RUNNING/TOTAL ...")."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])


def _running_here() -> int:
    """This process's threads that are runnable now (the one reading this among them)."""
    count = 0
    for task in os.scandir("/proc/self/task"):
        try:
            stat = Path(task.path, "stat").read_text()
        except OSError:  # the thread ended while we looked
            continue
        if stat[stat.rindex(")") + 2] == "R":  # the state follows the command name, which may hold spaces
            count += 1
    return count


# A container's CPU quota: cgroup v2's "QUOTA PERIOD" (or "max PERIOD"), then v1's pair (quota -1: none).
CPU_QUOTA_FILES = (("/sys/fs/cgroup/cpu.max",),
                   ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def usable_cores(quota_files: tuple[tuple[str, ...], ...] = CPU_QUOTA_FILES) -> int:
    """The cores this process may run on: its CPU affinity, and no more than a container's CPU quota
    (`docker --cpus`, a Kubernetes limit), rounded up. Threads past the quota only wait to be throttled."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for files in quota_files:
        try:
            words = " ".join(Path(f).read_text() for f in files).split()
            quota, period = words[0], int(words[1])
            if quota not in ("max", "-1") and period > 0:
                return max(1, min(cores, math.ceil(int(quota) / period)))
        except (OSError, ValueError, IndexError):
            continue
    return cores


def sample(samples: int = 5, gap_s: float = 0.001, machine: Callable[[], int] = _running_machine_wide,
           here: Callable[[], int] = _running_here) -> CoreShare | None:
    """This process's share of the cores now; None where the kernel does not say (not Linux)."""
    counts = []
    try:
        for i in range(samples):
            if i:
                time.sleep(gap_s)
            counts.append(max(0, machine() - here()))
    except (OSError, ValueError, IndexError):
        return None
    return CoreShare(cores=usable_cores(), others=int(statistics.median_low(counts)))
