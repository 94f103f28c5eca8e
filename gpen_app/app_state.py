"""The web app's whole mutable state, one :class:`AppState` (``app.STATE``), and its flags. Thread-safe: Gradio
runs handlers on threads."""

from __future__ import annotations

import argparse
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpen_app.panels import error_markdown

MAX_SESSIONS = 256  # sessions whose last error is kept for the result panel; older ones fall out


@dataclass(frozen=True)
class Policy:
    """What this server lets anonymous visitors do; set once from the app's flags."""

    shared: bool = False  # reachable by others: --share, a host other than 127.0.0.1, or a Space
    any_model_path: bool = False  # the Generator field may name any checkpoint path on the server
    hardware_check_on_shared: bool = False  # it may run on a shared server (it occupies the CPU for minutes)
    downloads_on_shared: bool = False  # visitors may start downloads (hundreds of MB of disk and bandwidth)
    # The longest clip (seconds) the Video tab restores on a shared server (None or 0: no cap), as a clip holds
    # the one engine lane for its whole length; a local run never caps. The upload says so before anyone waits.
    max_video_seconds: float | None = 60.0
    # One visitor's share of a shared server (docs/app-server.md, "The queue is shared"): restores waiting or running,
    # a quarter of the queue's 8 places (a visitor with many tabs or a script leaves room for three others; 2 lets a
    # photo wait while their clip runs), and upload bytes within the hour an upload is kept: four of Gradio's 100 MB
    # file limit, a clip at that limit and dozens of 12 MP photos (~6 MB each as JPEG).
    visitor_places: int = 2
    visitor_upload_bytes: int = 400_000_000

    @property
    def video_cap_s(self) -> float | None:
        return self.max_video_seconds or None if self.shared else None

    @property
    def hardware_check_allowed(self) -> bool:
        return not self.shared or self.hardware_check_on_shared

    @property
    def downloads_allowed(self) -> bool:
        return not self.shared or self.downloads_on_shared


@dataclass
class SessionStops:
    """Each browser session's Stop for its own work (a clip, a download), by session hash: a Stop (or a closed tab)
    ends only its own visitor's work. With ``api_name`` (the event that work runs as), a Stop also reaches the
    session's event while it still waits in the queue: it is marked, moved out of the line
    (:func:`gpen_app.queue_seam.stop_waiting`), and its handler finds its stop already set as it starts."""

    api_name: str | None = None
    _running: dict[str, threading.Event] = field(default_factory=dict, repr=False)
    # The queue's events (by id) stopped before their handler began; a mark lives until that handler starts, or
    # until MAX_SESSIONS newer ones push it out (an event its visitor's closed tab took out of the queue never starts).
    _marked: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, session: str | None) -> threading.Event:
        """A fresh event for ``session``'s work starting now: a Stop pressed before it was queued does not count,
        one pressed while it waited in the queue does (it starts set)."""
        token, event = threading.Event(), self._event_id()
        if session:
            with self._lock:  # with stop()'s marking under the same lock, a Stop either marks this or finds it running
                if event in self._marked or (event and self._in_stopped_lane()):
                    self._marked.pop(event, None)
                    token.set()  # not the session's running work: a Stop must still find that one's token
                else:
                    self._running[session] = token
        return token

    def stop(self, session: str | None) -> bool:
        """Stop ``session``'s running work, and its ``api_name`` event that has not started yet; False when it has
        neither (nothing else is touched)."""
        waiting = 0
        if session and self.api_name:
            from gpen_app.queue_seam import stop_waiting

            waiting = stop_waiting(self.api_name, session, self._mark)  # marked before it can start
        with self._lock:
            token = self._running.get(session) if session else None
        if token is not None:
            token.set()
        return token is not None or waiting > 0

    def _mark(self, event: str) -> None:
        with self._lock:
            self._marked[event] = None
            while len(self._marked) > MAX_SESSIONS:
                self._marked.popitem(last=False)

    def _in_stopped_lane(self) -> bool:
        """Whether this handler's event was moved out of the line by a Stop (its mark the first guard, this the second)."""
        from gpen_app.queue_seam import in_stopped_lane

        return in_stopped_lane()

    def _event_id(self) -> str | None:
        """The queue's id of the event whose handler calls this (None without ``api_name``, or outside one)."""
        if not self.api_name:
            return None
        from gpen_app.queue_seam import current_event_id

        return current_event_id()

    def finish(self, session: str | None, token: threading.Event) -> None:
        """Forget ``token`` once its work ended (a newer start of the session keeps its own), and a mark a Stop left
        on this event while it ran (only one that had not started needed it)."""
        event = self._event_id()
        with self._lock:
            self._marked.pop(event, None)
            if session and self._running.get(session) is token:
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


def stoppable(progress: Any, stop: threading.Event) -> Any:
    """``progress`` (called as ``progress(fraction, desc=...)``) that raises :class:`~gpen_core.errors.Stopped` once
    ``stop`` is set: the engine reports before each face and tile, so a restore ends there, not at its end. Raises
    at once when ``stop`` is already set: its visitor pressed Stop while it waited in the queue, so none of it runs."""
    from gpen_core.errors import Stopped

    if stop.is_set():
        raise Stopped("The restore ended at your Stop while it waited in the queue; nothing of it ran. "
                      "Press Restore to start again.")

    def report(fraction: float, desc: str | None = None) -> Any:
        if stop.is_set():
            raise Stopped(f"The restore ended at your Stop{f' (at: {desc})' if desc else ''}; nothing of it was kept. "
                          "Press Restore to start again.")
        return progress(fraction, desc=desc)
    return report


