"""How long a measurement has left: from this machine's own measured steps, never a fixed guess.

A run (the tips, the hardware check) is a known list of steps, each of a kind ("restore:balanced", a mode's
name...). A step still to run is expected to take, in this order: the mean of the finished steps of its kind;
a prior measured here; its ``reference`` time scaled by this machine's speed; the mean of the finished steps of
its family (the kind up to its first ":"); with ``guess_from_all``, the mean of every finished step. Else it is
counted as untimed: a mean of unlike steps (a 1 s encode, a 20 s restore) would overstate the time left.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Eta:
    """Time left of ``plan`` (the kind of each step, in order)."""

    plan: Sequence[str]
    prior: Mapping[str, float] = field(default_factory=dict)  # seconds per step of a kind, measured before
    reference: Mapping[str, float] = field(default_factory=dict)  # on a reference machine: only ratios count (scale())
    clock: Callable[[], float] = time.monotonic
    # An unmeasured kind of no measured family takes the mean of all finished steps (the hardware
    # check's modes are alike enough); False: it is left out and counted as untimed (the tips).
    guess_from_all: bool = True
    finished: list[tuple[str, float]] = field(default_factory=list)
    _started: float | None = None

    def start(self) -> None:
        self._started = self.clock()

    def finish(self) -> float:
        """The running step (the next in ``plan``) has ended; its seconds."""
        now = self.clock()
        took = now - (self._started if self._started is not None else now)
        self.finished.append((self.plan[len(self.finished)], took))
        self._started = now  # the next step starts when this one ends unless told otherwise
        return took

    @property
    def started(self) -> bool:
        return self._started is not None

    def per_step(self, kind: str) -> float | None:
        """Seconds a step of ``kind`` is expected to take here (None: nothing to go on yet)."""
        same = [s for k, s in self.finished if k == kind]
        if same:
            return statistics.mean(same)
        if kind in self.prior:
            return float(self.prior[kind])
        scale = self.scale()
        if scale is not None and kind in self.reference:
            return self.reference[kind] * scale
        family = [s for k, s in self.finished if k.split(":", 1)[0] == kind.split(":", 1)[0]]
        if family:
            return statistics.mean(family)
        if self.finished and self.guess_from_all:
            return statistics.mean(s for _, s in self.finished)
        return None

    def scale(self) -> float | None:
        """This machine's speed against the reference: seconds the finished steps with a reference
        took over the seconds their reference gives (2.0: twice as slow); None before any finished."""
        done = [(took, self.reference[k]) for k, took in self.finished if k in self.reference]
        ref = sum(r for _, r in done)
        return sum(t for t, _ in done) / ref if done and ref > 0 else None

    def untimed(self) -> int:
        """Steps still to run that nothing measured yet tells the time of."""
        return sum(self.per_step(k) is None for k in self.plan[len(self.finished):])

    def left(self) -> float | None:
        """Seconds until the timed steps of the plan are done (the running step's elapsed time taken off);
        None while no step still to run can be timed."""
        todo = list(self.plan[len(self.finished):])
        if not todo:
            return 0.0
        each = [self.per_step(k) for k in todo]
        if all(e is None for e in each) or (self.guess_from_all and any(e is None for e in each)):
            return None
        running = self.clock() - self._started if self._started is not None else 0.0
        return max(0.0, sum(e for e in each if e is not None) - min(running, each[0] or 0.0))


def duration_text(seconds: float) -> str:
    """'40 s' (to 5 s, at least 5) under 90 s, else '3 min': every time estimate shown, after "about"."""
    return f"{max(5, round(seconds / 5) * 5):.0f} s" if seconds < 90 else f"{round(seconds / 60):.0f} min"


def left_text(seconds: float | None, untimed: int = 0) -> str:
    """'about 40 s left', 'about 3 min left', 'about 40 s left, and 4 steps not timed yet'; '' when unknown."""
    if seconds is None:
        return ""
    text = f"about {duration_text(seconds)} left"
    if untimed:
        text += f", and {untimed} step{'s' if untimed > 1 else ''} not timed yet"
    return text
