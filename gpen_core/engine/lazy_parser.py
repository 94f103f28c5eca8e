"""The parser loaded at the first face it masks: what lets a :attr:`Lifetime.ONE_SHOT
<gpen_core.engine.lifetime.Lifetime.ONE_SHOT>` request (a process that serves one request, the CLI
with one photo) hold one network at a time. The peak is then the largest stage's instead of the
sum of every resident network; a server keeps its networks loaded instead (``RESIDENT``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class LazyParser:
    """A parsing mask function that loads the parser at the first face it masks (one-shot
    requests: after the generator is dropped). With no parser (``load`` returns None: no
    weights, or the mode skips it) it returns GPEN's feathered rectangle, as a None
    ``parsing_fn`` would."""

    def __init__(self, load: Callable[[], Any], notes: list[str] | None = None) -> None:
        self._load, self._fn, self._called = load, None, False
        # What loading it said (which paste mask ran): ``load`` appends here, the restore stage reads it.
        self.notes: list[str] = notes if notes is not None else []

    def __call__(self, restored: np.ndarray) -> np.ndarray:
        if not self._called:
            self._fn, self._called = self._load(), True
        if self._fn is None:
            from gpen_core.faces.masks import rectangle_mask

            return rectangle_mask(restored.shape[0])
        return self._fn(restored)

    @property
    def parsed(self) -> bool | None:
        """Whether the parsing mask ran; None when no face needed a mask."""
        return (self._fn is not None) if self._called else None
