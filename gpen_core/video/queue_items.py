"""What a clip's threads hand each other in one pass (:mod:`gpen_core.video.stream`), typed, so no reader counts
positions in a tuple."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DecodedFrame:
    """A frame as decoded: its output pts and time (trim shift applied), upright RGB, rotation and colour tags."""

    pts: int
    time: float
    rgb: np.ndarray
    rotation: int
    colour: Any


@dataclass(frozen=True)
class DecodeStopped:
    """The decoder stopped: what it said. What decoded before it is written."""

    detail: str


@dataclass(frozen=True)
class AudioItem:
    """For the writer's route ``index``: a packet copied as it is, or a decoded frame to re-encode."""

    index: int
    data: Any


@dataclass(frozen=True)
class FrameToWrite:
    """A restored frame for the encoder, with its source pts and colour tags."""

    image: np.ndarray
    pts: int
    colour: Any
