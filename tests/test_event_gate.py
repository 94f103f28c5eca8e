"""The page's private events, refused on every route that starts an event; the event body's cap.

Gradio 6.31 hides ``api_visibility="private"`` events from /gradio_api/info, but runs them by
name through /call, /call/v2, /run and /api, and by number through queue/join
(gpen_app.gradio_seam.PageOnlyEvents). Each route is tried here with the handlers that must
never run for an API caller: the weights panel (it names the models folder), the preparation
status, the download and its Stop button (which would stop anyone's download).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import app
from gpen_app.gradio_seam import PageOnlyEvents
from gpen_app import uploads


PRIVATE = ("weights_view", "preparation_status", "download_weights")


def _stop_download_name() -> str:
    """The Stop download button's handler's event name."""
    stop = app.stop_download_btn._id
    return next(d.api_name for d in app.demo.fns.values() if d.fn is not None and any(t[0] == stop for t in d.targets))


@pytest.fixture()
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which of the private handlers ran (each replaced by a recorder)."""
    calls: list[str] = []
    for i, d in app.demo.fns.items():
        if d.api_name in PRIVATE or d.api_name == _stop_download_name():
            name = d.api_name
            monkeypatch.setattr(d, "fn", lambda *a, _n=name, **k: calls.append(_n))
    monkeypatch.setattr(app.STATE.downloads, "stop", lambda *a: calls.append("downloads.stop"))
    return calls


def _names() -> list[str]:
    return [*PRIVATE, _stop_download_name()]


def _data(name: str) -> list:
    return {"weights_view": ["auto", "default", "default", False, 1, "enhance"],
            "download_weights": ["low", "default", "default", False, 1, "enhance"]}.get(name, [])


@pytest.mark.parametrize("route", ["call", "call/v2", "run", "api"])
def test_private_events_are_not_found_on_the_named_routes(server_url: str, ran: list[str], route: str) -> None:
    for name in _names():
        body: dict = {"data": _data(name)} if route != "call/v2" else {}
        r = httpx.post(f"{server_url}/gradio_api/{route}/{name}", json=body, timeout=30)
        assert r.status_code == 404, (route, name, r.status_code, r.text[:300])
        assert "no such endpoint" in r.json()["detail"]
        r = httpx.post(f"{server_url}/gradio_api/{route}/{name}/", json=body, timeout=30)  # Gradio's trailing-slash twin
        assert r.status_code == 404, (route, name, r.status_code)
    time.sleep(0.5)  # an event started anyway would have run by now
    assert ran == []


def test_a_private_event_by_number_through_a_public_name_is_refused(server_url: str, ran: list[str]) -> None:
    """/run and /api resolve ``fn_index`` in the body before the name in the path."""
    index = next(i for i, d in app.demo.fns.items() if d.api_name == "download_weights")
    for route in ("run", "api"):
        r = httpx.post(f"{server_url}/gradio_api/{route}/restore", json={"data": _data("download_weights"), "fn_index": index}, timeout=30)
        assert r.status_code == 404, (route, r.status_code, r.text[:300])
    assert ran == []


def test_private_events_by_number_need_the_page(server_url: str, ran: list[str]) -> None:
    for name in _names():
        index = next(i for i, d in app.demo.fns.items() if d.api_name == name)
        body = {"data": _data(name), "fn_index": index, "session_hash": f"s{index}", "event_data": None, "trigger_id": None}
        r = httpx.post(f"{server_url}/gradio_api/queue/join", json=body, timeout=30)
        assert r.status_code == 403 and "not part of its API" in r.json()["detail"], (name, r.status_code, r.text[:300])
    assert ran == []


def test_results_stream_of_a_private_event_is_not_found(server_url: str) -> None:
    for route in ("call", "call/v2"):
        r = httpx.get(f"{server_url}/gradio_api/{route}/download_weights/0123456789abcdef", timeout=30)
        assert r.status_code == 404, (route, r.status_code, r.text[:300])


def test_an_unknown_name_on_call_v2_is_404_not_500(server_url: str) -> None:
    r = httpx.post(f"{server_url}/gradio_api/call/v2/no_such_event", json={}, timeout=30)
    assert r.status_code == 404, (r.status_code, r.text[:300])


