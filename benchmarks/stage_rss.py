"""Peak RSS per stage of a request: which stage sets the whole request's peak, and by how much.

Used by ``benchmarks/bench_request.py --stages``. Wraps the engine's stage functions
(decode, detect, restore, parse mask, warp, compose, encode) and, at every boundary, reads
the kernel's resident high-water mark (VmHWM) for the stage that just ended and resets it
(``/proc/self/clear_refs``), so each figure is that stage's exact peak, not a sample. Time
between the wrapped calls (scaling, colour conversions, bookkeeping) is "other". Linux only;
the engine's own meter is reset by this too, so its figure for a profiled request is not used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpen_core.platform import meter

STAGES = ("decode", "load", "detect", "restore", "mask", "warp", "compose", "encode", "other")


class StageRSS:
    """Running maxima of the process peak per stage, in bytes, over every request profiled."""

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}
        self._label = "other"

    def _close(self) -> None:
        hwm = meter.peak_rss()
        self.peaks[self._label] = max(self.peaks.get(self._label, 0), hwm)
        meter._reset_hwm()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        outer = self._label
        self._close()
        self._label = name
        try:
            yield
        finally:
            self._close()
            self._label = outer

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(owner, attr)
        if getattr(fn, "_stage_rss", False):
            return

        @functools.wraps(fn)
        def wrapped(*a: Any, **k: Any) -> Any:
            with self.stage(name):
                return fn(*a, **k)

        wrapped._stage_rss = True  # type: ignore[attr-defined]
        setattr(owner, attr, wrapped)

    def install(self) -> None:
        """Wrap the engine's stage functions (module attributes looked up at call time)."""
        from gpen_core.engine import pipeline
        from gpen_core.engine.model_cache import ModelCache
        from gpen_core.faces import photo
        from gpen_core.images import decode

        self.wrap(pipeline, "decode", "decode")
        self.wrap(decode, "encode_image", "encode")
        self.wrap(photo, "_restore_crop", "restore")
        self.wrap(photo, "face_mask", "mask")
        self.wrap(photo, "warp_piece", "warp")
        self.wrap(photo, "compose", "compose")
        for attr in ("generator", "parser"):
            self.wrap(ModelCache, attr, "load")
        original = ModelCache.detector

        def detector(cache: Any, *a: Any, **k: Any) -> Any:
            with self.stage("load"):
                det = original(cache, *a, **k)
            if not getattr(det.detect, "_stage_rss", False):
                self.wrap(det, "detect", "detect")
            return det

        ModelCache.detector = detector  # type: ignore[method-assign]

    def table(self) -> dict[str, int]:
        return {s: self.peaks[s] for s in STAGES if s in self.peaks}
