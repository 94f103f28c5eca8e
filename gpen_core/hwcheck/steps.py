"""The hardware check's steps (each network the backend comparison times, each mode, each task row) and the time
it has left: each step's :data:`REFERENCE_S` scaled by what the finished steps took against theirs
(:meth:`gpen_core.hwcheck.eta.Eta.scale`), so after the first step the estimate follows this machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpen_core.hwcheck.eta import Eta, left_text
from gpen_core.progress import Progress

# Seconds each step takes in a typical first check on the Intel Xeon with AMX (2 shared cores, a fresh models
# folder): the mean share over five runs times their mean total (docs/performance.md, "How long the hardware
# check takes"). Only the ratios count. Task rows are per (task, mode); ":warm": it converts first, unmeasured.
REFERENCE_S: dict[str, float] = {
    "generator:256:float32": 19.1,
    "generator:512:bfloat16": 38.4,
    "generator:512:float32": 56.0,
    "parser:256:bfloat16": 32.9,
    "parser:512:float32": 122.8,
    "detector:mobilenet0.25": 18.5,
    "detector:resnet50": 66.5,
    "low": 28.2,
    "faces-only": 12.4,
    "balanced": 18.1,
    "quality": 71.4,
    "colorize:faces-only": 17.2,
    "colorize:balanced": 19.8,
    "colorize:quality": 33.3,
    "inpaint:faces-only": 19.6,
    "inpaint:balanced": 20.4,
    "inpaint:quality": 32.9,
    "seg2face:faces-only:warm": 11.9,
    "seg2face:balanced": 5.9,
    "seg2face:quality": 8.9,
}
# Of each backend step above, the OpenVINO conversion: a network this models folder has a speed record for
# was converted by an earlier check and loads from the cache (kind ":cached": its reference less this).
CONVERT_S: dict[str, float] = {
    "generator:256:float32": 7.0,
    "generator:512:bfloat16": 15.8,
    "generator:512:float32": 0.0,  # reuses the bfloat16 step's conversion of the same checkpoint
    "parser:256:bfloat16": 23.9,
    "parser:512:float32": 47.1,
    "detector:mobilenet0.25": 8.2,
    "detector:resnet50": 16.5,
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


class Steps:
    """The check's progress over ``kinds`` (one unit a step): the fraction done, and the time left from
    :class:`gpen_core.hwcheck.eta.Eta`, told a step has finished when the progress passes its end."""

    def __init__(self, kinds: Sequence[str], first: int, report: Progress,
                 reference: Mapping[str, float] = REFERENCE, clock: Callable[[], float] = time.monotonic) -> None:
        self.first = first  # the backend comparison's steps, before the modes'
        self.total = max(1, len(kinds))
        self.report = report
        self.eta = Eta(list(kinds), reference=reference, clock=clock)

    def say(self, units: float, text: str) -> None:
        """``units``: steps done, the running one's fraction included (2.5: halfway through the third)."""
        eta = self.eta
        if not eta.started:
            eta.start()
        # A step has finished when the progress reaches its end (the next step's first report).
        while len(eta.finished) < min(len(eta.plan), math.floor(units + 1e-6)):
            eta.finish()
        left = left_text(eta.left()) if len(eta.finished) < len(eta.plan) else ""
        # The time left first: a terminal's progress line cuts a long step's description short.
        self.report(min(1.0, units / self.total), f"{left} · {text}" if left else text)

    def part(self, start: float, weight: float) -> Progress:
        """A Progress for a part of the check: its own 0..1 mapped onto ``weight`` steps from ``start``."""
        return lambda f, d: self.say(start + f * weight, d)
