"""Online restores with Ray Serve: ``python -m gpen_core serve`` and ``app.py --backend ray`` (:class:`RayRestorer`).
One warmed Restorer per replica, one restore at a time, each response with its peaks. docs/ray.md, "A shared demo"."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpen_core.errors import GPENError, InputError, ResourceError, WeightsError
from gpen_core.scaleout.proxy_limits import ROUTE_PREFIX
from gpen_core.scaleout.runtime import RaySettings, WorkerPool

APP_NAME = "gpen"
DEPLOYMENT_NAME = "RestoreDeployment"
MAX_ONGOING_REQUESTS = 2  # one running, one ready; the rest wait where the autoscaler counts them
# runtime.RAY_WORKER_BYTES less a plain interpreter's ~10 MB (measured: docs/ray.md)
RAY_BASELINE_NOTE = "its baseline includes the Ray worker runtime (about 120 MB more than a plain process)"
# A replica's error by class name: raised again here as that class, answered over HTTP with that status.
_ERRORS: dict[str, tuple[type[GPENError], int]] = {"InputError": (InputError, 400), "WeightsError": (WeightsError, 503),
                                                   "ResourceError": (ResourceError, 503)}


@dataclass(frozen=True)
class ServeConfig:
    """One ``serve`` command."""

    # Where the replicas run, their GPU share, device and weights; workers: a fixed replica count, or None with
    # autoscaling from 1 to max_replicas.
    ray: RaySettings = RaySettings(workers=1)
    max_replicas: int = 1
    # CPUs per replica: Ray sets OMP_NUM_THREADS from it; torch threads follow.
    num_cpus: float = 1.0
    # Serve's HTTP proxy port (POST an image to /restore); bound to 127.0.0.1 on a local Ray.
    port: int = 8000
    # The mode warmed up in each replica's constructor (requests may ask for any).
    warm_mode: str = "auto"


@dataclass(frozen=True)
class Served:
    """What a replica returns: the result (or the error, by class name) and where it was measured."""

    result: Any  # RestoreResult, None on error
    replica: str  # Serve's replica id
    node: str  # Ray node id (first 8 characters)
    pid: int
    error_type: str = ""
    error: str = ""
    details: str = ""

    def unwrap(self) -> Any:
        """The RestoreResult, or the replica's error raised here as the same GPENError class."""
        if self.error_type:
            raise _ERRORS.get(self.error_type, (GPENError, 500))[0](self.error, details=self.details)
        return self.result


class RestoreDeployment:
    """One replica: a warmed Restorer. ``restore(bytes, options) -> Served`` by handle; POST /restore over HTTP."""

    def __init__(self, pool: WorkerPool, warm_mode: str = "auto") -> None:
        from gpen_core.compat.ray import keep_replica_grpc_on_loopback
        from gpen_core.options import RestoreOptions

        keep_replica_grpc_on_loopback()
        self.replica, self.node = _replica_ids()
        self.frozen = 0
        if self.replica != "local":  # a replica's own process (not a test's), before any model loads: as the app's server
            from gpen_core.engine.pipeline import ready_server

            self.frozen = ready_server(restores_here=True)
        # a failed warm-up (e.g. weights missing) leaves the replica answering, each request with the fix
        self.restorer, error, self.warmup_s = pool.warm(RestoreOptions(mode=warm_mode))
        self.warm_error = str(error or "")

    def restore(self, image: bytes, options: Any = None, mask: bytes | None = None) -> Served:
        """``mask``: inpainting's damage (an encoded image, white = damaged), as ``Restorer.__call__`` takes it."""
        try:
            result = self.restorer(image, options, mask=mask)
        except GPENError as exc:
            return Served(None, self.replica, self.node, os.getpid(), type(exc).__name__, str(exc), exc.details)
        return Served(result, self.replica, self.node, os.getpid())

    def status(self) -> dict[str, Any]:
        from gpen_core.platform.meter import current_rss

        return {"replica": self.replica, "node": self.node, "pid": os.getpid(), "warmup_s": round(self.warmup_s, 2),
                "frozen_objects": self.frozen,
                "warm_error": self.warm_error, "loaded": self.restorer.loaded(), "rss_bytes": current_rss()}

    async def __call__(self, request: Any) -> Any:
        """HTTP: POST /restore (:func:`http_inputs`) → the JSON record (the CLI's --json fields)."""
        import asyncio
        import base64

        from starlette.responses import JSONResponse

        from gpen_core.result_json import result_record

        try:
            body = await read_body_capped(request)
        except InputError as exc:
            return JSONResponse({"status": "error", "error": str(exc)}, status_code=413)
        try:
            image, opts, mask = await http_inputs(request, body)
        except GPENError as exc:
            return JSONResponse({"status": "error", "error": str(exc)}, status_code=400)
        served = await asyncio.get_running_loop().run_in_executor(None, self.restore, image, opts, mask)
        if served.error_type:
            return JSONResponse({"status": "error", "error": served.error, "replica": served.replica},
                                status_code=_ERRORS.get(served.error_type, (GPENError, 500))[1])
        rec = {"status": "ok", "replica": served.replica, "node": served.node, **result_record(served.result),
               "encoded_base64": base64.b64encode(served.result.encoded).decode("ascii")}
        return JSONResponse(rec)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