def test_the_public_restore_still_runs_through_call(server_url: str) -> None:
    """No weights in this test's models folder: the restore runs and says so (what /restore answers without them)."""
    example = Path(app.EXAMPLES_DIR) / "astronaut_low_resolution.jpg"
    with example.open("rb") as f:
        up = httpx.post(f"{server_url}/gradio_api/upload", files={"files": (example.name, f, "image/jpeg")}, timeout=30)
    photo = {"path": up.json()[0], "meta": {"_type": "gradio.FileData"}, "orig_name": example.name}
    r = httpx.post(f"{server_url}/gradio_api/call/restore", json={"data": [photo, "low", "default", "default", 1.0, 0.9, 50, False, "default", 1, "enhance", None, True, "auto", 0.0, 0.0]}, timeout=30)
    assert r.status_code == 200, r.text[:300]
    event_id = r.json()["event_id"]
    with httpx.stream("GET", f"{server_url}/gradio_api/call/restore/{event_id}", timeout=120) as s:
        text = "".join(s.iter_text())
    assert "event: error" in text and "Weights missing" in text, text[:500]


# ------------------------------------------------------------------ the body's cap


def test_a_declared_body_over_the_cap_is_refused_at_once(server_url: str) -> None:
    cap = uploads.max_event_body_bytes()
    assert 33_000_000 < cap < 40_000_000  # a 25 MB pasted image as base64, and the other arguments
    body = b"{" + b" " * (cap + 10) + b"}"
    t0 = time.perf_counter()
    r = httpx.post(f"{server_url}/gradio_api/queue/join", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    assert "the limit is 34.3 MB" in r.json()["detail"]  # 25 MB as base64, plus 1 MB
    assert time.perf_counter() - t0 < 10


def test_a_chunked_body_is_cut_at_the_cap(server_url: str) -> None:
    sent = [0]

    def chunks() -> Iterator[bytes]:
        for _ in range(200):  # 200 MB if nobody stops it
            sent[0] += 1
            yield b" " * 1_000_000

    r = httpx.post(f"{server_url}/gradio_api/call/weights_view", content=chunks(), headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    assert "over 34" in r.json()["detail"] or "over 35" in r.json()["detail"], r.json()


def _drive(gate: PageOnlyEvents, path: str, body_chunks: list[bytes]) -> tuple[list[dict], bytes]:
    """Run one POST through the gate with a fake inner app: (messages the gate sent, body the inner app got)."""
    got: list[bytes] = []
    sent: list[dict] = []

    async def inner(scope: dict, receive, send) -> None:
        message = await receive()
        got.append(message["body"])

    gate.app = inner
    queue = [{"type": "http.request", "body": c, "more_body": i < len(body_chunks) - 1} for i, c in enumerate(body_chunks)]

    async def receive() -> dict:
        return queue.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "headers": []} | {"path": path}
    asyncio.run(gate(scope, receive, send))
    return sent, b"".join(got)


def test_a_body_over_the_cap_names_both_sizes_as_the_file_limit_does() -> None:
    """413 with the file refusal's wording: '2.5 MB' (it said 'the limit is 2 MB', rounding the cap down)."""
    sent, got = _drive(PageOnlyEvents(None, app.demo, max_body_bytes=2_500_000), "/gradio_api/queue/join", [b" " * 10**6] * 3)
    assert got == b"" and sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["detail"].startswith("The request is over 3 MB; the limit is 2.5 MB. Upload files")


def test_the_body_is_read_in_linear_time() -> None:
    """8 MB in 4 KB chunks: joined once, not re-copied at every chunk (the old ``body +=`` took seconds)."""
    public = next(i for i, d in app.demo.fns.items() if d.api_name == "restore")  # handed on: not a private event
    payload = json.dumps({"data": [], "fn_index": public, "session_hash": "x", "pad": "a" * 8_000_000}).encode()
    chunks = [payload[i:i + 4096] for i in range(0, len(payload), 4096)]
    gate = PageOnlyEvents(None, app.demo, max_body_bytes=10_000_000)
    t0 = time.perf_counter()
    sent, got = _drive(gate, "/gradio_api/queue/join", chunks)
    took = time.perf_counter() - t0
    assert sent == [] and got == payload  # handed on unchanged, whole
    assert took < 0.5, f"{took:.2f} s to read 8 MB"
