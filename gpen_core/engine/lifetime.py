"""What stays in memory between a request's stages: ``RESIDENT`` keeps every network for the next request;
``ONE_SHOT`` (one photo) lets each go when its stage ends, so the peak is the largest stage's, not their sum."""

from __future__ import annotations

from enum import Enum
from typing import Literal

Stage = Literal["detect", "upscale", "restore", "paste"]
# The networks a request loads, by their part in it.
Network = Literal["generator", "detector", "parser", "upscaler"]

# One-shot: what each stage's end lets go. The generator goes after the last face (restore) and,
# should a face have been skipped (inpainting's untouched faces), again after pasting.
_ONE_SHOT_DROPS: dict[str, tuple[Network, ...]] = {
    "detect": ("detector",),
    "upscale": ("upscaler",),
    "restore": ("generator",),
    "paste": ("generator", "parser"),
}


class Lifetime(Enum):
    """How long a loaded network stays."""

    RESIDENT = "resident"
    ONE_SHOT = "one-shot"

    def drops_after(self, stage: Stage) -> tuple[Network, ...]:
        """The networks that go when ``stage`` ends."""
        return _ONE_SHOT_DROPS[stage] if self is Lifetime.ONE_SHOT else ()

    def generator_after_detection(self, runtime: str) -> bool:
        """Whether the generator loads after detection: one-shot on OpenVINO only (a torch one loads first, onto
        the smallest heap; measured: docs/performance.md, "One request per process")."""
        return self is Lifetime.ONE_SHOT and runtime == "openvino"

    @property
    def lazy_parser(self) -> bool:
        """The parser loads at the first face it masks (one-shot: after the generator has gone)."""
        return self is Lifetime.ONE_SHOT

    @property
    def conversion_pays(self) -> bool:
        """Whether converting to OpenVINO inside a request can pay: only work that keeps the network earns back
        a first use's cost (docs/performance.md, "One request per process")."""
        return self is Lifetime.RESIDENT