async def http_inputs(request: Any, body: bytes) -> tuple[bytes, Any, bytes | None]:
    """(image bytes, validated RestoreOptions, mask bytes or None) of a ``POST /restore``: the image as the body and
    options in the query, or a multipart form (``image``, ``mask``, option fields win). InputError: 400."""
    from gpen_core.options import RestoreOptions

    fields: dict[str, Any] = dict(request.query_params)
    image, mask = body, None
    if (request.headers.get("content-type") or "").lower().startswith("multipart/form-data"):
        form = await _form(request, body)
        upload = form.get("image")
        if upload is None or isinstance(upload, str):
            raise InputError("a multipart request needs the photo as a file field named 'image' (and the damage as 'mask')")
        image = await upload.read()
        m = form.get("mask")
        mask = (await m.read()) if m is not None and not isinstance(m, str) else None
        fields.update({k: v for k, v in form.items() if isinstance(v, str)})
    unknown = sorted(set(fields) - {"mode", "task", "aligned"})
    if unknown:
        raise InputError(f"unknown field {', '.join(unknown)}; POST /restore takes mode, task and aligned (and the files image, mask)")
    aligned = str(fields.get("aligned", "")).strip().lower()
    if aligned not in _TRUE + _FALSE:
        raise InputError(f"aligned must be true or false, got {fields['aligned']!r}")
    task = fields.get("task", "enhance")
    if mask is not None and task != "inpaint":
        raise InputError(f"a damage mask is for task=inpaint, not {task}; leave 'mask' out or ask for task=inpaint")
    opts = RestoreOptions(mode=fields.get("mode", "auto"), task=task, aligned=aligned in _TRUE).validated()
    return image, opts, mask


async def _form(request: Any, body: bytes) -> Any:
    """Starlette's multipart parser over the body already read (and capped) by :func:`read_body_capped`."""
    from starlette.requests import Request

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        return await Request(request.scope, receive).form()
    except AssertionError as exc:  # Starlette's way of saying python-multipart is not installed
        raise InputError(f"this server cannot read multipart forms ({exc}); POST the image bytes as the body instead") from None
    except Exception as exc:  # a malformed form: the parser's own words
        raise InputError(f"the multipart form could not be read: {exc}") from None


async def read_body_capped(request: Any) -> bytes:
    """The request body; InputError (the decoder's words) as soon as it passes the upload limit: by its declared
    Content-Length before a byte is read, else at the first chunk past it."""
    from gpen_core.images.limits import DEFAULT_LIMITS, too_big

    cap = DEFAULT_LIMITS.max_file_bytes
    declared = (request.headers.get("content-length") or "").strip()
    if declared.isdigit() and int(declared) > cap:
        raise too_big(int(declared), DEFAULT_LIMITS)
    chunks: list[bytes] = []
    n = 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > cap:
            raise too_big(None, DEFAULT_LIMITS)
        chunks.append(chunk)
    return b"".join(chunks)


