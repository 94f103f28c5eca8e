"""``auto``'s runtime choice for one network as a typed value (its reason in parts: no sentence is parsed back),
and how torch is timed against OpenVINO."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

Runtime = Literal["torch", "openvino"]


@dataclass(frozen=True)
class BackendChoice:
    """torch or OpenVINO for one network, and why."""

    runtime: Runtime
    # What decided it: "asked for", "measured faster here: …", "measured faster on AVX2 CPUs: …".
    reason: str
    # What the reason rests on when it is not this machine's own measurement: "not yet measured
    # on this machine (the hardware check measures it here)"; "" when nothing is assumed.
    caveat: str = ""

    @property
    def why(self) -> str:
        """The reason and its caveat in one sentence, for a result's notes and the report."""
        return f"{self.reason}; {self.caveat}" if self.caveat else self.reason


@dataclass(frozen=True)
class SpeedRun:
    """How a torch-against-OpenVINO timing of one network runs (its medians are recorded for ``auto``)."""

    runs: int  # timed calls of each runtime, interleaved, after one warm-up each
    threads: int | None  # torch and OpenVINO threads while timing (None: as they are)
    source: str  # what the record says measured them


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """torch runs ``threads`` threads inside the block (None: as it does), restored after; yields the count before."""
    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        yield old
    finally:
        torch.set_num_threads(old)


def time_interleaved(calls: dict[str, Callable[[], Any]], runs: int,
                     before_run: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One warm-up of each call, then ``runs`` rounds, the order flipped every round; ``{"<name>_s": median wall
    seconds, "<name>_times": every time}``, rounded to 0.1 ms."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls.items())
    for r in range(max(1, runs)):
        if before_run is not None:
            before_run(r)
        for name, call in order if r % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    out: dict[str, Any] = {}
    for name, ts in times.items():
        out[f"{name}_s"], out[f"{name}_times"] = round(statistics.median(ts), 4), [round(v, 4) for v in ts]
    return out
