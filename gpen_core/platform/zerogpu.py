"""Hugging Face ZeroGPU: how many seconds of GPU to ask ``spaces.GPU`` for, from measured work.

On a ZeroGPU Space the GPU exists only inside a function decorated with
``spaces.GPU(duration=...)``; ``duration`` may be a callable that gets the call's own
arguments and returns seconds. Asking for less gets a visitor through the queue
sooner; asking for too little aborts the request. The figure here is

    floor + faces × seconds per face × margin   (capped)

with ``faces`` the most the request can restore (1 for an aligned crop, else its
max-faces setting: faces are only counted after detection, inside the GPU call), and
``seconds per face`` the slowest recent one measured by this Space's own requests
(restore + align + paste over the faces restored), or, before any was measured, an
estimate (:data:`ESTIMATED_S_PER_FACE`, labelled so). ``floor`` covers what does not
grow with faces: loading the models into a fresh GPU slot, decoding, detecting, encoding.

Nothing here imports torch or touches CUDA.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

FLOOR_S = 20
CAP_S = 120  # what ZeroGPU grants a visitor at most without a paid plan
MARGIN = 1.5
# An estimate, not a measurement: GPEN-BFR-512 + paste per face on a ZeroGPU H200 slice
# has not been measured here yet; deliberately high so the first requests are not cut off.
ESTIMATED_S_PER_FACE = 1.0


def on_zerogpu() -> bool:
    """A ZeroGPU Space (``SPACES_ZERO_GPU``, read as the ``spaces`` package reads it)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


class FaceClock:
    """Seconds per face measured by this process's finished GPU requests (the last 20)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[float] = deque(maxlen=20)

    def record(self, record: Mapping[str, Any]) -> None:
        """Take one result record (``cli.result_record``: the app's JSON output); CPU runs are ignored."""
        faces = int(record.get("faces") or 0)
        if faces < 1 or not str(record.get("device", "")).startswith("cuda"):
            return
        t = record.get("timings") or {}
        per_face = sum(float(t.get(k) or 0.0) for k in ("restore_s", "align_s", "paste_s")) / faces
        with self._lock:
            self._samples.append(per_face)

    def seconds_per_face(self) -> tuple[float, bool]:
        """(seconds, measured?): the slowest recent measurement, or the labelled estimate."""
        with self._lock:
            if self._samples:
                return max(self._samples), True
        return ESTIMATED_S_PER_FACE, False

    def duration(self, max_faces: float | int | None, aligned: bool) -> int:
        """Seconds to ask ``spaces.GPU`` for one request (see the module docstring)."""
        faces = 1 if aligned else max(1, int(max_faces or 1))
        per_face, _ = self.seconds_per_face()
        return int(min(CAP_S, max(FLOOR_S, FLOOR_S + faces * per_face * MARGIN)))


CLOCK = FaceClock()

HARDWARE_CHECK_UNAVAILABLE = (
    "The Hardware check is not available on a ZeroGPU Space: it measures each mode in worker processes, "
    "and ZeroGPU lends its GPU only to this app's restore calls. Every restore still shows its own measured "
    "peaks; run `python -m gpen_core profile` on your own machine to measure every mode."
)
