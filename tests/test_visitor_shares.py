"""On a shared server each visitor gets a share: of the queue's places, of the upload route, of the editor's store.

One visitor with many tabs (or a script) used to take every place (everyone else: "Queue is full"), any number of
uploads, and push everyone's painted damage out of the editor's store. Visitors are told apart by their address as
the server resolved it (gpen_app.gradio_seam.visitor_of): here two clients behind the same loopback proxy, as a
share link's tunnel presents them (``X-Forwarded-For``, which uvicorn takes from a loopback peer). The app is served
in-process; the restore is a stub held on a lock, so nothing loads a model.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import app
from gpen_app.gradio_seam import BoundedBlobs, visitor_of
from gpen_app.app_state import Policy

from .test_stop_full_queue import _event, _wait

A, B = "203.0.113.7", "198.51.100.9"  # two visitors' addresses (documentation ranges)
RESTORE_ARGS = [None, "low", "default", "default", 1.0, 0.9, 50, False, "default", 1, "enhance", None, True, "auto", 0.0, 0.0]


def _as(visitor: str, **headers: str) -> dict[str, str]:
    return {"X-Forwarded-For": visitor, **headers}


@pytest.fixture()
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))


@pytest.fixture()
def held_restores(server_url: str, shared: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, object]]:
    """The photo restore's handler replaced by one that waits until the test ends: (fn_index, dependency)."""
    index, dep = next((i, d) for i, d in app.demo.fns.items() if d.api_name == "restore")
    held = threading.Event()
    monkeypatch.setattr(dep, "fn", lambda *a, **k: (held.wait(30), (None, None, "", None, None))[1])
    queue = app.demo._queue
    try:
        yield index, dep
    finally:
        held.set()
        _wait(lambda: len(queue) == 0 and not any(queue.active_jobs), timeout=30)


def _join(server_url: str, index: int, visitor: str, session: str | None = None) -> httpx.Response:
    body = {"data": RESTORE_ARGS, "fn_index": index, "session_hash": session or secrets.token_hex(6),
            "event_data": None, "trigger_id": None}
    return httpx.post(f"{server_url}/gradio_api/queue/join", json=body, headers=_as(visitor), timeout=30)


def test_a_visitor_past_their_share_is_refused_while_another_gets_in(server_url: str, held_restores: tuple,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of A's events comes with a fresh session hash, as a script mints them: the share holds all the same."""
    index, _ = held_restores
    queue = app.demo._queue
    assert _join(server_url, index, A).status_code == 200
    _wait(lambda: any(queue.active_jobs))  # A's first restore runs (held), the next waits
    assert _join(server_url, index, A).status_code == 200
    refused = secrets.token_hex(6)
    r = _join(server_url, index, A, refused)
    assert r.status_code == 429, r.text[:300]  # not 503: the page shows this detail, not Gradio's "busy"
    # and its panel once the pop-up has closed (the failure event reads it back; it said "see the message that popped up")
    assert "You already have 2 restores" in (app.STATE.take_error(refused, "photo") or "")
    detail = r.json()["detail"]
    assert detail.startswith("You already have 2 restores waiting or running on this server"), r.json()
    # what frees a place: either tab's Stop (a waiting restore's too), or a closed tab
    assert "the Restore tab's Stop or the Video tab's Stop" in detail and "close a tab that waits" in detail, detail
    r = httpx.post(f"{server_url}/gradio_api/call/restore", json={"data": RESTORE_ARGS}, headers=_as(A), timeout=30)
    assert r.status_code == 429  # the API's route counts the same places
    assert _join(server_url, index, B).status_code == 200  # another visitor still gets in
    assert len(queue) == 2  # A's waiting one and B's
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=False))  # one user on 127.0.0.1: Gradio's queue alone
    assert _join(server_url, index, A).status_code == 200


