"""Starting or joining Ray: a local Ray is loopback-only, without dashboard, stopped by whoever started it; a cluster
is joined only when asked (``--address``). Ray is optional, imported when a function is called. docs/ray.md."""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from gpen_core.errors import GPENError, InputError
from gpen_core.platform.cpu_share import usable_cores
from gpen_core.scaleout import reaper

LOOPBACK = "127.0.0.1"
# Read once, when Ray is imported: "0" makes the loopback address this node's (else only on macOS/Windows).
_LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
INSTALL_HINT = "install it with `bash scripts/setup.sh --ray` (or `.venv/bin/python -m pip install -r requirements-ray.txt`)"


# A Ray worker before the engine's imports (ray 2.60, docs/ray.md); the imports are oom.ENGINE_IMPORT's, per build.
RAY_WORKER_BYTES = 130_000_000
LARGE_PHOTO = (4000, 3000)  # the 12 MP photo of the hardware check's workloads


def worker_memory_bytes(mode: str, device: str = "cpu") -> int:
    """Ray ``memory`` to reserve for one actor or replica running ``mode`` ("auto": any mode): idle size
    + the mode's peak on a 12 MP photo, so Ray never packs more workers than fit."""
    from gpen_core.engine.budget import estimate_peak
    from gpen_core.modes import MODES
    from gpen_core.platform.oom import engine_import_figures

    modes = [MODES[mode]] if mode in MODES else list(MODES.values())
    return RAY_WORKER_BYTES + engine_import_figures()["rss"] + max(int(estimate_peak(m, device, LARGE_PHOTO)[0]) for m in modes)


def worker_name() -> str:
    """Node and process of this worker, as every Ray record names it (the host's name outside Ray)."""
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()[:8]
    except Exception:  # not inside Ray (a direct call, as the tests make)
        import socket

        node = socket.gethostname()
    return f"{node}/pid {os.getpid()}"


@dataclass(frozen=True)
class RaySettings:
    """What the user asked of Ray, for photos, a clip's segments and Serve replicas alike (flags: scaleout.cli)."""

    # None: a local loopback-only Ray, stopped after; "auto", "HOST:PORT", "ray://HOST:PORT": join that cluster.
    address: str | None = None
    # Workers at once (photo actors, segment tasks, replicas); None: one per GPU share, else one per 2 CPUs, never
    # more than fit in memory (Ray would wait for ever for the rest: batch.plan_resources); Serve autoscales instead.
    workers: int | None = None
    # GPUs each worker reserves (0.5 puts two on one GPU); 0: CPU only.
    gpus_per_worker: float = 0.0
    # "cpu", "cuda" or None: cuda when a worker reserves a GPU share, else cpu (worker_pool: never left None).
    device: str | None = None
    # Where each worker finds the weights (on a cluster: that path on every node); None: $GPEN_HOME or ~/.cache/gpen.
    models_dir: str | None = None