@dataclass
class AppState:
    policy: Policy = field(default_factory=Policy)
    backend: Any = None  # None: this process's Restorer; else a scaleout.serve.RayRestorer (--backend ray)
    preparation: Any = None  # the OpenVINO conversions after launch (gpen_app.preparation); None: none run
    restores_done: int = 0
    # Each session's running download's Stop (the weights panel's button): never another visitor's download.
    downloads: SessionStops = field(default_factory=SessionStops, repr=False)
    # Each session's clip's Stop, running or waiting (the Video tab's button, or its visitor leaving): never another's.
    stops: SessionStops = field(default_factory=lambda: SessionStops("restore_video"), repr=False)
    restores: SessionStops = field(default_factory=lambda: SessionStops("restore"), repr=False)  # each session's photo restore's Stop, running or waiting
    _errors: OrderedDict[str, str] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def remember_error(self, session: str | None, panel: str | None, text: str) -> None:
        """Keep ``text`` as ``session``'s last error for ``panel``, the failure event that reads it back (Gradio's
        gets no exception): per panel, so a restore's failure never shows a download's or another tab's error.
        None: no failure event reads it (a download, the hardware check)."""
        if not session or not panel:
            return
        key = f"{panel}:{session}"
        with self._lock:
            self._errors[key] = text
            self._errors.move_to_end(key)
            while len(self._errors) > MAX_SESSIONS:
                self._errors.popitem(last=False)

    def refused(self, session: str | None, api_name: str | None, text: str) -> None:
        """A shared server refused ``session`` a place in the queue (gpen_app.gradio_seam.VisitorShares.refused): its
        restore's panel says why once the pop-up has closed."""
        panel = {"restore": "photo", "restore_video": "video"}.get(api_name or "")
        self.remember_error(session, panel, error_markdown("Your share of the queue is full", text))

    def take_error(self, session: str | None, panel: str) -> str | None:
        """``session``'s last error for ``panel``, forgotten once read."""
        with self._lock:
            return self._errors.pop(f"{panel}:{session}", None) if session else None

    def count_restore(self) -> None:
        with self._lock:
            self.restores_done += 1

    def use_backend(self, backend: Any) -> None:
        """Send restores to ``backend`` (a RayRestorer), connected now so a wrong address fails at start-up."""
        backend.handle()
        self.backend = backend

    def engine(self) -> Any:
        """What Restore calls: the Ray deployment when one is set, else the process-wide Restorer."""
        if self.backend is not None:
            return self.backend
        from gpen_core.restorer import get_restorer

        return get_restorer()


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def parse_server_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The app's flags (and their environment variables); SystemExit on a bad one. ``auth``: (user, password), None
    without one (a --share link always gets one, see app.main); ``policy``: the server is *shared* (its policy
    restricts visitors) with a public link, beyond loopback, or on a Space (``SPACE_ID``)."""
    p = argparse.ArgumentParser(description="GPEN face restoration in the browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for the local network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), help="port (default 7860)")
    p.add_argument("--share", action="store_true", default=_env_flag("GRADIO_SHARE"),
                   help="also create a public gradio.live link (always password-protected; env GRADIO_SHARE=1)")
    p.add_argument("--auth", help="user:password for the page (required for --share; generated when not given)")
    p.add_argument("--allow-any-model-path", action="store_true",
                   help="let the Generator field name any checkpoint path on this machine (default: registry names "
                        "and files in the models folder only)")
    p.add_argument("--allow-hardware-check", action="store_true", default=_env_flag("GPEN_ALLOW_HARDWARE_CHECK"),
                   help="allow the Hardware check on a shared server (--share, a host other than 127.0.0.1, or a Space); "
                        "it is always allowed on 127.0.0.1")
    p.add_argument("--allow-downloads", action="store_true", default=_env_flag("GPEN_ALLOW_DOWNLOADS"),
                   help="let visitors of a shared server start weight downloads (env GPEN_ALLOW_DOWNLOADS=1); "
                        "always allowed on 127.0.0.1")
    p.add_argument("--max-video-seconds", type=float, default=float(os.environ.get("GPEN_MAX_VIDEO_SECONDS", "60")),
                   help="on a shared server, restore at most this many seconds of a video (default 60; 0: no cap; "
                        "env GPEN_MAX_VIDEO_SECONDS); a local run never caps")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: restore in this process (default); ray: call `python -m gpen_core serve`'s deployment")
    p.add_argument("--address", default="auto", help="with --backend ray: the Ray address `serve` printed (default auto)")
    args = p.parse_args(argv)
    user, _, password = (args.auth or "").partition(":")
    if args.auth and not (user and password):
        raise SystemExit(f"--auth must be user:password, got {args.auth!r}")
    args.auth = (user, password) if args.auth else None
    shared = args.share or args.host not in LOOPBACK_HOSTS or bool(os.environ.get("SPACE_ID"))
    args.policy = Policy(shared=shared, any_model_path=args.allow_any_model_path,
                         hardware_check_on_shared=args.allow_hardware_check, downloads_on_shared=args.allow_downloads,
                         max_video_seconds=args.max_video_seconds or None)
    return args


def start_lines(local_url: str, share_url: str | None, share: bool) -> list[str]:
    """What ``python app.py`` prints once it listens (naming our flags, not Gradio's ``share=True``)."""
    lines = [f"* Running on {local_url}"]
    if share_url:
        lines.append(f"* Public link: {share_url}")
    elif share:
        lines.append(f"* The public link could not be created (offline, or gradio.live unreachable); the app runs at {local_url} only.")
    else:
        lines.append("* Only this machine can open it; add --share for a password-protected public link, "
                     "or --host 0.0.0.0 for your network.")
    return lines
