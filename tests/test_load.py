"""The served app under load: simultaneous clients, a full queue.

The demo is launched in-process (as in tests/test_app_client.py) and called with
gradio_client, the way API users call it. Restores are serialized twice over (the
queue's concurrency limit of 1 for ``/restore`` and the engine's lock), so each
request's measured peak must be its own, not its own plus its neighbours'.

That direct ``/gradio_api/run/restore`` posts (which would skip the queue) are refused
is tested in tests/test_app_client.py::test_direct_run_skipping_the_queue_is_refused.

What a user sees when the queue is full (Gradio 6.31, no hook to change the text):
the HTTP API answers ``POST /gradio_api/queue/join`` with 503 and the detail "Queue is
full. Max size is 8 and size is 8."; gradio_client raises
``QueueError("Queue is full! Please try again.")``; the browser page shows Gradio's
"This application is currently busy. Please try again." on the Restore event.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import app
from gpen_core.restorer import Restorer, get_restorer

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401
from .panel_figures import shown_peak_ram
from .test_app_client import ARGS

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"  # the smallest example (384×384, one face)
CLIENTS = 5
WAIT_S = 60.0


def _client(url: str):
    from gradio_client import Client

    return Client(url, verbose=False)


def _restore(url: str) -> dict[str, Any]:
    """One restore of the example by a fresh client: the JSON record and the panel."""
    from gradio_client import handle_file

    _, _, md, _, record = _client(url).predict(handle_file(str(EXAMPLE)), *ARGS, api_name="/restore")
    return record | {"panel": md}


def _delta(record: dict[str, Any]) -> int:
    p = record["peaks"]
    return p["rss_bytes"] - p["baseline_rss_bytes"]


class InFlight:
    """Counts simultaneous Restorer calls (outside the engine's own lock: what the queue lets through)."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()

    def wrap(self, call):
        def counted(restorer: Restorer, *a: Any, **kw: Any):
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                return call(restorer, *a, **kw)
            finally:
                with self._lock:
                    self.now -= 1

        return counted


def test_simultaneous_clients_each_get_their_own_measurement(server_url: str, low_mode_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _restore(server_url)  # loads the models (if an earlier test did not): not what is measured below
    solo = _restore(server_url)
    solo_delta = _delta(solo)
    assert solo_delta > 0

    inflight = InFlight()
    monkeypatch.setattr(Restorer, "__call__", inflight.wrap(Restorer.__call__))
    t = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        records = list(pool.map(lambda _: _restore(server_url), range(CLIENTS)))
    wall = time.perf_counter() - t

    assert inflight.most == 1, f"{inflight.most} restores ran at once; the queue must let through one"
    # Each call starts from a trimmed heap, so the same request reads about the same peak
    # (measured 70-110 MB for this one); five restores at once would show several times that.
    band = 1.5 * solo_delta + 60e6
    deltas = [_delta(r) for r in records]
    for r, d in zip(records, deltas):
        assert r["mode"] == "low" and r["faces"] == solo["faces"] >= 1
        assert 0 < d < band, f"peak above baseline {d / 1e6:.0f} MB; alone it was {solo_delta / 1e6:.0f} MB"
        # the panel shows this request's own figure (rounded to 2 decimals of a GB at most: ±5 MB)
        assert shown_peak_ram(r["panel"]) == pytest.approx(r["peaks"]["rss_bytes"], abs=5e6)
        # Not the sum of the others: no request carries the bulk of what all five measured.
        assert d < 0.5 * sum(deltas), [f"{x / 1e6:.0f} MB" for x in deltas]
    # Serialized: the engine's own times add up to no more than the wall time of the batch,
    # so no request's time includes another's (or its wait in the queue).
    totals = [r["timings"]["total_s"] for r in records]
    assert sum(totals) <= wall, (totals, wall)


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_full_queue_says_busy_try_again_and_then_serves(server_url: str, low_mode_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradio_client import handle_file
    from gradio_client.utils import QueueError, Status

    queue = app.demo._queue
    monkeypatch.setattr(queue, "max_size", 1)  # the real demo's queue, made small: one waiting request fills it
    engine = get_restorer()
    client = _client(server_url)
    photo = handle_file(str(EXAMPLE))

    engine._lock.acquire()  # as if a long restore were running: the first request blocks in the engine
    try:
        running = client.submit(photo, *ARGS, api_name="/restore")
        _wait_for(lambda: running.status().code in (Status.PROCESSING, Status.PROGRESS), "the first request to start")
        waiting = client.submit(photo, *ARGS, api_name="/restore")
        _wait_for(lambda: len(queue) == 1, "the second request to wait in the queue")

        refused = client.submit(photo, *ARGS, api_name="/restore")
        with pytest.raises(QueueError, match="Queue is full! Please try again"):
            refused.result(timeout=WAIT_S)

        # The same refusal over plain HTTP (what the browser's client gets and turns into
        # "This application is currently busy. Please try again."): 503 with Gradio's detail.
        [fn_index] = [i for i, d in app.demo.fns.items() if d.api_name == "restore"]
        body = {"data": [None, *ARGS], "fn_index": fn_index, "session_hash": "load-test", "event_data": None, "trigger_id": None}
        r = httpx.post(f"{server_url.rstrip('/')}/gradio_api/queue/join", json=body, timeout=30)
        assert r.status_code == 503 and "Queue is full" in r.json()["detail"], r.text
    finally:
        engine._lock.release()

    # Nothing was lost or broken: both accepted requests finish, and the next one is served.
    for job in (running, waiting):
        *_, record = job.result(timeout=WAIT_S)
        assert record["faces"] >= 1
    assert _restore(server_url)["faces"] >= 1


# ------------------------------------------------- the soak's leak estimate


def _soak_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench  # the soak lives in benchmarks/bench.py

    return bench


def test_soak_growth_ignores_the_allocator_flip_and_catches_a_leak() -> None:
    """The soak's verdict (benchmarks/bench.py --soak-only): RSS flipping between two levels is not growth; a steady climb is."""
    soak = _soak_module()

    def rows(rss: list[float]) -> list[dict[str, Any]]:
        return [{"request": i + 1, "rss_after_bytes": int(v), "peak_rss_bytes": int(v) + 10**6, "total_s": 0.5, "faces": 1}
                for i, v in enumerate(rss)]  # fmt: skip

    # glibc keeps or returns ~50 MB of one request's buffers: after-request RSS alternates.
    flip = [1.20e9 + 50e6 * (i % 3 == 0) for i in range(100)]
    assert flip[9] - flip[10] == 50e6  # so a single request's value is ±50 MB depending on where it lands
    s = soak.soak_summary(rows(flip))
    assert s["growth_after_warm_up_bytes"] == 0 and abs(s["slope_bytes_per_request"]) < 1e6

    leak = [1.20e9 + 1e6 * i for i in range(100)]  # 1 MB a request
    s = soak.soak_summary(rows(leak))
    assert s["growth_after_warm_up_bytes"] == 90e6 and s["slope_bytes_per_request"] == 1e6
    assert "| 100 |" in soak.soak_table(rows(leak)) and "| 10 |" in soak.soak_table(rows(leak))
