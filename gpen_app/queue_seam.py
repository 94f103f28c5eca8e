"""Gradio's queue as the app's event handlers see it: whether anyone still waits for an event's answer, the run
times it estimates from, and a waiting event its visitor stopped. Written for Gradio 6 (checked with 6.31), beside
``gpen_app.gradio_seam``, whose :func:`~gpen_app.gradio_seam.check_installed` includes :func:`queue_problems`."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any


def queue_problems() -> list[str]:
    """What this Gradio lacks of the queue's internals used here (empty when all is in place)."""
    from gradio.context import LocalContext
    from gradio.queueing import Event, EventQueue, Queue

    event_has = set(inspect.signature(Event.__init__).parameters) | set_on_self(Event.__init__)
    checks = (
        ({"blocks", "event_id"} <= set(vars(LocalContext)) and "clean_events" in vars(Queue),
         "gradio.context.LocalContext has no blocks/event_id or its Queue no clean_events"),
        ({"alive", "_id", "fn", "request", "session_hash", "concurrency_id"} <= event_has,
         "gradio.queueing.Event has no alive/_id/fn/request/session_hash/concurrency_id"),
        ("process_time_per_fn" in set_on_self(Queue.__init__),
         "gradio.queueing.Queue keeps no process_time_per_fn (the ETA a run starts with)"),
        (list(inspect.signature(EventQueue.__init__).parameters) == ["self", "concurrency_id", "concurrency_limit"]
         and {"queue", "concurrency_id"} <= set_on_self(EventQueue.__init__) and hasattr(Queue, "broadcast_estimations"),
         "gradio.queueing.EventQueue is not (concurrency_id, concurrency_limit) with a queue, or its Queue has no "
         "broadcast_estimations (a waiting event stopped by its visitor leaves the line)"),
    )
    return [problem for ok, problem in checks if not ok]


def set_on_self(init: Callable[..., Any]) -> set[str]:
    """The attributes ``init`` sets on its instance (``self.x = ...``, ``self.x: T = ...``)."""
    return set(re.findall(r"self\.(\w+)\s*[:=]", inspect.getsource(init)))


def still_waited_for() -> Callable[[], bool]:
    """Called in an event handler's thread: a check that says False once nobody waits for this event's answer
    (the queue marks the event ``alive = False`` in ``Queue.clean_events``). Outside a queued event: always True."""
    from gradio.context import LocalContext

    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or not event_id:
        return lambda: True

    def waited() -> bool:
        for jobs in list(queue.active_jobs):
            for event in list(jobs or ()):
                if getattr(event, "_id", None) == event_id:
                    return bool(getattr(event, "alive", True))
        return True  # not running (yet or any more): nothing to stop

    return waited


# The queue's lane for events their visitor stopped while they waited, with no limit: each starts at once and its
# handler, finding itself stopped, ends before any work (the engine's one-at-a-time lane is kept for work).
STOPPED_LANE = "gpen-stopped-while-waiting"


def in_stopped_lane() -> bool:
    """Called in an event handler's thread: whether this event runs in :data:`STOPPED_LANE` (a Stop moved it there)."""
    from gradio.context import LocalContext

    event_id, queue = LocalContext.event_id.get(None), getattr(LocalContext.blocks.get(None), "_queue", None)
    return bool(event_id and queue) and any(getattr(e, "_id", None) == event_id and e.concurrency_id == STOPPED_LANE
                                            for jobs in list(queue.active_jobs) for e in jobs or ())


def current_event_id() -> str | None:
    """Called in an event handler's thread: the queue's id of this event (None outside a queued event)."""
    from gradio.context import LocalContext

    return LocalContext.event_id.get(None)


def stop_waiting(api_name: str, session: str, mark: Callable[[str], None]) -> int:
    """Called in an event handler's thread (a Stop): ``session``'s events of the event named ``api_name`` that have
    not started, each passed to ``mark`` (its id) before it can start, so its handler ends at once. Those waiting
    in the queue leave their lane for :data:`STOPPED_LANE`: they end now, not once the work ahead of them has run.
    Returns how many; 0 outside a served event (a direct call: no queue to look in)."""
    from anyio import NoEventLoopError, from_thread
    from gradio.context import LocalContext
    from gradio.queueing import EventQueue

    queue = getattr(LocalContext.blocks.get(None), "_queue", None)
    if queue is None:
        return 0

    def take() -> int:  # on the queue's event loop, in one go: the queue takes no event meanwhile
        found = 0
        lanes = queue.event_queue_per_concurrency_id
        for lane in list(lanes.values()):
            for event in [e for e in lane.queue if e.session_hash == session and e.fn.api_name == api_name]:
                mark(event._id)
                if lane.concurrency_id != STOPPED_LANE:
                    lane.queue.remove(event)
                    event.concurrency_id = STOPPED_LANE  # the lane Gradio frees once it ran
                    lanes.setdefault(STOPPED_LANE, EventQueue(STOPPED_LANE, None)).queue.append(event)
                    queue.broadcast_estimations(lane.concurrency_id)  # the others' places in line, one nearer
                found += 1
        for event in (e for jobs in list(queue.active_jobs) for e in jobs or ()):  # taken: its handler may not have begun
            if event.session_hash == session and event.fn.api_name == api_name:
                mark(event._id)
                found += 1
        return found

    try:
        return from_thread.run_sync(take)
    except NoEventLoopError:  # not in one of Gradio's handler threads: no queue of its event loop to reach
        return 0


def forget_run_time(event: Any) -> Callable[[], None]:
    """A handler for ``event.then(...)`` that drops the event's measured run times, so its next run starts with
    no ETA: Gradio's "average of past runs" is wrong for clips, whose length decides their time."""
    from gradio.context import Context

    blocks = Context.root_block

    def forget() -> None:
        times = getattr(getattr(blocks, "_queue", None), "process_time_per_fn", None)
        if times is not None:
            times.pop(event.fn, None)

    return forget
