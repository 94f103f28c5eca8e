"""gpen_core: GPEN blind face restoration that measures what it costs.

Importing this package loads no weights and starts no threads; the public names
below are imported on first use. Everything else is imported from its room
(``gpen_core.weights``, ``gpen_core.faces``, ...).

    from gpen_core import get_restorer
    result = get_restorer()(rgb_uint8, mode="auto")   # -> RestoreResult
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.2.0"

_LAZY = {
    "Restorer": "restorer",
    "get_restorer": "restorer",
    "RestoreOptions": "options",
    "RestoreResult": "result",
    "Attempt": "result",
    "Face": "result",
    "Peaks": "result",
    "RejectedFace": "result",
    "Timings": "result",
    "UpscaleInfo": "result",
    "MemoryMode": "modes",
    "MODES": "modes",
    "GPENError": "errors",
    "InputError": "errors",
    "WeightsError": "errors",
    "ResourceError": "errors",
    "OutOfMemory": "errors",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gpen_core' has no attribute {name!r}")
