"""Python's garbage collector in a long-lived server: what the process imported is kept out of every
full collection.

The engine collects at each model load and drop (:func:`gpen_core.platform.oom.release`), and a full
collection walks every tracked object: ~330,000 with the app and engine imported, nearly all alive for
the process's life (measured: docs/performance.md, "Garbage collection in the app"). Only an edge calls
:func:`freeze_imports`, a long-lived server at its start, before any model loads: a library that froze
its host's objects would keep whatever cycles they later form, and a dropped network caught in a frozen
cycle would never be collected.
"""

from __future__ import annotations

import gc


def freeze_imports() -> int:
    """Collect once (the imports' own garbage is freed, not kept), then move every object alive now to
    the permanent generation (:func:`gc.freeze`), which later collections skip; what is made afterwards
    is collected as before. Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
