"""The upload cap in Ray Serve's HTTP proxy: refused before the proxy queues the body.

The middleware is driven with plain ASGI messages (no Ray); the callback is checked with
Ray's own validator, and the local Ray session with a stand-in for the ``ray`` module.
End to end, with a real proxy and replica: ``benchmarks/serve_body_cap.py at commit 67ff8cb`` (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import types
from typing import Any

import pytest

from gpen_core.scaleout import proxy_limits, runtime

MB = 1_000_000


def _call(method: str, path: str, headers: dict[bytes, bytes]) -> tuple[list[dict[str, Any]], list[str]]:
    """Run BodyCap around an app that records being reached; returns (messages sent, what happened)."""
    seen: list[str] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append("app")

    async def receive() -> dict[str, Any]:
        seen.append("receive")  # reading the body: the cap must answer before this
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers.items())}
    asyncio.run(proxy_limits.BodyCap(app)(scope, receive, send))
    return sent, seen


def _answer(sent: list[dict[str, Any]]) -> tuple[int, str]:
    return sent[0]["status"], json.loads(sent[1]["body"])["error"]


def test_a_declared_oversize_upload_gets_413_without_reaching_serve() -> None:
    sent, seen = _call("POST", "/restore", {b"content-length": str(60 * MB).encode()})
    status, error = _answer(sent)
    assert status == 413 and seen == []
    assert "The file is 60 MB; the limit is 25 MB" in error
    assert (b"connection", b"close") in sent[0]["headers"]  # the unread body is dropped with the connection


def test_a_body_of_unknown_length_gets_411_without_reaching_serve() -> None:
    sent, seen = _call("POST", "/restore", {b"transfer-encoding": b"chunked"})
    status, error = _answer(sent)
    assert status == 411 and seen == []
    assert "Content-Length" in error and "25 MB" in error
    sent, seen = _call("POST", "/restore", {b"content-length": b"12abc"})
    assert _answer(sent)[0] == 400 and seen == []


def test_uploads_within_the_limit_and_other_routes_pass() -> None:
    assert _call("POST", "/restore", {b"content-length": str(25 * MB).encode()}) == ([], ["app"])
    assert _call("POST", "/restore/x", {b"content-length": str(3 * MB).encode()}) == ([], ["app"])
    assert _call("POST", "/other-app", {b"transfer-encoding": b"chunked"}) == ([], ["app"])  # not ours to cap
    assert _call("GET", "/restore", {}) == ([], ["app"])


def test_the_callback_is_what_serves_proxy_accepts() -> None:
    http_util = pytest.importorskip("ray.serve._private.http_util", reason="needs Ray Serve (requirements-ray.txt)")
    from ray.serve._private.utils import call_function_from_import_path

    middlewares = call_function_from_import_path(proxy_limits.PROXY_CALLBACK)
    assert http_util.validate_http_proxy_callback_return(middlewares) == middlewares
    assert [m.cls for m in middlewares] == [proxy_limits.BodyCap]


class _FakeRay(types.SimpleNamespace):
    """The parts of ``ray`` a local ray_session touches; init records the environment the node would inherit."""

    def __init__(self) -> None:
        super().__init__(env_at_init=None)

    def is_initialized(self) -> bool:
        return False

    def init(self, **_: Any) -> None:
        self.env_at_init = dict(os.environ)

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def get_runtime_context(self) -> Any:
        return types.SimpleNamespace(gcs_address="127.0.0.1:6379")

    def shutdown(self) -> None:
        pass


@pytest.mark.parametrize("already", [None, "my.own.callback"])
def test_a_local_ray_starts_its_proxy_with_the_cap(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                   already: str | None) -> None:
    fake = _FakeRay()
    monkeypatch.setattr(runtime, "import_ray", lambda: fake)
    monkeypatch.setattr(runtime, "_force_loopback", lambda: None)
    monkeypatch.setattr(runtime, "_start_reaper", lambda ray: None)
    if already is None:  # set then unset, so monkeypatch also removes what the session sets
        monkeypatch.setenv(proxy_limits.PROXY_CALLBACK_ENV, "x")
        monkeypatch.delenv(proxy_limits.PROXY_CALLBACK_ENV)
    else:
        monkeypatch.setenv(proxy_limits.PROXY_CALLBACK_ENV, already)
    with runtime.ray_session(None, num_cpus=1, temp_dir=tmp_path):
        pass
    assert fake.env_at_init[proxy_limits.PROXY_CALLBACK_ENV] == (already or proxy_limits.PROXY_CALLBACK)