@dataclass(frozen=True)
class WorkerPool:
    """Ray workers (photo actors, a clip's segment tasks, Serve replicas), each handed this: what it reserves
    (:meth:`reserves`, as Ray's options take it) and runs with (:meth:`restorer`). :func:`worker_pool` holds the
    rules."""

    workers: int
    cpus: float  # each reserves (fractions: docs/ray.md)
    gpus: float  # each reserves; 0: none
    memory: int  # bytes of Ray memory each reserves (worker_memory_bytes)
    device: str  # where each restores
    models_dir: str | None = None  # where each finds the weights (RaySettings.models_dir)

    @property
    def threads(self) -> int:  # its whole CPUs, at least one (Ray set OMP_NUM_THREADS from a fraction)
        return max(1, int(math.floor(self.cpus + 1e-9)))

    def reserves(self) -> dict[str, float]:
        return {"num_cpus": self.cpus, "memory": self.memory, **({"num_gpus": self.gpus} if self.gpus > 0 else {})}

    def restorer(self) -> Any:
        """In a Ray worker: its Restorer on the pool's device, torch on the pool's threads."""
        import torch

        torch.set_num_threads(self.threads)
        return _worker_restorer(self.models_dir, self.device)

    def warm(self, options: Any) -> tuple[Any, GPENError | None, float]:
        """In a Ray worker: (:meth:`restorer`, warmed up on a blank photo with the models ``options`` asks for; the
        error that stopped the warm-up, which every request then carries with its fix, or None; its seconds)."""
        import numpy as np

        from gpen_core.options import RestoreOptions

        restorer = self.restorer()
        t = time.perf_counter()
        opts = options or RestoreOptions()
        blank = np.full((256, 256, 3) if opts.aligned else (320, 320, 3), 128, np.uint8)
        if opts.task == "inpaint":
            blank[:4] = 255  # a white stroke: inpainting refuses a photo with nothing marked
        try:
            restorer(blank, replace(opts, output_format=None))
        except GPENError as exc:
            return restorer, exc, time.perf_counter() - t
        return restorer, None, time.perf_counter() - t


# One at a time, kept for the worker's next tasks or requests: Ray hands a worker the same driver's next task,
# whichever run it belongs to, so another models folder or device gets its own.
@functools.lru_cache(maxsize=1)
def _worker_restorer(models_dir: str | None, device: str) -> Any:
    from gpen_core.restorer import Restorer

    return Restorer(models_dir=models_dir, device=device, serves_many_modes=True)


def worker_pool(settings: RaySettings, workers: int, cpus: float, mode: str) -> WorkerPool:
    """Workers restoring ``mode`` ("auto": any) as ``settings`` asks: on its device, else on CUDA when each reserves a
    GPU share, else on the CPU: never None, as Ray hides no GPU from a worker that reserves none (the Restorer would
    take one)."""
    gpus = settings.gpus_per_worker
    where = settings.device or ("cuda" if gpus > 0 else "cpu")
    return WorkerPool(workers, cpus, gpus, worker_memory_bytes(mode, where), where, settings.models_dir)


def import_ray() -> ModuleType:
    """The ``ray`` module, or an InputError that says how to install it."""
    if "ray" not in sys.modules:
        os.environ.setdefault(_LOOPBACK_VAR, "0")
    try:
        import ray
    except ImportError as exc:
        raise InputError(f"Ray is not installed ({exc}); {INSTALL_HINT}") from None
    return ray


MAX_TEMP_BASE = 24  # characters: with "/gpen-ray-<uid>" and Ray's ~66, a socket path well under 108


def default_temp_dir() -> Path:
    """Ray's session files, per user: a unix socket path must stay under 108 characters and Ray adds ~66 below this
    folder, so a long temp folder (macOS's ``/var/folders/…``) gives way to ``/tmp``, as Ray's own default does."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    base = Path(tempfile.gettempdir())
    if len(str(base)) > MAX_TEMP_BASE and Path("/tmp").is_dir():
        base = Path("/tmp")
    return base / f"gpen-ray-{uid}"


@dataclass(frozen=True)
class RaySession:
    """Where this process's Ray runs."""

    address: str  # the GCS address ("127.0.0.1:PORT") or the ray:// address joined
    started_here: bool  # True: a local loopback Ray this process started (and stops)
    cpus: float  # CPUs the cluster offers in all
    gpus: float
    memory: float  # bytes of Ray's "memory" resource in all


def _force_loopback() -> None:
    # Ray read the variable when imported; if that was before import_ray() set it, set its constant too.
    from gpen_core.compat.ray import force_loopback_constant

    force_loopback_constant()
    os.environ[_LOOPBACK_VAR] = "0"