def test_a_cancelled_or_finished_restore_frees_its_place(server_url: str, held_restores: tuple) -> None:
    index, _ = held_restores
    queue = app.demo._queue
    assert _join(server_url, index, A).status_code == 200
    _wait(lambda: any(queue.active_jobs))
    waiting = secrets.token_hex(6)
    event_id = _join(server_url, index, A, waiting).json()["event_id"]
    assert _join(server_url, index, A).status_code == 429
    r = httpx.post(f"{server_url}/gradio_api/cancel", json={"session_hash": waiting, "fn_index": index, "event_id": event_id},
                   headers=_as(A), timeout=30)
    assert r.status_code == 200, r.text[:300]
    _wait(lambda: len(queue) == 0)
    assert _join(server_url, index, A).status_code == 200  # the cancelled one's place is A's again


def test_a_visitor_at_their_share_can_still_stop_their_clip(server_url: str, held_restores: tuple) -> None:
    index, _ = held_restores
    assert _join(server_url, index, A).status_code == 200
    assert _join(server_url, index, A).status_code == 200
    assert _join(server_url, index, A).status_code == 429
    visitor = secrets.token_hex(6)
    running = app.STATE.stops.start(visitor)
    try:
        stop, dep = _event("video-stop")
        body = {"data": [], "fn_index": stop, "session_hash": visitor, "event_data": None, "trigger_id": None}
        r = httpx.post(f"{server_url}/gradio_api/run/predict", json=body, headers=_as(A, Origin=server_url), timeout=30)
        assert r.status_code == 200, r.text[:300]
        assert running.is_set()
    finally:
        app.STATE.stops.finish(visitor, running)


# ------------------------------------------------------------------ uploads


def _upload(server_url: str, visitor: str, size: int, chunked: bool = False) -> httpx.Response:
    if chunked:  # no Content-Length
        boundary = "b" + secrets.token_hex(8)
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"clip.mp4\"\r\n"
                "Content-Type: video/mp4\r\n\r\n").encode()

        def body() -> Iterator[bytes]:
            yield head
            for _ in range(size // 100_000):
                yield b"\0" * 100_000
            yield f"\r\n--{boundary}--\r\n".encode()

        return httpx.post(f"{server_url}/gradio_api/upload", content=body(), timeout=30,
                          headers=_as(visitor, **{"Content-Type": f"multipart/form-data; boundary={boundary}"}))
    return httpx.post(f"{server_url}/gradio_api/upload", files={"files": ("photo.jpg", b"\xff" * size, "image/jpeg")},
                      headers=_as(visitor), timeout=30)


def test_uploads_past_a_visitors_hourly_share_are_refused_with_when_to_retry(server_url: str, shared: None,
                                                                              monkeypatch) -> None:
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, visitor_upload_bytes=5_000_000))
    assert _upload(server_url, A, 2_000_000).status_code == 200
    assert _upload(server_url, A, 2_000_000).status_code == 200
    r = _upload(server_url, A, 2_000_000)
    assert r.status_code == 429, r.text[:300]
    assert r.text.startswith("You have uploaded 4.0 MB to this server in the last 60 minutes; each visitor may upload "
                             "5 MB in that time. You can upload this again in 60 minutes (at "), r.text
    assert _upload(server_url, B, 2_000_000).status_code == 200  # another visitor's share is their own
    r = _upload(server_url, B, 6_000_000)
    assert r.status_code == 429 and r.text.startswith("This upload is 6.0 MB; each visitor may upload 5 MB an hour."), r.text


def test_an_upload_gradio_refuses_as_too_large_is_not_charged(server_url: str, shared: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what the server kept counts against the hour: a file past Gradio's size limit was never kept."""
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, visitor_upload_bytes=5_000_000))
    monkeypatch.setattr(app.demo, "max_file_size", 3_000_000)
    visitor = "192.0.2.50"  # one the other tests' uploads have not charged
    assert _upload(server_url, visitor, 4_000_000).status_code == 413
    assert _upload(server_url, visitor, 2_000_000).status_code == 200
    r = _upload(server_url, visitor, 2_000_000)
    assert r.status_code == 200, r.text[:300]  # 4 MB kept: within the 5 MB share


