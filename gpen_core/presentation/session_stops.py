"""Each browser session's Stop for its own work (a clip, a download): one ``threading.Event`` per running clip, found by the
session's hash, so one visitor's Stop (or closed tab) ends only that visitor's work.

A process-wide flag let any visitor's Stop fail another visitor's clip; here a Stop from a session with
no clip running does nothing. Thread-safe: Gradio runs handlers on worker threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class SessionStops:
    """The running clips' stop events, by session hash (an anonymous caller's clip has one nobody else can set)."""

    _running: dict[str, threading.Event] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, session: str | None) -> threading.Event:
        """A fresh event for ``session``'s clip that starts now (a Stop pressed before it started does not count)."""
        token = threading.Event()
        if session:
            with self._lock:
                self._running[session] = token
        return token

    def stop(self, session: str | None) -> bool:
        """Stop ``session``'s running clip; False when it has none (nothing else is touched)."""
        if not session:
            return False
        with self._lock:
            token = self._running.get(session)
        if token is None:
            return False
        token.set()
        return True

    def finish(self, session: str | None, token: threading.Event) -> None:
        """Forget ``session``'s clip once it ended (only this one: a newer clip of the session keeps its own)."""
        if not session:
            return
        with self._lock:
            if self._running.get(session) is token:
                del self._running[session]

    @contextmanager
    def own(self, session: str | None) -> Iterator[threading.Event]:
        """``session``'s stop event for the work inside the block, forgotten when it ends however it ends."""
        token = self.start(session)
        try:
            yield token
        finally:
            self.finish(session, token)

    def running(self) -> int:
        with self._lock:
            return len(self._running)
