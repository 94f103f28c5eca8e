"""Hugging Face ZeroGPU: how many seconds of GPU to ask ``spaces.GPU(duration=...)`` for (less gets a visitor
through the queue sooner, too little aborts the request), capped at :data:`CAP_S`::

    floor + load + (faces × seconds per face + upscaled megapixels × seconds per megapixel) × margin

Each rate is the slowest of this Space's recent GPU requests, or a labelled ``ESTIMATED_`` figure before any.
Nothing here imports torch or touches CUDA.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

FLOOR_S = 20  # decoding, detecting and encoding
CAP_S = 120  # what ZeroGPU grants a visitor at most without a paid plan
MARGIN = 1.5
# Estimates, not measurements (a ZeroGPU H200 slice was not measured here): deliberately high so that the first
# requests are not cut off.
ESTIMATED_S_PER_FACE = 1.0
ESTIMATED_LOAD_S = 15.0
ESTIMATED_S_PER_UPSCALED_MP = 1.5


def on_zerogpu() -> bool:
    """A ZeroGPU Space (``SPACES_ZERO_GPU``, read as the ``spaces`` package reads it)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


class FaceClock:
    """Seconds per face measured by this process's finished GPU requests (the last 20)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[float] = deque(maxlen=20)
        self._loads: deque[float] = deque(maxlen=20)
        self._upscales: deque[float] = deque(maxlen=20)

    def record(self, record: Mapping[str, Any]) -> None:
        """Take one result record (``cli.result_record``: the app's JSON output); CPU runs are ignored."""
        if not str(record.get("device", "")).startswith("cuda"):
            return
        t = record.get("timings") or {}
        faces = int(record.get("faces") or 0)
        up = record.get("upscale") or {}
        w, h = (list(record.get("input_size") or []) + [0, 0])[:2]
        with self._lock:
            if float(t.get("load_s") or 0.0) > 0:
                self._loads.append(float(t["load_s"]))
            if faces >= 1:
                self._samples.append(sum(float(t.get(k) or 0.0) for k in ("restore_s", "align_s", "paste_s", "identity_s")) / faces)
            mp = w * h * int(up.get("factor") or 1) ** 2 / 1e6
            if float(t.get("upscale_s") or 0.0) > 0 and mp > 0:
                self._upscales.append(float(t["upscale_s"]) / mp)

    def _slowest(self, samples: deque[float], estimate: float) -> float:
        """The slowest recent sample, or the labelled estimate before any."""
        with self._lock:
            return max(samples, default=estimate)

    def seconds_per_face(self) -> float:
        return self._slowest(self._samples, ESTIMATED_S_PER_FACE)

    def load_seconds(self) -> float:
        return self._slowest(self._loads, ESTIMATED_LOAD_S)

    def seconds_per_upscaled_mp(self) -> float:
        """Per megapixel of upscaled output."""
        return self._slowest(self._upscales, ESTIMATED_S_PER_UPSCALED_MP)

    def duration(self, max_faces: float | int | None, aligned: bool, *, upscale: int = 1,
                 image_size: tuple[int, int] | None = None) -> int:
        """Seconds to ask ``spaces.GPU`` for one request: ``max_faces`` (1 when ``aligned``), and ``upscale`` > 1
        of ``image_size`` (width, height; None: 12 MP)."""
        work = (1 if aligned else max(1, int(max_faces or 1))) * self.seconds_per_face()
        if upscale > 1:
            w, h = image_size or (4000, 3000)
            work += w * h * upscale**2 / 1e6 * self.seconds_per_upscaled_mp()
        return int(min(CAP_S, FLOOR_S + self.load_seconds() + work * MARGIN))


def header_size(image: Any) -> tuple[int, int] | None:
    """(width, height) of an image file from its header alone (no decode), None when unreadable."""
    if not isinstance(image, (str, os.PathLike)):
        return None
    try:
        from PIL import Image

        with Image.open(image) as im:
            return int(im.size[0]), int(im.size[1])
    except Exception:  # not an image Pillow reads: the duration then assumes a 12 MP photo
        return None


CLOCK = FaceClock()

HARDWARE_CHECK_UNAVAILABLE = (
    "The Hardware check is not available on a ZeroGPU Space: it measures each mode in worker processes, "
    "and ZeroGPU lends its GPU only to this app's restore calls. Every restore still shows its own measured "
    "peaks; run `python -m gpen_core profile` on your own machine to measure every mode."
)