def _replica_ids() -> tuple[str, str]:
    try:
        import ray
        from ray import serve

        return serve.get_replica_context().replica_id.unique_id, ray.get_runtime_context().get_node_id()[:8]
    except Exception:  # outside Serve (tests building the class directly)
        return "local", "local"


def build_app(cfg: ServeConfig) -> Any:
    """The Serve application (``Deployment.bind``) for ``cfg``."""
    from ray import serve

    from gpen_core.scaleout.runtime import worker_pool

    replicas = cfg.ray.workers
    if replicas is not None and replicas < 1:
        raise InputError("--replicas must be at least 1 (or auto)")
    if replicas is None and cfg.max_replicas < 1:
        raise InputError("--max-replicas must be at least 1")
    # Requests may ask for any mode, whatever was warmed up: reserve for the heaviest.
    pool = worker_pool(cfg.ray, replicas or cfg.max_replicas, cfg.num_cpus, "auto")
    autoscale = {"min_replicas": 1, "max_replicas": cfg.max_replicas, "target_ongoing_requests": 1,
                 "upscale_delay_s": 5, "downscale_delay_s": 120}
    scaling = {"num_replicas": replicas} if replicas is not None else {"autoscaling_config": autoscale}
    dep = serve.deployment(RestoreDeployment).options(
        name=DEPLOYMENT_NAME, max_ongoing_requests=MAX_ONGOING_REQUESTS, ray_actor_options=pool.reserves(),
        health_check_period_s=30, graceful_shutdown_timeout_s=30, **scaling,
    )
    return dep.bind(pool=pool, warm_mode=cfg.warm_mode)


def app_builder(args: dict[str, str]) -> Any:
    """For ``serve deploy`` config files (``gpen_core.scaleout.serve:app_builder``); optional ``args``: replicas,
    max_replicas, num_cpus, num_gpus, warm_mode, models_dir, device."""
    replicas = args.get("replicas", "1")
    ray = RaySettings(workers=None if str(replicas) == "auto" else int(replicas), device=args.get("device"),
                      gpus_per_worker=float(args.get("num_gpus", 0)), models_dir=args.get("models_dir"))
    return build_app(ServeConfig(ray=ray, max_replicas=int(args.get("max_replicas", 1)),
                                 num_cpus=float(args.get("num_cpus", 1)), warm_mode=str(args.get("warm_mode", "auto"))))


def deploy(cfg: ServeConfig) -> Any:
    """Deploy on the Ray this process is connected to; returns the handle once every replica is up."""
    import ray
    from ray import serve

    from gpen_core.platform.meter import format_bytes

    app = build_app(cfg)
    need = app._bound_deployment.ray_actor_options["memory"] * (cfg.ray.workers or 1)
    have = ray.cluster_resources().get("memory", 0)
    if need > have:  # Serve would wait for ever for a replica Ray cannot place
        raise InputError(f"the replicas reserve {format_bytes(need)} of memory (idle size + the heaviest mode's peak), "
                         f"and the Ray cluster offers {format_bytes(int(have))}: use --mode low, fewer replicas, or a bigger node")
    # HTTP stays on loopback even on a cluster: a public endpoint belongs behind the cluster's ingress and auth.
    serve.start(http_options={"host": "127.0.0.1", "port": cfg.port})
    return serve.run(app, name=APP_NAME, route_prefix=ROUTE_PREFIX)


