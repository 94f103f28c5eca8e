"""gpen_core: GPEN blind face restoration that measures what it costs.

Importing this package loads no weights and starts no threads; the public names
below are imported on first use.

    from gpen_core import get_restorer
    result = get_restorer()(rgb_uint8, mode="auto")   # -> RestoreResult
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "load_generator": "checkpoint",
    "load_upscaler": "upscaler",
    "GPEN": "arch",
    "GPENConfig": "arch",
    "GPENError": "errors",
    "InputError": "errors",
    "WeightsError": "errors",
    "ResourceError": "errors",
    "MemoryMode": "modes",
    "MODES": "modes",
    "RestoreResult": "result",
    "Restorer": "restorer",
    "RestoreOptions": "options",
    "get_restorer": "restorer",
    "resolve": "weights",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gpen_core' has no attribute {name!r}")
