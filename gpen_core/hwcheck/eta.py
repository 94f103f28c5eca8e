"""How long a measurement has left, from this machine's own measured steps. A run is a known list of steps, each of
a kind ("restore:balanced", a mode's name); a step still to run is expected to take the mean of the finished steps
of its kind, else its ``reference`` time scaled by this machine's speed, else the mean of its family (the kind up to
its first ":"), else (``guess_from_all``) the mean of every finished step; else it is untimed: a mean of unlike
steps (a 1 s encode, a 20 s restore) would overstate the time left."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpen_core.progress import Progress, left_text


@dataclass
class Eta:
    """Time left of ``plan`` (the kind of each step, in order); with ``report``, a check's progress over it
    (:meth:`say`: one unit a step), told a step has finished when the progress passes its end."""

    plan: Sequence[str]
    reference: Mapping[str, float] = field(default_factory=dict)  # on a reference machine: only ratios count (scale())
    clock: Callable[[], float] = time.monotonic
    # An unmeasured kind of no measured family takes the mean of all finished steps (the hardware
    # check's modes are alike enough); False: it is left out and counted as untimed (the tips).
    guess_from_all: bool = True
    report: Progress = lambda f, d: None  # where say() reports
    finished: list[tuple[str, float]] = field(default_factory=list)
    _started: float | None = None

    def start(self) -> None:
        self._started = self.clock()

    def say(self, units: float, text: str) -> None:
        """To ``report``: ``units`` of the plan done, the running step's fraction included (2.5: halfway
        through the third), and the time left."""
        # A step has finished when the progress reaches its end (the next step's first report).
        while len(self.finished) < min(len(self.plan), math.floor(units + 1e-6)):
            self.finish()
        left = left_text(self.left(), self.untimed()) if len(self.finished) < len(self.plan) else ""
        # The time left first: a terminal's progress line cuts a long step's description short.
        self.report(min(1.0, units / max(1, len(self.plan))), f"{left} · {text}" if left else text)

    def part(self, start: float, weight: float) -> Progress:
        """A Progress for a part of the check: its own 0..1 mapped onto ``weight`` steps from ``start``."""
        return lambda f, d: self.say(start + f * weight, d)

    def finish(self) -> float:
        """The running step (the next in ``plan``) has ended; its seconds."""
        now = self.clock()
        took = now - (self._started if self._started is not None else now)
        self.finished.append((self.plan[len(self.finished)], took))
        self._started = now  # the next step starts when this one ends unless told otherwise
        return took

    def per_step(self, kind: str) -> float | None:
        """Seconds a step of ``kind`` is expected to take here (None: nothing to go on yet)."""
        same = [s for k, s in self.finished if k == kind]
        if same:
            return statistics.mean(same)
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
        """Seconds until the plan's timed steps are done, less the running step's time; None while none can be timed."""
        each = [self.per_step(k) for k in self.plan[len(self.finished):]]
        if not each:
            return 0.0
        if all(e is None for e in each) or (self.guess_from_all and any(e is None for e in each)):
            return None
        running = self.clock() - self._started if self._started is not None else 0.0
        return max(0.0, sum(e for e in each if e is not None) - min(running, each[0] or 0.0))


# Seconds each step takes in a typical first check on the Intel Xeon with AMX (2 shared cores, a fresh models
# folder): the mean share over five runs times their mean total (docs/performance.md, "How long the hardware
# check takes"). Only the ratios count. Task rows are per (task, mode); ":warm": it converts first, unmeasured.
REFERENCE_S: dict[str, float] = {
    "generator:256:float32": 19.1, "generator:512:bfloat16": 38.4, "generator:512:float32": 56.0,
    "parser:256:bfloat16": 32.9, "parser:512:float32": 122.8,
    "detector:mobilenet0.25": 18.5, "detector:resnet50": 66.5,
    "low": 28.2, "faces-only": 12.4, "balanced": 18.1, "quality": 71.4,
    "colorize:faces-only": 17.2, "colorize:balanced": 19.8, "colorize:quality": 33.3,
    "inpaint:faces-only": 19.6, "inpaint:balanced": 20.4, "inpaint:quality": 32.9,
    "seg2face:faces-only:warm": 11.9, "seg2face:balanced": 5.9, "seg2face:quality": 8.9,
}
# Of each backend step above, the OpenVINO conversion: a network this models folder has a speed record for
# was converted by an earlier check and loads from the cache (kind ":cached": its reference less this).
# generator:512:float32 reuses the bfloat16 step's conversion of the same checkpoint.
CONVERT_S: dict[str, float] = {
    "generator:256:float32": 7.0, "generator:512:bfloat16": 15.8, "generator:512:float32": 0.0,
    "parser:256:bfloat16": 23.9, "parser:512:float32": 47.1,
    "detector:mobilenet0.25": 8.2, "detector:resnet50": 16.5,
}
REFERENCE: dict[str, float] = {**REFERENCE_S, **{f"{k}:cached": REFERENCE_S[k] - c for k, c in CONVERT_S.items()}}


def backend_kinds(spec: Mapping[str, Any] | None, speed_keys: Sequence[str] = ()) -> list[str]:
    """The backend comparison's steps in the order it runs them (generators, parsers, detectors), as
    :data:`REFERENCE` kinds; ``speed_keys``: this CPU's speed records in the models folder (a step
    with one is ``:cached``). [] when the comparison does not run."""
    if spec is None:
        return []
    steps = [(f"generator:{p['size']}:{p['dtype']}", f"{p['size']}-{p['dtype']}") for p in spec["pairs"]]
    steps += [(f"parser:{p['size']}:{p['dtype']}", f"parsenet-{p['size']}-{p['dtype']}") for p in spec.get("parse", ())]
    steps += [(f"detector:{n}", f"retinaface-{n}-") for n in spec.get("detect", ())]
    return [kind + (":cached" if any(k.startswith(key) for k in speed_keys) else "") for kind, key in steps]


def task_kinds(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The task rows' steps as :data:`REFERENCE` kinds: "colorize:quality", "seg2face:faces-only:warm"."""
    return [f"{s['gpen_task']}:{s['mode']}" + (":warm" if s.get("warm") else "") for s in specs]
