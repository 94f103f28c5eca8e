"""What every stage of one attempt reads, as one value: the model cache, the device, the mode, the
options and who hears the progress.

A stage takes it instead of five loose arguments that always travel together; each attempt makes
its own (stepping down to a lighter mode is a new attempt), nothing changes one in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpen_core.modes import MemoryMode, Task, get_task
from gpen_core.options import RestoreOptions
from gpen_core.progress import Progress

if TYPE_CHECKING:
    from gpen_core.engine.model_cache import ModelCache


def silent(fraction: float, message: str) -> None:
    """No progress of its own: a video's frames (the caller counts frames)."""


@dataclass(frozen=True)
class RequestContext:
    """One attempt's surroundings (see the module docstring)."""

    models: "ModelCache"  # the restorer's networks and their lifetime policy
    device: str  # "cpu", "cuda", "cuda:1"
    mode: MemoryMode  # the mode this attempt runs in (a step-down is a new context)
    opts: RestoreOptions  # validated
    report: Progress = silent

    @property
    def task(self) -> Task:
        """The GPEN task ``opts`` asks for."""
        return get_task(self.opts.task)