def connect(address: str) -> None:
    """Join the Ray at ``address`` unless this process has one already; InputError with the fix when it cannot.
    Ray 2.60 sends a local token to an explicit address only with ``RAY_AUTH_MODE=token``: set when a token is
    there and nobody chose a mode."""
    ray = import_ray()
    if ray.is_initialized():
        return
    _reachable(address)
    token = (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
             or (Path.home() / ".ray" / "auth_token").is_file())
    if "RAY_AUTH_MODE" not in os.environ and token:
        from gpen_core.compat.ray import enable_token_auth

        if not enable_token_auth():  # another Ray version: the variable alone (read when Ray's config loads)
            os.environ["RAY_AUTH_MODE"] = "token"
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise InputError(f"cannot join the Ray cluster at {address!r} ({str(exc).strip()[:300]}). Use the address that "
                         "`python -m gpen_core serve` or `ray start --head` printed, or leave out --address to run on "
                         "this machine only") from None


# How long a cluster's port may take to answer (ray.init itself retries a dead address for minutes).
CONNECT_TIMEOUT_S = 10.0


# The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and its client server are
# gRPC) answers with a SETTINGS frame of its own at once; anything else (a web server, a silent port) does not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _reachable(address: str) -> None:
    """InputError when nothing at ``address`` answers as a Ray cluster within CONNECT_TIMEOUT_S; TLS: only dialled."""
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    fix = "Start it (`ray start --head`) or use the address it printed, or leave out --address to run on this machine only"
    try:
        with socket.create_connection((host.strip("[]") or LOOPBACK, int(port)), timeout=CONNECT_TIMEOUT_S) as s:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            s.sendall(_H2_PREFACE)
            head = b""
            while len(head) < 9 and (chunk := s.recv(9 - len(head))):
                head += chunk
    except OSError as exc:
        why = exc.strerror or str(exc) or "no answer"
        raise InputError(f"cannot reach the Ray cluster at {address!r} ({why}). {fix}") from None
    if len(head) < 9 or head[3] != 0x04:
        raise InputError(f"what listens at {address!r} is not a Ray cluster (it does not answer as Ray's gRPC server "
                         f"does). {fix}")


def _start_reaper(ray: ModuleType):
    """The watcher of this Ray session's processes (None when the session folder is unknown)."""
    try:  # Ray 2.x keeps the session folder on its private node object
        session_dir = ray._private.worker._global_node.get_session_dir_path()
    except AttributeError:
        return None
    return reaper.start(session_dir) if session_dir else None


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None,
                temp_dir: str | os.PathLike[str] | None = None) -> Iterator[RaySession]:
    """Ray for the block. ``address`` None: this process's Ray, else a local loopback one stopped at the end;
    "auto", "HOST:PORT" or "ray://HOST:PORT": join that cluster (left running)."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        if address:
            connect(address)
        else:
            _force_loopback()
            # Serve's HTTP proxy inherits this: oversize uploads refused before queued (a callback already set stays).
            from gpen_core.scaleout.proxy_limits import PROXY_CALLBACK, PROXY_CALLBACK_ENV

            os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)
            tmp = Path(temp_dir) if temp_dir is not None else default_temp_dir()
            tmp.mkdir(parents=True, exist_ok=True)
            # log_to_driver off: worker logs stay in the session folder and --json keeps stdout clean.
            ray.init(num_cpus=num_cpus if num_cpus is not None else usable_cores(), num_gpus=num_gpus,
                     include_dashboard=False, _node_ip_address=LOOPBACK, _temp_dir=str(tmp),
                     logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
            started = True
    # A local Ray's agents outlive a SIGKILLed driver by a minute: the reaper stops them (scaleout.reaper).
    watcher = _start_reaper(ray) if started else None
    try:
        res = ray.cluster_resources()
        ctx = ray.get_runtime_context()
        gcs = getattr(ctx, "gcs_address", None) or address or ""
        yield RaySession(address=str(gcs), started_here=started, cpus=float(res.get("CPU", 0)), gpus=float(res.get("GPU", 0)),
                         memory=float(res.get("memory", 0)))
    finally:
        if started:
            ray.shutdown()
            reaper.stop(watcher)
