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
from pathlib import Path

import httpx
import pytest

import app
from gpen_app.app_state import Policy

EXAMPLE = Path(app.__file__).resolve().parent / "examples" / "astronaut_low_resolution.jpg"

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


# ------------------------------------------------------------------ a Stop while the restore still waits in the queue


def _result() -> object:
    """What the stand-in engine returns: a RestoreResult built by hand (one face, a 400×300 photo)."""
    import numpy as np

    from gpen_core.modes import MODES
    from gpen_core.result import Face, Peaks, RestoreResult, Timings

    crop = np.full((256, 256, 3), 90, np.uint8)
    return RestoreResult(image=np.zeros((300, 400, 3), np.uint8), before=np.zeros((300, 400, 3), np.uint8),
                         faces=(Face((10.0, 20.0, 110.0, 140.0), 0.99, np.zeros((5, 2), np.float32), crop, 255 - crop),),
                         timings=Timings(total_s=1.0, decode_s=0.1, detect_s=0.2, restore_s=0.6, encode_s=0.1, load_s=0.0),
                         peaks=Peaks(1_000_000_000, 500_000_000, "vmhwm"), mode=MODES["low"], requested_mode="low",
                         mode_reason="", checkpoint="GPEN-BFR-256", detector="mobilenet0.25", device="cpu",
                         dtype="float32", output_format="jpeg", encoded=b"\xff\xd8" + b"x" * 1000, notes=(),
                         input_size=(400, 300), processed_size=(400, 300))


@pytest.fixture()
def slow_engine(server_url: str, monkeypatch: pytest.MonkeyPatch):
    """The photo restore's engine call, stood in for: the first call (visitor A's) holds the engine until the test
    releases it; every call is listed (``calls``: the photos it got)."""
    from types import SimpleNamespace

    engine = SimpleNamespace(calls=[], release=threading.Event())

    def run_engine(image: str, options: object, progress: object, mask: object = None) -> object:
        engine.calls.append(image)
        if len(engine.calls) == 1:
            engine.release.wait(30)
        return _result()

    monkeypatch.setattr(app, "run_engine", run_engine)
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))  # a shared server's queue
    queue = app.demo._queue
    try:
        yield engine
    finally:
        engine.release.set()
        _wait(lambda: len(queue) == 0 and not any(queue.active_jobs), timeout=30)


