"""What stays in memory between a request's stages: the lifetime policy handed to the model cache. ``RESIDENT``
keeps every network for the next request (the app, a folder, a video's frames); ``ONE_SHOT`` serves one request
(the CLI with one photo): each network loads when its stage starts and goes when it ends, so the peak is the
largest stage's, not the sum of the networks.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

Stage = Literal["detect", "upscale", "restore", "paste"]
# The networks a request loads, by their part in it (the runtime choice and the lifetime policy name them so).
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
    """How long a loaded network stays (see the module docstring)."""

    RESIDENT = "resident"
    ONE_SHOT = "one-shot"

    def drops_after(self, stage: Stage) -> tuple[Network, ...]:
        """The networks that go when ``stage`` ends."""
        return _ONE_SHOT_DROPS[stage] if self is Lifetime.ONE_SHOT else ()

    def generator_after_detection(self, runtime: str) -> bool:
        """Whether the generator loads once detection is over rather than first: one-shot on OpenVINO only, so
        it and the detector are never resident together; a torch one loads first, onto the smallest heap
        (measured: docs/performance.md, "One request per process")."""
        return self is Lifetime.ONE_SHOT and runtime == "openvino"

    @property
    def lazy_parser(self) -> bool:
        """The parser loads at the first face it masks (one-shot: after the generator has gone)."""
        return self is Lifetime.ONE_SHOT

    @property
    def conversion_pays(self) -> bool:
        """Whether converting a network to OpenVINO inside a request can pay for itself: a first use costs tens
        of seconds and about twice the request's memory (docs/performance.md, "One request per process"), which
        only work that keeps the network earns back."""
        return self is Lifetime.RESIDENT
