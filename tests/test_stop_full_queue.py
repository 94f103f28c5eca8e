"""A visitor's Stop reaches their own work even while other visitors keep the queue full.

Gradio's queue refuses every new event once ``max_size`` wait (503 "Queue is full"), whoever sent them: a Stop
that went through the queue would be refused while another visitor's eight restores wait, and the clip (or the
download thread) would run on. The app is served in-process (as in test_app_client); the queue is filled with the
weights panel's event, held on a lock, so nothing here loads a model.
"""

from __future__ import annotations

import secrets
import threading
import time

import httpx
import pytest

import app


def _wait(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _event(elem_id: str) -> tuple[int, object]:
    """(fn_index, dependency) of the handler the button with ``elem_id`` runs."""
    button = next(b._id for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)
    return next((i, d) for i, d in app.demo.fns.items() if d.fn is not None and any(t[0] == button for t in d.targets))


def _send(server_url: str, index: int, dep: object, session: str, data: list) -> httpx.Response:
    """The event as the page sends it: through the queue, or to /run/predict where the event skips it (Gradio's
    client does so for a dependency whose ``queue`` is False)."""
    body = {"data": data, "fn_index": index, "session_hash": session, "event_data": None, "trigger_id": None}
    route = "queue/join" if getattr(dep, "queue", True) is not False else "run/predict"
    return httpx.post(f"{server_url}/gradio_api/{route}", json=body, headers={"Origin": server_url}, timeout=30)


@pytest.fixture()
def full_queue(server_url: str, monkeypatch: pytest.MonkeyPatch):
    """The queue filled by other visitors: one weights-panel event running (held), ``max_size`` waiting."""
    index, dep = next((i, d) for i, d in app.demo.fns.items() if d.api_name == "weights_view")
    held = threading.Event()
    monkeypatch.setattr(dep, "fn", lambda *a: (held.wait(30), ("", None, ""))[1])
    queue = app.demo._queue
    data = ["auto", "default", "default", False, 1, "enhance"]
    assert _send(server_url, index, dep, secrets.token_hex(6), data).status_code == 200
    _wait(lambda: len(queue) == 0 and any(queue.active_jobs))  # the first one runs
    for _ in range(queue.max_size):
        assert _send(server_url, index, dep, secrets.token_hex(6), data).status_code == 200
    refused = _send(server_url, index, dep, secrets.token_hex(6), data)
    assert refused.status_code == 503 and "Queue is full" in refused.text  # as a new visitor finds it
    try:
        yield
    finally:
        held.set()
        _wait(lambda: len(queue) == 0 and not any(queue.active_jobs), timeout=30)


@pytest.mark.parametrize("button, stops", [("video-stop", "stops"), ("stop-download", "downloads"),
                                           ("restore-stop", "restores")])
def test_a_stop_reaches_its_own_work_while_others_fill_the_queue(server_url: str, full_queue: None, button: str,
                                                                 stops: str) -> None:
    visitor = secrets.token_hex(6)
    running = getattr(app.STATE, stops).start(visitor)  # this visitor's clip (or download), running
    try:
        index, dep = _event(button)
        r = _send(server_url, index, dep, visitor, [None] * len(dep.inputs))  # as the page: null for a gr.State
        assert r.status_code == 200, r.text[:300]
        assert running.is_set()
    finally:
        getattr(app.STATE, stops).finish(visitor, running)


def test_a_stop_outside_the_queue_still_needs_the_page(server_url: str) -> None:
    """Skipping the queue opens no door: without the page's Origin, /run/predict refuses the private Stop."""
    visitor = secrets.token_hex(6)
    running = app.STATE.stops.start(visitor)
    try:
        index, _ = _event("video-stop")
        body = {"data": [], "fn_index": index, "session_hash": visitor}
        r = httpx.post(f"{server_url}/gradio_api/run/predict", json=body, timeout=30)
        assert r.status_code in (403, 404) and not running.is_set()
    finally:
        app.STATE.stops.finish(visitor, running)
