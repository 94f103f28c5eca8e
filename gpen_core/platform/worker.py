"""One way to run work in a child process (:func:`run`): a fresh spawned Python, typed values in and out.

A fresh allocator (one measurement cannot flatter another), memory handed back at exit, an out-of-memory kill
the caller survives; nothing is parsed from text, and the child exits when its parent does.
"""

from __future__ import annotations

import contextlib
import os
import pkgutil
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ProgressEvent:
    """A progress event: ``fraction`` of the work done (0..1) and what is being done."""

    fraction: float
    message: str


@dataclass(frozen=True)
class Done(Generic[T]):
    """The child's function returned ``value``."""

    value: T


@dataclass(frozen=True)
class Failed:
    """The child ended without a value: how, and what it said."""

    how: Literal["raised", "killed", "exited", "timed out", "stopped"]
    message: str
    error_type: str = ""  # the exception's class name when ``how`` is "raised"
    oom: bool = False  # the exception was an out-of-memory error (raised) or the kill most likely the OOM killer's
    exitcode: int | None = None


# The child's end of its pipe: ("event", value) while it runs, then ("done", value) or ("raised", ...). Not a
# multiprocessing queue: it sends from a thread, which a tight memory cap (``prlimit --as``) may not let start.
_CHILD_CONN: Any = None
_SEND_LOCK = threading.Lock()  # events may come from several threads of the child


def _put(item: tuple[Any, ...]) -> None:
    with _SEND_LOCK:
        _CHILD_CONN.send(item)


def send(event: object) -> None:
    """From inside a :func:`run` child: hand ``event`` (picklable) to the parent's ``on_event``. A no-op elsewhere."""
    if _CHILD_CONN is not None:
        _put(("event", event))


def report(fraction: float, message: str) -> None:
    """:func:`send` a :class:`ProgressEvent` (a ``Progress`` callable for code that reports progress)."""
    send(ProgressEvent(fraction, message))


def _exit_with_parent() -> None:
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])  # ready at end of file: the parent exited or was killed
        os._exit(0)


def _child_main(target: str, args: tuple[Any, ...], conn: Any, niceness: int, env: dict[str, str | None],
                quiet: bool = False) -> None:
    """The child: environment and niceness first (before the work imports torch), then ``target(*args)``."""
    global _CHILD_CONN
    if quiet:  # what a probe's libraries print (warnings, a crash's last words) is not the user's to read
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if niceness > 0 and hasattr(os, "nice"):
        os.nice(niceness)
    with contextlib.suppress(RuntimeError):  # no thread under a tight memory cap: the timeout and stop still end it
        threading.Thread(target=_exit_with_parent, name="gpen-worker-parent-watch", daemon=True).start()
    _CHILD_CONN = conn
    try:
        value = pkgutil.resolve_name(target)(*args)  # "package.module:name", imported here
    except BaseException as exc:  # noqa: BLE001 - every ending is reported to the parent, typed
        from gpen_core.platform.oom import is_oom

        oom = is_oom(exc) if isinstance(exc, Exception) else False
        _put(("raised", type(exc).__name__, str(exc), oom or type(exc).__name__ in ("MemoryError", "ResourceError")))
    else:
        _put(("done", value))
    conn.close()


_START_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_main_script() -> Iterator[None]:
    """Spawn re-runs the caller's ``__main__`` script in the child: ours live in ``gpen_core``, and the app's
    script would build its whole page there."""
    with _START_LOCK:
        main, sys.modules["__main__"] = sys.modules.get("__main__"), types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:  # an embedded interpreter may have none
                sys.modules["__main__"] = main


