"""The app's start keeps what it imported out of the collections each model load and drop runs, and still
collects what comes after (``engine.pipeline.ready_server``, the app's and a replica's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# In a process of its own: a freeze in the test process would keep what earlier tests left.
CHILD = """
import gc, json, sys, weakref
from gpen_core.engine.pipeline import ready_server

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.b, b.a = b, a
    return weakref.ref(a)

before = cycle()  # garbage from before the freeze: it must be freed, not frozen
frozen = ready_server(restores_here=sys.argv[1] == "local")
tracked_after_freeze = len(gc.get_objects())
after = cycle()  # garbage made afterwards, as a dropped network's cycles are
gc.collect()
print(json.dumps({"frozen": frozen, "tracked": tracked_after_freeze, "torch": "torch" in sys.modules,
                  "before_freed": before() is None, "after_freed": after() is None}))
"""


def _child(local: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, "local" if local else "remote"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_engine_is_imported_then_frozen_and_later_garbage_is_still_collected() -> None:
    r = _child(local=True)
    assert r["torch"], "the engine (PyTorch) was not imported before the freeze"
    # PyTorch alone leaves over 100,000 tracked objects: frozen, so a full collection walks almost nothing.
    assert r["frozen"] > 100_000 and r["tracked"] < r["frozen"] / 20, r
    assert r["before_freed"], "garbage from before the freeze was frozen rather than freed"
    assert r["after_freed"], "garbage made after the freeze was not collected"


def test_restores_sent_elsewhere_do_not_import_the_engine() -> None:
    r = _child(local=False)
    assert not r["torch"] and r["frozen"] > 0 and r["before_freed"] and r["after_freed"], r
