"""Gradio's internals the app leans on: raw image uploads, unknown routes and the page's private events, each
visitor's share of the queue, the uploads and the editor's store (the queue as handlers see it: ``queue_seam``). Written for
Gradio 6 (checked with 6.31); only the app imports it; :func:`check_installed` raises (and ``tests/test_compat.py`` fails) when the installed Gradio moved them."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import ipaddress
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import gradio as gr

from gpen_app.queue_seam import queue_problems, set_on_self as _set_on_self
from gpen_core.compat.versions import check_version
from gpen_core.errors import InputError, megabytes

GRADIO_VERSIONS = ((6, 0), (7, 0))
SEAM = "gpen_app.gradio_seam"
INPUT_TITLE = "Cannot use this input"


def seam_problems() -> list[str]:
    """What this Gradio lacks of the internals used here (empty when all is in place)."""
    from gradio import route_utils
    from gradio.components.image_editor import EditorData
    from gradio.data_classes import ImageData
    from gradio.queueing import Queue

    params = list(inspect.signature(gr.Image.preprocess).parameters)
    checks = (
        (params == ["self", "payload"], f"gr.Image.preprocess takes {params}, not (self, payload)"),
        ({"path", "url"} <= set(ImageData.model_fields), "gradio.data_classes.ImageData has no path/url"),
        ({"background", "layers", "composite", "id"} <= set(EditorData.model_fields)
         and hasattr(gr.ImageEditor, "accept_blobs"),
         "gr.ImageEditor's value has no background/layers/composite/id or no accept_blobs (its blob_storage)"),
        (hasattr(route_utils, "FnIndexInferError"), "gradio.route_utils.FnIndexInferError is gone"),
        ({"event_queue_per_concurrency_id", "active_jobs"} <= _set_on_self(Queue.__init__),
         "gradio.queueing.Queue keeps no event_queue_per_concurrency_id/active_jobs (who holds its places)"),
    )
    return [problem for ok, problem in checks if not ok] + queue_problems()


def check_installed() -> None:
    """Warn for a Gradio outside :data:`GRADIO_VERSIONS`; raise when a seam's internals are gone."""
    version = check_version("gradio", GRADIO_VERSIONS, SEAM)
    problems = seam_problems()
    if problems:
        raise RuntimeError(f"{SEAM} was written for gradio {GRADIO_VERSIONS}; gradio {version} differs: "
                           + "; ".join(problems) + ". Install gradio 6.x (requirements.txt).")


def raw_upload(component: gr.Image, save_data_url: Callable[[str], Any]) -> gr.Image:
    """Make ``component`` hand its upload to the handler as the file's path, unopened (``save_data_url`` writes a
    pasted ``data:`` URL to a file of ours and returns its path). Gradio's own ``preprocess`` opens every upload
    with Pillow before our hardened decoder (a bomb decoded in full, 16-bit clipped). Set on the instance: a
    ``gr.Image`` subclass would make Gradio write an ``app.pyi`` stub at import."""
    check_installed()
    component.preprocess = functools.partial(  # type: ignore[method-assign]
        _file_path, save_data_url, missing="The upload arrived without a file; upload it again.")
    return component


def raw_editor(component: gr.ImageEditor, save_bytes: Callable[[bytes, str], Any],
               save_data_url: Callable[[str], Any], shared: Callable[[], bool]) -> gr.ImageEditor:
    """Make an image editor hand its value as file paths, none opened: ``{"background": path | None, "layers":
    [path, ...], "composite": path | None}``. Gradio's own opens every layer with Pillow (four 656 KB PNG layers
    of 13000×13000 cost gigabytes). The page's blobs are written by ``save_bytes(data, name)``, an API client's
    ``data:`` URLs by ``save_data_url``; ``shared()`` says whether the server is shared (:class:`BoundedBlobs`)."""
    check_installed()
    component.blob_storage = BoundedBlobs(shared)  # type: ignore[assignment]
    component.preprocess = functools.partial(_raw_editor_preprocess, component, save_bytes, save_data_url)  # type: ignore[method-assign]
    return component


