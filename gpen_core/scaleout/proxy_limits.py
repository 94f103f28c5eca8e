"""The upload cap inside Ray Serve's HTTP proxy, before the proxy queues a byte of the body.

Measured with Ray 2.60 (``benchmarks/serve_body_cap.py at commit 67ff8cb``, docs/serving.md): the proxy
reads a request body into an unbounded queue as fast as the client sends it, and the
replica pulls it from there in batches, so a chunked 200 MB POST held +379 MB in the
proxy and +325 MB in the replica before the replica's own 25 MB check could answer.
Serve has no request-size setting; its HTTP proxy callback
(``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, read when the proxy starts) returns
Starlette middlewares that run in the proxy, in front of that queue. :class:`BodyCap`
is that middleware: on ``ROUTE_PREFIX`` it answers 413 to a declared Content-Length
over the upload limit and 411 to a body of unknown length (chunked), before the request
reaches Serve. A local Ray started by :func:`gpen_core.scaleout.runtime.ray_session`
sets the variable; a cluster started elsewhere needs it set where ``ray start`` runs.
"""

from __future__ import annotations

import json
from typing import Any

from gpen_core.images.limits import DEFAULT_LIMITS, InputLimits, too_big

# The Serve app's route (gpen_core.scaleout.serve): here, beside the cap that guards it, so the
# proxy's callback module imports nothing of the app it sits in front of.
ROUTE_PREFIX = "/restore"
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "gpen_core.scaleout.proxy_limits.proxy_middlewares"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def proxy_middlewares() -> list[Any]:
    """What Serve's HTTP proxy callback returns: the body cap, as a Starlette middleware."""
    from starlette.middleware import Middleware

    return [Middleware(BodyCap)]


class BodyCap:
    """Pure ASGI middleware: refuse an oversize or unknown-length upload to ``route`` before it is read.

    ``max_bytes`` defaults to the decoder's upload limit (``InputLimits.max_file_bytes``),
    and the 413 says it in the decoder's words. Other routes and methods pass untouched.
    """

    def __init__(self, app: Any, max_bytes: int | None = None, route: str = ROUTE_PREFIX) -> None:
        self.app, self.route = app, route
        self.limits = DEFAULT_LIMITS if max_bytes is None else InputLimits(max_file_bytes=max_bytes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if (scope.get("type") != "http" or scope.get("method") not in _BODY_METHODS
                or not (path == self.route or path.startswith(self.route + "/"))):
            await self.app(scope, receive, send)
            return
        declared, chunked = None, False
        for key, value in scope.get("headers", ()):
            if key.lower() == b"content-length":
                declared = value.strip()
            elif key.lower() == b"transfer-encoding":
                chunked = True
        if chunked or declared is None:
            await _answer(send, 411, (
                f"Send the image with a Content-Length header (curl --data-binary @photo.jpg does): a body of unknown "
                f"length is refused here because the server would hold all of it before the {self.limits.max_file_bytes // 1_000_000} MB "
                "size check."))
            return
        if not declared.isdigit():
            await _answer(send, 400, "The Content-Length header is not a number of bytes; send the image again.")
            return
        if int(declared) > self.limits.max_file_bytes:
            await _answer(send, 413, str(too_big(int(declared), self.limits)))
            return
        await self.app(scope, receive, send)


async def _answer(send: Any, status: int, message: str) -> None:
    """A JSON error as the deployment writes them; the connection is closed so the unread body is dropped."""
    body = json.dumps({"status": "error", "error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