def _uploaded(server_url: str, path: Path, kind: str) -> dict:
    """``path`` uploaded as the page uploads it: the file as an event's input names it."""
    with path.open("rb") as f:
        r = httpx.post(f"{server_url}/gradio_api/upload", files={"files": (path.name, f, kind)}, timeout=30)
    r.raise_for_status()
    return {"path": r.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


def _join(server_url: str, api_name: str, session: str, data: list) -> str:
    """``session``'s event ``api_name`` in the queue, as the page sends it: its event id."""
    index = next(i for i, d in app.demo.fns.items() if d.api_name == api_name)
    body = {"data": data, "fn_index": index, "session_hash": session, "event_data": None, "trigger_id": None}
    r = httpx.post(f"{server_url}/gradio_api/queue/join", json=body, headers={"Origin": server_url}, timeout=30)
    assert r.status_code == 200, r.text[:300]
    return r.json()["event_id"]


def _outcome(server_url: str, session: str, event_id: str, within: float) -> dict:
    """The event's last message (``process_completed``), read from ``session``'s stream; fails after ``within`` s."""
    import json

    end = time.monotonic() + within
    try:
        with httpx.stream("GET", f"{server_url}/gradio_api/queue/data", params={"session_hash": session},
                          timeout=within) as s:
            for line in s.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("msg") == "process_completed" and message.get("event_id") == event_id:
                    return message
                assert time.monotonic() < end, f"no outcome within {within} s"
    except httpx.ReadTimeout:
        pass
    raise AssertionError(f"the event did not end within {within} s")


def _stop(server_url: str, button: str, session: str) -> None:
    index, dep = _event(button)
    r = _send(server_url, index, dep, session, [None] * len(dep.inputs))  # as the page: outside the queue
    assert r.status_code == 200, r.text[:300]


PHOTO_ARGS = ["low", "default", "default", 1.0, 0.9, 50, False, "default", 1, "enhance", None, True, "auto", 0.0, 0.0]


def test_a_stop_ends_its_visitors_restore_still_waiting_in_the_queue(server_url: str, slow_engine) -> None:
    """B's restore waits behind A's (the engine runs one at a time); B presses Stop: B's ends at once, Stopped as a
    running one is (an outcome, as a clip's: the panel, no error), without reaching the engine and without waiting
    for A's; A's runs on to its end; another visitor's Stop never touched B's; B's next restore runs (a Stop pressed
    with nothing of theirs running or waiting does not count against it)."""
    photo = _uploaded(server_url, EXAMPLE, "image/jpeg")
    queue = app.demo._queue
    a, b = secrets.token_hex(6), secrets.token_hex(6)
    a_event = _join(server_url, "restore", a, [photo, *PHOTO_ARGS])
    _wait(lambda: len(slow_engine.calls) == 1)  # A's restore holds the engine
    b_event = _join(server_url, "restore", b, [photo, *PHOTO_ARGS])
    _wait(lambda: len(queue) == 1)  # B's waits behind it
    _stop(server_url, "restore-stop", secrets.token_hex(6))  # another visitor's Stop: not B's restore to stop
    time.sleep(0.3)
    assert len(queue) == 1
    _stop(server_url, "restore-stop", b)
    done = _outcome(server_url, b, b_event, within=10)  # A's still holds the engine meanwhile
    assert done["success"] is True, done  # an outcome, as the video tab's Stop (it was a red error)
    slider, path, panel, gallery, record = done["output"]["data"]
    assert panel.startswith("Stopped. The restore ended at your Stop while it waited in the queue"), panel
    assert "Press Restore to start again" in panel and slider is None and path is None and not gallery and record is None
    assert app.STATE.take_error(b, "photo") is None  # no failure event's words kept: the panel has them
    assert len(slow_engine.calls) == 1 and not slow_engine.release.is_set()  # B's never reached the engine
    slow_engine.release.set()
    assert _outcome(server_url, a, a_event, within=30)["success"] is True  # A's ran to its end
    _stop(server_url, "restore-stop", b)  # nothing of B's running or waiting: the next restore still runs
    b_event = _join(server_url, "restore", b, [photo, *PHOTO_ARGS])
    assert _outcome(server_url, b, b_event, within=30)["success"] is True
    assert len(slow_engine.calls) == 2


def test_the_video_tabs_stop_ends_its_visitors_clip_still_waiting_in_the_queue(server_url: str, slow_engine,
                                                                               tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a clip waiting behind another visitor's photo (one engine lane for both): it ends at once with
    the panel and pop-up of a stopped clip, and no frame of it is read."""
    from gpen_app import video_wiring

    from .videoclips import gradient_frames, make_clip

    clip = _uploaded(server_url, make_clip(tmp_path / "clip.mp4", gradient_frames(4)), "video/mp4")
    ran: list[str] = []
    monkeypatch.setattr(video_wiring._Handlers, "run", lambda self, video, *a: ran.append(video))
    photo = _uploaded(server_url, EXAMPLE, "image/jpeg")
    a, b = secrets.token_hex(6), secrets.token_hex(6)
    a_event = _join(server_url, "restore", a, [photo, *PHOTO_ARGS])
    _wait(lambda: len(slow_engine.calls) == 1)
    b_event = _join(server_url, "restore_video", b, [clip, "low", 0, 0, True, [], None, True, False])
    _wait(lambda: len(app.demo._queue) == 1)
    _stop(server_url, "video-stop", b)
    done = _outcome(server_url, b, b_event, within=10)
    assert done["success"] is True, done
    panel = done["output"]["data"][2]
    assert panel.startswith("Stopped: 0 frames restored; nothing kept") and "Press Restore video to start again" in panel, panel
    assert ran == [] and not slow_engine.release.is_set()
    slow_engine.release.set()
    assert _outcome(server_url, a, a_event, within=30)["success"] is True


def test_a_stop_still_ends_the_running_restore_when_the_waiting_one_starts_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """One visitor, restore A running and B (pressed again) waiting. Stop marks and moves B, whose handler may start
    in the stopped lane before Stop reads the session's running work: B starts stopped, and the token Stop then
    finds and sets is still A's (B's start had taken A's place, so A ran on to its end)."""
    from gpen_app import queue_seam
    from gpen_app.app_state import SessionStops

    stops, current, started = SessionStops(api_name="restore"), ["A"], []
    monkeypatch.setattr(stops, "_event_id", lambda: current[0])
    monkeypatch.setattr(queue_seam, "in_stopped_lane", lambda: current[0] == "B")

    def stop_waiting(api_name: str, session: str, mark) -> int:
        mark("B")
        current[0] = "B"
        started.append(stops.start(session))  # B's handler, on another thread, in between
        current[0] = "A"
        return 1

    monkeypatch.setattr(queue_seam, "stop_waiting", stop_waiting)
    a = stops.start("visitor")
    assert stops.stop("visitor")
    assert started[0].is_set() and a.is_set()
    stops.finish("visitor", a)
    assert stops.running() == 0