def replica_statuses(handle: Any, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` distinct replicas' status (warm-up time, warm-up error, RSS)."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(max(1, n) * 3):
        st = handle.status.remote().result(timeout_s=120)
        seen[st["replica"]] = st
        if len(seen) >= n:
            break
    return list(seen.values())


def run_serve(cfg: ServeConfig, on_ready: Callable[[str, list[dict[str, Any]]], None], stop: threading.Event | None = None) -> None:
    """Deploy, ``on_ready(ray address, replica statuses)``, serve until Ctrl-C / SIGTERM / ``stop``, then delete the
    app (and stop a local Ray started here)."""
    import signal

    from ray import serve

    from gpen_core.scaleout.runtime import ray_session

    stop = stop or threading.Event()
    num_gpus = None
    if cfg.ray.address is None and cfg.ray.gpus_per_worker > 0:
        import torch

        num_gpus = torch.cuda.device_count()
    with ray_session(cfg.ray.address, num_gpus=num_gpus) as session:
        if threading.current_thread() is threading.main_thread():
            # After ray.init, which installs a SIGTERM handler that exits at once and orphans
            # Ray's agent processes: stop like Ctrl-C instead, shutting everything down.
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            handle = deploy(cfg)
            on_ready(session.address, replica_statuses(handle, cfg.ray.workers or 1))
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if session.started_here:
                serve.shutdown()
            else:
                serve.delete(APP_NAME)


class RayRestorer:
    """The Restorer of ``app.py --backend ray``: same ``__call__``, run in a replica (connected on first use); its
    notes name the replica that measured the result."""

    def __init__(self, address: str | None = "auto") -> None:
        self.address = address
        self._handle: Any = None
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def busy(self) -> bool:
        return self._in_flight > 0

    def handle(self) -> Any:
        with self._lock:
            if self._handle is None:
                from gpen_core.scaleout.runtime import connect

                connect(self.address or "auto")  # before `from ray import serve`: Ray imported by import_ray, as it must be
                from ray import serve

                try:
                    self._handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME)
                except Exception as exc:  # Serve raises RayServeException / KeyError variants when absent
                    raise InputError(f"no {DEPLOYMENT_NAME} is deployed on that Ray cluster ({exc}); "
                                     "start it with `python -m gpen_core serve`") from None
            return self._handle

    def __call__(self, image: Any, options: Any = None, progress: Any = None, *, mask: Any = None) -> Any:
        """``image``, ``mask``: paths or encoded bytes (``mask`` may be an array). A replica that dies mid-call is
        retried once (a restore has no side effects); a second death: ResourceError, Ray's text in ``details``."""
        data = image if isinstance(image, bytes) else Path(image).read_bytes()
        mask = Path(mask).read_bytes() if isinstance(mask, (str, os.PathLike)) else mask
        from ray.exceptions import RayActorError, WorkerCrashedError  # a replica or its process died mid-call

        failures: list[str] = []
        for attempt in range(1 + REPLICA_RETRIES):
            if progress is not None:
                progress(0.1, "restoring in a Ray Serve replica" if not attempt else
                         "the replica stopped during the restore; trying again in another one")
            self._in_flight += 1
            try:
                served: Served = self.handle().restore.remote(data, options, mask).result()
                break
            except (RayActorError, WorkerCrashedError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                logging.getLogger(__name__).warning("a Ray Serve replica died during a restore (attempt %d of %d): %s",
                                                    attempt + 1, 1 + REPLICA_RETRIES, failures[-1])
            finally:
                self._in_flight -= 1
        else:
            raise ResourceError(REPLICA_DIED, details="\n".join(failures))
        result = served.unwrap()
        notes = (*result.notes, *(["the first replica stopped during the restore; another one made this result"] if failures else []))
        return replace(result, notes=(*notes, f"peak measured in Ray Serve replica {served.replica} (node {served.node}, "
                                               f"pid {served.pid}); {RAY_BASELINE_NOTE}"))


# A request whose replica dies is sent again this many times (a restore changes nothing).
REPLICA_RETRIES = 1
REPLICA_DIED = ("The restore service stopped while restoring this photo, and again when it was tried once more "
                "(its worker may have run out of memory or been restarted). Try again in a minute, or a smaller "
                "photo or lighter memory mode; if it keeps happening, the server's log has the details.")
