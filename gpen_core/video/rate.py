"""The time left of a clip from this run's own frames: :class:`FrameRate`. The clock starts at the first
report (loading, look-ahead and frames a resume kept are no measure of the speed); until a second, no estimate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """The speed so far and what it predicts; None where nothing is known yet."""

    seconds_per_frame: float | None  # this run's frames since the first report
    left_s: float | None  # None: no estimate yet, or the clip's frame count is unknown


class FrameRate:
    """Call with (frames done, frames expected or 0 when unknown) at each report; returns a :class:`Rate`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._first: tuple[int, float] | None = None

    def __call__(self, done: int, expected: int) -> Rate:
        now = self._clock()
        if self._first is None or done < self._first[0]:
            self._first = (done, now)
            return Rate(None, None)
        frames, elapsed = done - self._first[0], now - self._first[1]
        if frames <= 0 or elapsed <= 0:
            return Rate(None, None)
        per_frame = elapsed / frames
        return Rate(per_frame, max(0, expected - done) * per_frame if expected > 0 else None)