class BoundedBlobs(dict):  # type: ignore[type-arg]
    """The editor's blob store (id → images), kept small: Gradio keeps every id's blobs until an event reads them,
    so fresh ids grew memory without end. One store serves every visitor (:func:`visitor_of` the request that posts
    the blobs): where ``shared()`` (a shared server), past ``1/shares`` of either cap a visitor's new edit pushes out
    only their own oldest; past the total cap, the visitor holding the most loses their oldest. The newest edit
    always stays. Blobs set outside a request (no visitor), and any on a server not shared, have only the total cap:
    its one visitor may use all of it."""

    def __init__(self, shared: Callable[[], bool], max_ids: int = 16, max_bytes: int = 300_000_000,
                 shares: int = 4) -> None:
        super().__init__()
        self.shared, self.max_ids, self.max_bytes = shared, max_ids, max_bytes
        self.share_ids, self.share_bytes = max(1, max_ids // shares), max_bytes // shares
        self._sizes: dict[str, int] = {}
        self._owners: dict[str, str | None] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        from gradio.context import LocalContext

        request = LocalContext.request.get(None)
        owner = visitor_of(request.scope) if getattr(request, "scope", None) and self.shared() else None
        super().pop(key, None)  # re-inserted last: the newest
        super().__setitem__(key, value)
        parts = [getattr(value, "background", None), getattr(value, "composite", None), *(getattr(value, "layers", None) or [])]
        self._sizes[key], self._owners[key] = sum(len(p) for p in parts if p is not None), owner
        while owner is not None and self._over(mine := self._held_by(owner), self.share_ids, self.share_bytes):
            self.pop(mine[0])
        while self._over(list(self), self.max_ids, self.max_bytes):
            heaviest = max(self._owners.values(), key=lambda v: (len(self._held_by(v)), sum(map(self._sizes.get, self._held_by(v)))))
            self.pop(next(k for k in self._held_by(heaviest) + list(self) if k != key))

    def _held_by(self, owner: str | None) -> list[str]:
        return [k for k in self if self._owners.get(k) == owner]  # oldest first

    def _over(self, keys: list[str], max_ids: int, max_bytes: int) -> bool:
        """Whether ``keys`` pass either cap (one edit, the newest, is never over)."""
        return len(keys) > 1 and (len(keys) > max_ids or sum(self._sizes[k] for k in keys) > max_bytes)

    def pop(self, key: Any, *default: Any) -> Any:
        self._sizes.pop(key, None)
        self._owners.pop(key, None)
        return super().pop(key, *default)


def _raw_editor_preprocess(component: Any, save_bytes: Callable[[bytes, str], Any], save_data_url: Callable[[str], Any],
                           payload: Any) -> dict[str, Any] | None:
    if payload is None:
        return None
    value, blob_id = payload, getattr(payload, "id", None)
    if blob_id is not None:  # the page: the images arrived earlier through accept_blobs, as bytes
        value = component.blob_storage.pop(blob_id, None)
        if value is None:  # never sent, or dropped for newer edits (BoundedBlobs): never a silent "nothing painted"
            raise _input_error("The painted damage is no longer on the server (too many edits arrived since); "
                               "paint a stroke again and press Restore.")

    def saved(part: Any, name: str) -> str | None:
        if blob_id is None:  # an API client: uploaded files, or data: URLs
            return _file_path(save_data_url, part, "An editor image arrived without a file; send it again.")
        return None if part is None else str(save_bytes(bytes(part), name))

    return {"background": saved(value.background, "background.png"),
            "layers": [p for i, part in enumerate(value.layers or []) if (p := saved(part, f"layer_{i}.png"))],
            "composite": saved(value.composite, "composite.png")}


def _file_path(save_data_url: Callable[[str], Any], file: Any, missing: str) -> str | None:
    """An uploaded file's path; a ``data:`` URL (pasted from the clipboard) saved to a file first."""
    if file is None:
        return None
    url = getattr(file, "url", None)
    if url and url.startswith("data:"):
        try:
            return str(save_data_url(url))
        except InputError as exc:
            raise _input_error(str(exc)) from None
    if getattr(file, "path", None) is None:
        raise _input_error(missing)
    return str(file.path)


def _input_error(text: str) -> gr.Error:
    return gr.Error(f"{INPUT_TITLE}. {text}", title=INPUT_TITLE, print_exception=False)


def app_kwargs(blocks: gr.Blocks, max_body_bytes: int = 34_000_000,
               shares: Callable[[], VisitorShares | None] = lambda: None) -> dict[str, Any]:
    """``launch(app_kwargs=...)``: unknown ``/run/<name>`` routes answer 404, and :class:`PageOnlyEvents` (with
    ``shares()``: each visitor's share, None where the server is not shared). On a Space, whose proxy connects from
    a private address, the server is told to trust it for ``X-Forwarded-For`` (:func:`visitor_of`), before launch."""
    if os.environ.get("SPACE_ID"):
        os.environ.setdefault("FORWARDED_ALLOW_IPS", "127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7")
    from fastapi.responses import JSONResponse
    from gradio.route_utils import FnIndexInferError
    from starlette.middleware import Middleware

    async def not_found(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": NOT_FOUND}, status_code=404)

    return {"exception_handlers": {FnIndexInferError: not_found},
            "middleware": [Middleware(PageOnlyEvents, blocks=blocks, max_body_bytes=max_body_bytes, shares=shares)]}


@dataclasses.dataclass(frozen=True)
class VisitorShares:
    """What one visitor (:func:`visitor_of`) may hold of a shared server; :class:`PageOnlyEvents` answers the rest
    429 with a message that says what to do."""

    places: int  # events of ``lanes`` they may have waiting or running in Gradio's queue at once
    lanes: tuple[str, ...]  # the queue lanes (concurrency ids) counted: those whose events hold a place for long
    upload_bytes: int  # what the upload route takes from them within ``upload_window_s``
    upload_window_s: float  # how long Gradio keeps an upload (``delete_cache``'s age)
    # Told of each refused place (session hash, API name, words), for the panel once the pop-up closes: Gradio never saw it.
    refused: Callable[[str | None, str | None, str], None] = lambda session, api_name, text: None


def visitor_of(scope: Mapping[str, Any]) -> str:
    """Who sent a request, for per-visitor shares: the client address as Gradio's server resolved it (with its
    trusted proxies' ``X-Forwarded-For``), an IPv6 address by its /64, an IPv4 one seen through a dual-stack socket as
    itself; never the session hash, which a client picks. docs/app-server.md, "Who is a visitor", says more."""
    host = str((scope.get("client") or ("",))[0])
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    address = getattr(address, "ipv4_mapped", None) or address
    return str(ipaddress.ip_network(f"{address}/64", strict=False)) if address.version == 6 else str(address)


PAGE_ONLY = ("This event belongs to the app's page and is not part of its API; open the page in a browser. "
             "API clients call /restore (see /gradio_api/info).")
NOT_FOUND = "Not Found: this app has no such endpoint; see /gradio_api/info"
# The routes that start (or stream the results of) an event, by the event's number or name. Gradio 6.31 has
# no websocket route; its SSE streams are /queue/data (a session's events, from queue/join) and GET /call/<name>/<id>.
_STARTS = re.compile(r"/gradio_api/(?:(?P<join>queue/join)|call/v2/(?P<v2>[^/]+)|(?P<kind>call|run|api)/(?P<name>[^/]+))/?$")
_RESULTS = re.compile(r"/gradio_api/call/(?:v2/)?(?P<name>[^/]+)/[^/]+/?$")
_UPLOAD = re.compile(r"/gradio_api/upload/?$")


class PageOnlyEvents:
    """ASGI middleware: the page's private events (``api_visibility="private"``) run only for the page.

    Gradio hides them from its API page, but its routes run any event by number (``queue/join``) or name
    (``/call/<name>``, ``/call/v2/<name>``, ``/run/<name>``). ``queue/join`` needs the page's ``Origin`` for a
    private event (:func:`came_from_page`), else 403, and so does ``/run/`` for a private event that skips the queue
    (``queue=False``: the Stop buttons, which a full queue must not refuse, and a control that follows another); on
    the named routes a private event is 404 (so is an unknown ``/call/v2/<name>``, a 500 in Gradio). Those bodies are
    read here, capped at ``max_body_bytes`` (413).

    On a shared server (``shares()`` not None) each visitor gets a share (:class:`VisitorShares`): an event of a
    counted lane beyond ``places`` of theirs in the queue, and uploads beyond ``upload_bytes`` an hour, answer 429.
    Events that skip the queue (the Stop buttons) and the other lanes are never counted."""

    def __init__(self, app: Any, blocks: gr.Blocks, max_body_bytes: int = 34_000_000,
                 shares: Callable[[], VisitorShares | None] = lambda: None) -> None:
        self.app, self.blocks, self.max_body_bytes, self.shares = app, blocks, max_body_bytes, shares
        self._admitting: dict[str, int] = {}  # events let through and not yet in Gradio's queue, per visitor
        self._uploads: dict[str, list[tuple[float, int]]] = {}  # per visitor: (time, bytes) of each upload, oldest first

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        http, path, method = scope.get("type") == "http", scope.get("path", ""), scope.get("method")
        results = _RESULTS.search(path) if http and method == "GET" else None
        if results and _private(self._named(results["name"])):
            await _json(send, 404, NOT_FOUND)
            return
        shares = self.shares() if http and method == "POST" else None
        if shares is not None and _UPLOAD.search(path):
            await self._upload(scope, receive, send, shares)
            return
        m = _STARTS.search(path) if http and method == "POST" else None
        if m is None:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        body = await self._read(headers, receive, send)
        if body is None:  # the client went away, or was answered 413
            return
        fn = self._event(m, body)
        refusal = self._refusal(m, fn, headers)
        if refusal is not None:
            await _json(send, *refusal)
            return
        unread = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Any:
            return unread.pop() if unread else await receive()

        # Where the queue's events start: queue/join and /call (/run and /api are not the queue's).
        queued = m["join"] or m["v2"] or m["kind"] == "call"
        if shares is None or not queued or getattr(fn, "concurrency_id", None) not in shares.lanes:
            await self.app(scope, replay, send)
            return
        visitor = visitor_of(scope)
        if self._held(visitor, shares) >= shares.places:
            text = _places_refusal(shares.places, getattr(self.blocks._queue, "max_size", None))
            shares.refused(_field(body, "session_hash"), getattr(fn, "api_name", None), text)
            await _json(send, 429, text)
            return
        self._admitting[visitor] = self._admitting.get(visitor, 0) + 1  # counted before Gradio's push: a burst too
        try:
            await self.app(scope, replay, send)  # answered once Gradio queued the event (or refused it)
        finally:
            self._admitting[visitor] -= 1
            if not self._admitting[visitor]:
                del self._admitting[visitor]

    def _held(self, visitor: str, shares: VisitorShares) -> int:
        """How many events of the counted lanes ``visitor`` has in Gradio's queue (waiting or running; a finished or
        cancelled one has left it), and those on their way in."""
        queue = getattr(self.blocks, "_queue", None)
        waiting = [e for lane in getattr(queue, "event_queue_per_concurrency_id", {}).values() for e in lane.queue]
        running = [e for jobs in list(getattr(queue, "active_jobs", [])) for e in jobs or ()]
        return self._admitting.get(visitor, 0) + sum(
            1 for e in waiting + running if getattr(e.fn, "concurrency_id", None) in shares.lanes
            and getattr(e.request, "scope", None) is not None and visitor_of(e.request.scope) == visitor)

    async def _upload(self, scope: Any, receive: Any, send: Any, shares: VisitorShares) -> None:
        """Gradio's upload route, within the visitor's bytes an hour, charged by the declared length (uvicorn reads
        no byte past it) as it starts, so a burst is counted, and handed back only where Gradio refused the body and
        removed what it had written (400 or 413, past ``max_file_size``); a client that leaves mid-body leaves its
        partial file in Gradio's temp folder, so it stays charged. A body without a length is refused: the page,
        gradio_client and curl send one."""
        visitor, now = visitor_of(scope), time.time()
        self._uploads = {v: kept for v, entries in self._uploads.items()  # only the last hour's, of everyone
                         if (kept := [e for e in entries if e[0] > now - shares.upload_window_s])}
        ledger = self._uploads.get(visitor, [])
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), b"").decode("latin-1")
        if not declared.isdigit():
            await _json(send, 411, "An upload needs a Content-Length on this server (browsers, gradio_client and curl "
                                   "send one); send the file with its length.", plain=True)
        elif sum(n for _, n in ledger) + int(declared) > shares.upload_bytes:
            await _json(send, 429, _upload_refusal(ledger, int(declared), shares, now), plain=True)
        else:
            entry, status = (now, int(declared)), 0
            self._uploads[visitor] = [*ledger, entry]

            async def watched(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, watched)
            finally:
                if status in (400, 413) and entry in self._uploads.get(visitor, []):
                    self._uploads[visitor].remove(entry)

    async def _read(self, headers: Mapping[str, str], receive: Any, send: Any) -> bytes | None:
        """The whole body in linear time; None when the client left, or past the cap (then answered 413)."""
        cap = self.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            await _json(send, 413, _too_large(int(declared), cap))
            return None
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body += message.get("body", b"")
            if len(body) > cap:
                await _json(send, 413, _too_large(len(body), cap, more=True))
                return None
            more = message.get("more_body", False)
        return bytes(body)

    def _event(self, m: re.Match[str], body: bytes) -> Any:
        """The event a call names, as Gradio resolves it: queue/join by number; /run and /api by an ``fn_index`` in
        the body before the name; /call by name (it ignores an index). None when none."""
        if m["join"]:
            return self._by_index(body)
        fn = self._by_index(body) if m["kind"] in ("run", "api") else None
        return fn if fn is not None else self._named(m["v2"] or m["name"])

    def _refusal(self, m: re.Match[str], fn: Any, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """(status, detail) when the call of event ``fn`` may not run, else None (Gradio answers the rest itself)."""
        if m["join"]:
            return (403, PAGE_ONLY) if _private(fn) and not came_from_page(headers, self._page_hosts()) else None
        if m["v2"]:  # Gradio looks the name up among the documented endpoints: a 500 for any other
            return (404, NOT_FOUND) if fn is None or _private(fn) else None
        if _private(fn) and fn.queue is False and m["kind"] == "run" and came_from_page(headers, self._page_hosts()):
            return None  # the page's Stop buttons (and followers) skip the queue (posted to /run/predict by number)
        return (404, NOT_FOUND) if _private(fn) else None

    def _named(self, name: str) -> Any:
        """The event of that API name, as Gradio resolves names, or None."""
        return next((fn for fn in self.blocks.fns.values() if fn.api_name == name), None)

    def _by_index(self, body: bytes) -> Any:
        """The event the body's ``fn_index`` names, or None (none, or a malformed body Gradio answers itself)."""
        try:
            return self.blocks.fns.get(int(_field(body, "fn_index")))
        except (ValueError, TypeError):  # int(None): no fn_index
            return None

    def _page_hosts(self) -> set[str]:
        """Hosts the page is served at beyond the request's own: the share link (its tunnel may rewrite ``Host``),
        and ``GPEN_PAGE_HOSTS`` (comma-separated ``host[:port]``, for a proxy that forwards no host)."""
        hosts = {h.strip().lower() for h in os.environ.get("GPEN_PAGE_HOSTS", "").split(",") if h.strip()}
        share = getattr(self.blocks, "share_url", None)
        if share:
            hosts.add(urlsplit(share).netloc.lower())
        return hosts


def _field(body: bytes, name: str) -> Any:
    """``name`` from a JSON object body, or None (absent, or a malformed body Gradio answers itself)."""
    try:
        return json.loads(body or b"{}").get(name)
    except (ValueError, AttributeError):
        return None


def _private(fn: Any) -> bool:
    """Whether ``fn`` (an event, or None) is one of the page's private events (``api_visibility="private"``)."""
    return fn is not None and getattr(fn, "api_visibility", "public") == "private"


def _places_refusal(places: int, queue_size: int | None) -> str:
    # Each tab's Stop ends its restore, running or still waiting (a waiting one leaves the queue at once); a closed
    # tab's waiting events leave it too.
    return (f"You already have {places} restores waiting or running on this server (from this tab or your others). "
            "Try again once one has finished; to free a place now, press Stop on one (the Restore tab's Stop or the "
            "Video tab's Stop; one still waiting ends at once) or close a tab that waits. "
            f"Each visitor may hold {places} of the queue's {queue_size} places, so that others "
            "get in too.")


def _upload_refusal(ledger: list[tuple[float, int]], need: int, shares: VisitorShares, now: float) -> str:
    """Why an upload is refused and when this visitor can upload it: once enough of their older uploads are an
    hour old (``ledger``: (time, bytes) of those still counted, oldest first)."""
    cap, window = shares.upload_bytes, shares.upload_window_s
    if need > cap:
        return (f"This upload is {megabytes(need)}; each visitor may upload {megabytes(cap)} an hour. "
                "Upload fewer or smaller files at once.")
    held, when = sum(n for _, n in ledger), now + window
    for t, n in ledger:
        held -= n
        if held + need <= cap:  # enough of theirs has left the hour
            when = t + window
            break
    minutes = max(1, round((when - now) / 60))
    return (f"You have uploaded {megabytes(sum(n for _, n in ledger))} to this server in the last "
            f"{round(window / 60)} minutes; each visitor may upload {megabytes(cap)} in that time. You can upload "
            f"this again in {minutes} minute{'s' if minutes > 1 else ''} (at {time.strftime('%H:%M UTC', time.gmtime(when))}).")


def _too_large(n: int, cap: int, more: bool = False) -> str:
    return (f"The request is {'over ' if more else ''}{megabytes(n)}; the limit is {megabytes(cap)}. Upload files "
            "through /gradio_api/upload (gradio_client's handle_file does) rather than inside the request.")


async def _json(send: Any, status: int, detail: str, plain: bool = False) -> None:
    """``{"detail": ...}``, or with ``plain`` the text alone, as Gradio's upload route answers (its page then shows
    "HTTP 429: <text>", and page.PAGE_JS takes the status off)."""
    body = detail.encode() if plain else json.dumps({"detail": detail}).encode()
    kind = b"text/plain; charset=utf-8" if plain else b"application/json"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def came_from_page(headers: Mapping[str, str] | None, page_hosts: set[str] | None = None) -> bool:
    """Whether a request carries the page's own origin: an ``Origin`` (else ``Referer``) whose host is the one it
    was sent to (``Host``, ``X-Forwarded-Host``) or one of ``page_hosts``. A browser adds ``Origin`` to the page's
    POSTs; API clients send none. A barrier, not authentication: the operator's flags gate the rest."""
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    source = lower.get("origin") or lower.get("referer")
    if not source or source == "null":
        return False
    origin_host = urlsplit(source).netloc.lower()
    hosts = {h.strip().lower() for key in ("host", "x-forwarded-host") for h in lower.get(key, "").split(",") if h.strip()}
    return bool(origin_host) and origin_host in hosts | (page_hosts or set())
