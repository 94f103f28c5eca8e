"""Gradio's internals the app leans on, in one place: raw image uploads, unknown routes, where a call came from.

Written for Gradio 6 (:data:`GRADIO_VERSIONS`, checked with 6.31). Only ``app.py``
imports this module: the rest of the library never imports Gradio (``.importlinter``,
contract ``no-ui-in-library``, also forbids every room to import this module).
``tests/test_compat.py`` fails loudly when the installed Gradio no longer has what a
seam here reaches into.

* :func:`raw_upload`: an image input that hands the handler the uploaded file's path
  untouched. Gradio's own ``Image.preprocess`` opens every upload with Pillow and
  converts it (to RGB by default) before our hardened decoder sees it: a greyscale bomb
  is decoded in full, 16-bit is clipped, transparency dropped, and an unreadable file
  gets Gradio's generic error. The override is set on the instance: a ``gr.Image``
  subclass would make Gradio write an ``app.pyi`` stub at import.
* :func:`app_kwargs`: ``POST /gradio_api/run/<name>`` for a name no event has
  answers 404 (Gradio raises ``FnIndexInferError`` there, which FastAPI turns into 500),
  and :class:`PageOnlyEvents` keeps the page's private events to the page.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import gradio as gr

from gpen_core.compat.versions import check_version
from gpen_core.errors import InputError

GRADIO_VERSIONS = ((6, 0), (7, 0))
SEAM = "gpen_core.compat.gradio"
INPUT_TITLE = "Cannot use this input"


def seam_problems() -> list[str]:
    """What this Gradio lacks of the internals used here (empty when all is in place)."""
    problems = []
    params = list(inspect.signature(gr.Image.preprocess).parameters)
    if params != ["self", "payload"]:
        problems.append(f"gr.Image.preprocess takes {params}, not (self, payload)")
    from gradio.data_classes import ImageData

    missing = {"path", "url"} - set(ImageData.model_fields)
    if missing:
        problems.append(f"gradio.data_classes.ImageData has no {sorted(missing)}")
    try:
        from gradio.route_utils import FnIndexInferError  # noqa: F401
    except ImportError:
        problems.append("gradio.route_utils.FnIndexInferError is gone")
    return problems


def check_installed() -> None:
    """Warn for a Gradio outside :data:`GRADIO_VERSIONS`; raise when a seam's internals are gone."""
    version = check_version("gradio", GRADIO_VERSIONS, SEAM)
    problems = seam_problems()
    if problems:
        raise RuntimeError(f"{SEAM} was written for gradio {GRADIO_VERSIONS}; gradio {version} differs: "
                           + "; ".join(problems) + ". Install gradio 6.x (requirements.txt).")


def raw_upload(component: gr.Image, save_data_url: Callable[[str], Any]) -> gr.Image:
    """Make ``component`` hand its upload to the handler as the file's path, unopened.

    A pasted image arrives as a ``data:`` URL; ``save_data_url`` writes its bytes to a
    file of ours and returns its path (an :class:`InputError` becomes the page's error).
    """
    check_installed()
    component.preprocess = functools.partial(_raw_preprocess, save_data_url)  # type: ignore[method-assign]
    return component


def _raw_preprocess(save_data_url: Callable[[str], Any], payload: Any) -> str | None:
    if payload is None:
        return None
    url = getattr(payload, "url", None)
    if url and url.startswith("data:"):  # pasted from the clipboard
        try:
            return str(save_data_url(url))
        except InputError as exc:
            raise gr.Error(f"{INPUT_TITLE}. {exc}", title=INPUT_TITLE, print_exception=False) from None
    if payload.path is None:
        raise gr.Error(f"{INPUT_TITLE}. The upload arrived without a file; upload it again.", title=INPUT_TITLE,
                       print_exception=False)
    return str(payload.path)


def app_kwargs(blocks: gr.Blocks) -> dict[str, Any]:
    """``launch(app_kwargs=...)``: unknown ``/run/<name>`` routes answer 404, and the page's
    private events refuse calls that do not come from the page (:class:`PageOnlyEvents`)."""
    from fastapi.responses import JSONResponse
    from gradio.route_utils import FnIndexInferError
    from starlette.middleware import Middleware

    async def not_found(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "Not Found: this app has no such endpoint; see /gradio_api/info"}, status_code=404)

    return {"exception_handlers": {FnIndexInferError: not_found}, "middleware": [Middleware(PageOnlyEvents, blocks=blocks)]}


PAGE_ONLY = ("This event belongs to the app's page and is not part of its API; open the page in a browser. "
             "API clients call /restore (see /gradio_api/info).")


class PageOnlyEvents:
    """ASGI middleware: ``POST .../queue/join`` naming an event marked ``api_visibility="private"``
    answers 403 unless it carries the page's origin (:func:`came_from_page`).

    Gradio hides private events from its API page and its clients, but its queue still
    runs any event by number (``fn_index``) for anyone who posts it; the page's own calls
    are told apart by their ``Origin``. The body is read here and handed on unchanged.
    """

    def __init__(self, app: Any, blocks: gr.Blocks) -> None:
        self.app, self.blocks = app, blocks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not scope.get("path", "").rstrip("/").endswith("/queue/join"):
            await self.app(scope, receive, send)
            return
        body, more = b"", True  # read whole, as Gradio itself would: then handed on unchanged
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self._private(body) and not came_from_page(headers, self._page_hosts()):
            await _json(send, 403, PAGE_ONLY)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _page_hosts(self) -> set[str]:
        """Hosts the page is served at beyond the request's own: the share link (its tunnel may
        rewrite ``Host``), and ``GPEN_PAGE_HOSTS`` (comma-separated ``host[:port]``, for a reverse
        proxy that forwards neither ``Host`` nor ``X-Forwarded-Host``)."""
        import os

        hosts = {h.strip().lower() for h in os.environ.get("GPEN_PAGE_HOSTS", "").split(",") if h.strip()}
        share = getattr(self.blocks, "share_url", None)
        if share:
            hosts.add(urlsplit(share).netloc.lower())
        return hosts

    def _private(self, body: bytes) -> bool:
        import json

        try:
            index = json.loads(body or b"{}").get("fn_index")
            fn = self.blocks.fns.get(int(index)) if index is not None else None
        except (ValueError, TypeError, AttributeError):
            return False  # Gradio answers a malformed body itself
        return fn is not None and getattr(fn, "api_visibility", "public") == "private"


async def _json(send: Any, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def came_from_page(headers: Mapping[str, str] | None, page_hosts: set[str] | None = None) -> bool:
    """Whether a request carries the page's own origin: an ``Origin`` (or, failing that,
    ``Referer``) whose host is the host the request was sent to (``Host``, ``X-Forwarded-Host``)
    or one of ``page_hosts``.

    A browser adds ``Origin`` to every POST the page makes (the event queue's
    ``queue/join``); API clients (gradio_client, curl) send none. A barrier against API
    use of the page's private events, not authentication: a scripted client can forge
    headers, so what must never happen on a shared server is also gated by the
    operator's flags.
    """
    if not headers:
        return False
    lower = {k.lower(): v for k, v in headers.items()}
    source = lower.get("origin") or lower.get("referer")
    if not source or source == "null":
        return False
    origin_host = urlsplit(source).netloc.lower()
    hosts = {h.strip().lower() for key in ("host", "x-forwarded-host") for h in lower.get(key, "").split(",") if h.strip()}
    return bool(origin_host) and origin_host in hosts | (page_hosts or set())
