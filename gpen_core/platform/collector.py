"""Python's garbage collector in a long-lived server: what the process imported is kept out of every
full collection.

The engine collects garbage at each model load and drop (:func:`gpen_core.platform.oom.release`), so
that a dropped network's memory is back before the next one loads. A full collection walks every
object the collector tracks, and a process with the app and the engine imported holds about 325,000,
nearly all made by imports and alive for the process's life. Measured on the AMX Xeon (2 cores, load
4-5): 4-11 collections a request, and a ``low`` request spent 0.75-1.94 s of its 1.75-2.95 s collecting;
after :func:`freeze_imports` the same collections took 0.00-0.06 s, and ``low`` 1.09 s
(docs/performance.md, "Garbage collection in the app").

Only an edge calls it, a long-lived server at its start (the app's, a Ray Serve replica's): a library
that froze its host's objects would keep whatever cycles they later form. It runs before any model loads: a dropped network caught in a
reference cycle would otherwise never be collected.
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
