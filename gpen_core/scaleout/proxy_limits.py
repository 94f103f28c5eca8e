"""The upload cap inside Ray Serve's HTTP proxy (:class:`BodyCap`, added by the proxy's callback), before the proxy
queues a byte of a body it has no size limit for. Measured and explained: docs/serving.md."""

from __future__ import annotations

import json
from typing import Any

from gpen_core.images.limits import DEFAULT_LIMITS, too_big

# The Serve app's route: here, so the proxy's callback module imports nothing of the app.
ROUTE_PREFIX = "/restore"
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "gpen_core.scaleout.proxy_limits.proxy_middlewares"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def proxy_middlewares() -> list[Any]:
    """What Serve's HTTP proxy callback returns: the body cap, as a Starlette middleware."""
    from starlette.middleware import Middleware

    return [Middleware(BodyCap)]


class BodyCap:
    """Pure ASGI middleware: on :data:`ROUTE_PREFIX`, 413 to a declared Content-Length over the decoder's upload
    limit (in its words) and 411 to a body of unknown length; other routes pass untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if (scope.get("type") != "http" or scope.get("method") not in _BODY_METHODS
                or not (path == ROUTE_PREFIX or path.startswith(ROUTE_PREFIX + "/"))):
            await self.app(scope, receive, send)
            return
        headers = {key.lower(): value.strip() for key, value in scope.get("headers", ())}
        declared = headers.get(b"content-length")
        if b"transfer-encoding" in headers or declared is None:
            limit_mb = DEFAULT_LIMITS.max_file_bytes // 1_000_000
            await _answer(send, 411, "Send the image with a Content-Length header (curl --data-binary @photo.jpg "
                          "does): a body of unknown length is refused here because the server would hold all of it "
                          f"before the {limit_mb} MB size check.")
            return
        if not declared.isdigit():
            await _answer(send, 400, "The Content-Length header is not a number of bytes; send the image again.")
            return
        if int(declared) > DEFAULT_LIMITS.max_file_bytes:
            await _answer(send, 413, str(too_big(int(declared), DEFAULT_LIMITS)))
            return
        await self.app(scope, receive, send)


async def _answer(send: Any, status: int, message: str) -> None:
    """A JSON error as the deployment writes them; the connection is closed so the unread body is dropped."""
    body = json.dumps({"status": "error", "error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