class Child:
    """A started child: its pid and the wait for its outcome (``wait(stop=…)`` kills it). See :func:`run`."""

    def __init__(self, fn: Callable[..., Any] | str, args: tuple[Any, ...], *, niceness: int = 0,
                 env: dict[str, str | None] | None = None, quiet: bool = False) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child_end = ctx.Pipe(duplex=False)
        ref = fn if isinstance(fn, str) else f"{fn.__module__}:{fn.__qualname__}"
        if "<" in ref or ref.startswith("__main__:"):
            raise ValueError(f"{ref} cannot run in a child process: pass a module-level function of an importable "
                             "module")
        self._proc = ctx.Process(target=_child_main, args=(ref, args, child_end, niceness, dict(env or {}), quiet),
                                 name="gpen-worker", daemon=True)
        try:
            with _without_main_script():
                self._proc.start()
        finally:
            child_end.close()  # the child holds its own copy: its exit then ends the pipe here

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def wait(self, on_event: Callable[[object], None] | None = None, timeout: float | None = None,
             stop: threading.Event | None = None) -> Done[Any] | Failed:
        """Follow the child to its end, passing each event to ``on_event``; its outcome. ``stop`` set (by any
        thread) kills it within a tenth of a second."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ending: Done[Any] | Failed | None = None
        stopped = False
        try:
            while ending is None:
                # Checked every turn, not only in a quiet tenth: a child that sends events faster still stops.
                if stop is not None and stop.is_set() and not stopped:
                    stopped = True
                    self._proc.kill()
                if deadline is not None and time.monotonic() > deadline:
                    self._proc.kill()
                    ending = Failed("timed out", f"ran past its {timeout:.0f} s limit and was stopped")
                    break
                item = self._receive(0.1)
                if item is not None:
                    ending = self._handle(item, on_event)
                elif not self._proc.is_alive():
                    ending = self._drain(on_event)
        finally:
            self._proc.join(5)  # interrupted (or done and exiting): never leave a worker behind
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join()
            self._conn.close()  # nothing more comes: let the pipe go now, not at exit
        if stopped and not isinstance(ending, Done):
            return Failed("stopped", "was stopped", exitcode=self._proc.exitcode)
        return ending

    def _receive(self, wait_s: float) -> tuple[Any, ...] | None:
        """The child's next item, or None when none came within ``wait_s`` or the pipe has ended."""
        try:
            return self._conn.recv() if self._conn.poll(wait_s) else None
        except (EOFError, OSError):  # the child exited: its end is closed
            time.sleep(wait_s)  # poll() returns at once on a closed pipe: do not spin while the process ends
            return None

    def _handle(self, item: tuple[Any, ...], on_event: Callable[[object], None] | None) -> Done[Any] | Failed | None:
        if item[0] == "event":
            if on_event is not None:
                on_event(item[1])
            return None
        if item[0] == "done":
            return Done(item[1])
        _, etype, message, oom = item
        return Failed("raised", message, error_type=etype, oom=oom)

    def _drain(self, on_event: Callable[[object], None] | None) -> Done[Any] | Failed:
        """The child has exited: what it sent before it did, or how it ended without a value."""
        self._proc.join()
        while (item := self._receive(0.5)) is not None:
            ending = self._handle(item, on_event)
            if ending is not None:
                return ending
        code = self._proc.exitcode
        if code is not None and code < 0:
            return Failed("killed", f"was killed by signal {-code} (if nobody stopped it: most likely the kernel's "
                                    "out-of-memory killer)", oom=True, exitcode=code)
        return Failed("exited", f"exited with code {code} before it finished", exitcode=code)


def run(fn: Callable[..., T] | str, *args: Any, on_event: Callable[[object], None] | None = None, niceness: int = 0,
        env: dict[str, str | None] | None = None, timeout: float | None = None, quiet: bool = False,
        stop: threading.Event | None = None) -> Done[T] | Failed:
    """``fn(*args)`` in a fresh "spawn" process with this one's limits and ``sys.path``: :class:`Done` with its
    value, or :class:`Failed` saying how it ended. ``fn``: a module-level function, or ``"package.module:name"``
    (for a room that may not import it); ``args`` and the value picklable. ``env``: set (None unsets) before
    ``fn``'s module is imported; ``niceness``: added; ``timeout``: seconds; ``on_event``: gets what the child
    :func:`send` s, on this thread; ``quiet``: the child's output goes nowhere; ``stop``: set, it kills the child."""
    return Child(fn, args, niceness=niceness, env=env, quiet=quiet).wait(on_event, timeout, stop)


def forward_progress(progress: Callable[[float, str], None] | None) -> Callable[[object], None]:
    """An ``on_event`` that passes :class:`ProgressEvent` events to a ``progress(fraction, message)`` callable."""

    def on_event(event: object) -> None:
        if progress is not None and isinstance(event, ProgressEvent):
            progress(event.fraction, event.message)

    return on_event
