"""The child side of the app's background preparation: :func:`convert_ahead` in a process of its own.

    python -m gpen_core.engine.prepare_child MODELS_DIR NICENESS

prints one JSON line per event: ``{"plan": [[token, label], ...]}`` before anything is
converted, ``{"start": token, "label": ...}`` when a network's conversion begins, ``{"progress": fraction, "message": ...}``, and last
``{"report": {"converted": [...], "cached": [...], "skipped": [...], "failed": [...]}}``.

Why a process and not a thread of the app: a conversion keeps both cores busy for tens of
seconds, and a visitor's first restore (on torch meanwhile) competed with it for them. A
niced process yields the cores to the restore; a thread could be niced too, but the
runtime's worker threads it starts would stay niced for the app's whole life. The
conversion's memory is also the child's, not the app's, and is handed back when it exits.
The converted files land in the same on-disk cache the app's next load reads.

The child exits when its standard input closes (the app stopped), so a conversion never
outlives the app that asked for it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict


def _emit(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _exit_with_parent() -> None:
    sys.stdin.read()  # returns at end of file: the app closed the pipe or died
    os._exit(0)


def main(argv: list[str]) -> int:
    models_dir, niceness = (argv[0] or None), int(argv[1])
    if niceness > 0 and hasattr(os, "nice"):
        os.nice(niceness)
    threading.Thread(target=_exit_with_parent, name="gpen-prepare-parent-watch", daemon=True).start()

    from gpen_core.engine.prepare import convert_ahead

    report = convert_ahead(models_dir=models_dir, progress=lambda f, m: _emit(progress=f, message=m),
                           on_plan=lambda todo: _emit(plan=todo), on_start=lambda tok, label: _emit(start=tok, label=label))
    _emit(report=asdict(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
