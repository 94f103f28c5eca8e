"""SIGTERM handled as Ctrl-C: a plain ``kill`` (a service manager's stop) runs Ctrl-C's clean-up (partial outputs
removed, Ray stopped, segments kept for a resume) instead of ending the process where it stands."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGTERM_EXIT = 128 + 15  # what a shell reports for a process ended by SIGTERM: scripts keep telling the two apart


@contextmanager
def sigterm_as_interrupt() -> Iterator[threading.Event]:
    """Within the block SIGTERM raises KeyboardInterrupt in the main thread, once (a repeat is ignored, so the
    clean-up finishes); the previous handler is restored after. Yields an event set when SIGTERM arrived. Off the
    main thread the block runs unchanged."""
    state = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def on_term(signum: int, frame: object) -> None:
        if not state.is_set():
            state.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)
