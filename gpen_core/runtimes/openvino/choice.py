"""``auto``'s measured runtime choice for one network as a typed value: the runtime and its reason in parts.

The parts stay apart so a caller that builds on a choice (a mode that keeps to torch, the model
cache's first-use rules) words it from the parts; no sentence is parsed back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    """How a torch-against-OpenVINO timing of one network runs and where its medians go."""

    runs: int = 3  # timed calls of each runtime, interleaved, after one warm-up each
    threads: int | None = None  # torch and OpenVINO threads while timing (None: as they are)
    record: bool = True  # write the medians for ``--backend auto`` (generator.record_speed)
    source: str = ""  # what the record says measured them ("" : a default naming the network)
