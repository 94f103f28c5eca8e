"""gpen_core: GPEN blind face restoration that measures what it costs. Importing it loads no weights and starts no
threads; the names below are imported on first use, everything else from its room.

    from gpen_core import get_restorer
    result = get_restorer()(rgb_uint8)   # -> RestoreResult
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.2.0"

_LAZY = {name: module for module, names in {
    "restorer": ("Restorer", "get_restorer"),
    "options": ("RestoreOptions",),
    "result": ("RestoreResult", "Attempt", "Face", "Peaks", "RejectedFace", "Timings", "UpscaleInfo"),
    "modes": ("MemoryMode", "MODES"),
    "errors": ("GPENError", "InputError", "WeightsError", "ResourceError", "OutOfMemory"),
}.items() for name in names}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gpen_core' has no attribute {name!r}")