def test_an_upload_its_client_leaves_mid_body_stays_charged(server_url: str, shared: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio keeps the partial file of a client that drops the connection (its temp file stays until a restart):
    a script repeating that must not get its share back each time."""
    import socket
    from urllib.parse import urlparse

    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, visitor_upload_bytes=5_000_000))
    visitor, boundary = "192.0.2.51", "b" + secrets.token_hex(8)
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"photo.jpg\"\r\n"
            "Content-Type: image/jpeg\r\n\r\n").encode()
    url = urlparse(server_url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall((f"POST /gradio_api/upload HTTP/1.1\r\nHost: {url.netloc}\r\nX-Forwarded-For: {visitor}\r\n"
                      f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 4000000\r\n\r\n"
                      ).encode() + head + b"\xff" * 3_000_000)
        time.sleep(0.5)  # the server reads what came before the client leaves
    time.sleep(0.5)
    r = _upload(server_url, visitor, 2_000_000)
    assert r.status_code == 429, (r.status_code, r.text[:300])  # 4 MB charged + 2 MB is past the 5 MB share


def test_an_upload_without_a_length_is_refused_on_a_shared_server(server_url: str, shared: None) -> None:
    """Its bytes could not be counted before they arrive; the page, gradio_client and curl always send a length."""
    r = _upload(server_url, "192.0.2.44", 2_000_000, chunked=True)
    assert r.status_code == 411 and r.text.startswith("An upload needs a Content-Length on this server"), (r.status_code, r.text[:300])


def test_the_upload_share_holds_a_clip_and_many_photos() -> None:
    """A clip at Gradio's upload limit and twenty 12 MP photos (~6 MB as JPEG) within the hour an upload is kept."""
    assert Policy().visitor_upload_bytes >= app.UPLOAD_MAX_BYTES + 20 * 6_000_000


# ------------------------------------------------------------------ the editor's store


def _paint(server_url: str, visitor: str, edit: str, size: int = 1000) -> None:
    fields = {"component_id": str(app.damage_in._id), "session_hash": secrets.token_hex(6), "fn_name": "accept_blobs",
              "type": "layer", "index": "0", "id": edit}
    r = httpx.post(f"{server_url}/gradio_api/component_server", data=fields, files={"blob": ("blob", b"\x89" * size, "image/png")},
                   headers=_as(visitor), timeout=30)
    assert r.status_code == 200, r.text[:300]


def _empty_store(monkeypatch: pytest.MonkeyPatch) -> BoundedBlobs:
    """A fresh store in place of the editor's, told whether the server is shared as the app tells its own."""
    store = BoundedBlobs(app.damage_in.blob_storage.shared)
    monkeypatch.setattr(app.damage_in, "blob_storage", store)
    return store


def test_a_visitors_strokes_push_out_only_their_own_edits(server_url: str, shared: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = _empty_store(monkeypatch)
    _paint(server_url, B, "b-edit")
    for i in range(20):  # one visitor's many strokes (or tabs)
        _paint(server_url, A, f"a{i}")
    assert "b-edit" in store  # B's Restore still finds B's strokes
    assert [k for k in store if k.startswith("a")] == ["a16", "a17", "a18", "a19"]  # A's share: a quarter of 16
    for i in range(20):  # many visitors: the total cap holds
        _paint(server_url, f"192.0.2.{i}", f"v{i}")
    assert len(store) == 16 and "v19" in store


def test_on_a_server_not_shared_its_one_visitor_has_the_whole_store(server_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """On localhost there is one visitor: a quarter of the store would drop their edits for nobody's sake."""
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=False))
    store = _empty_store(monkeypatch)
    for i in range(20):
        _paint(server_url, A, f"a{i}")
    assert list(store) == [f"a{i}" for i in range(4, 20)]  # the total cap of 16, not a quarter of it


def test_the_visitor_is_the_resolved_address_an_ipv6_one_by_its_64() -> None:
    assert visitor_of({"client": ("203.0.113.7", 5000)}) == "203.0.113.7"
    assert visitor_of({"client": ("2001:db8:1:2::5", 1)}) == visitor_of({"client": ("2001:db8:1:2:ffff::9", 2)}) == "2001:db8:1:2::/64"
    assert visitor_of({"client": ("2001:db8:1:3::5", 1)}) != visitor_of({"client": ("2001:db8:1:2::5", 1)})
    assert visitor_of({"client": ("::ffff:203.0.113.7", 1)}) == "203.0.113.7"  # a dual-stack socket: not one /64 for all
