"""Python's garbage collector in a long-lived server: what the process imported is kept out of every
full collection the engine runs at each model load and drop (measured: docs/performance.md, "Garbage
collection in the app"). Only an edge calls :func:`freeze_imports`, at its start, before any model loads:
a library that froze its host's objects would keep their later cycles, a dropped network's among them.
"""

from __future__ import annotations

import gc


def freeze_imports() -> int:
    """Collect once (the imports' garbage is freed, not kept), then move every object alive now to the
    permanent generation that later collections skip (:func:`gc.freeze`). Returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
