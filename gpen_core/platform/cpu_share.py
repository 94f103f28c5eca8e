"""How many of this process's cores other programs leave it right now.

PyTorch's CPU kernels run in an OpenMP team that waits for all its threads at every layer. When
another program keeps one of the cores busy, the thread the kernel scheduler puts beside it runs
in slices, and the whole team waits for it at each barrier: measured on the AMX Xeon (2 cores,
GPEN-BFR-256 on the fast float32 path, `benchmarks/bench_forward.py --sizes 256 --paths fast`,
load average 12-15 from other programs), **2.99 s a face on 2 threads against 0.70 s on 1**. On a
quiet machine 2 threads are the faster (0.11 s against about 0.2 s). So a request running networks
on PyTorch asks, just before it starts, how many cores are free, and runs that many threads.
(OpenVINO keeps its own thread pool, which degrades gracefully: it is left alone.)

The measure: the kernel's count of runnable threads machine-wide (``/proc/loadavg``'s fourth field,
an instantaneous figure, not the load *average*), less this process's own runnable threads, as
the median of a few samples a millisecond apart so a passing blip does not decide. Linux only;
elsewhere no answer (None), and the caller keeps its thread count.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CoreShare:
    """What the machine leaves this process: ``cores`` it may run on (its affinity), ``others``
    runnable threads of other processes (median of the samples)."""

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


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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
    return CoreShare(cores=_cores(), others=int(statistics.median_low(counts)))
