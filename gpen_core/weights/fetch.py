"""Downloading checkpoint files: probe the host, stream to a temp file, verify, rename into place.

Downloads stream to a temporary file inside the models folder, are fsynced and
verified (size, sha256) and only then renamed into place with ``os.replace``,
so the final name never holds a partial file. Sources are tried in the registry's
order (release URLs, ModelScope); an unreachable host fails in seconds.
Importing this module imports neither torch nor modelscope.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.parse
import uuid
from pathlib import Path

from gpen_core.weights.checksums import _write_atomic, file_sha256, sidecar_path
from gpen_core.errors import WeightsError
from gpen_core.weights.registry import Progress, WeightSpec, modelscope_cache_root

# A TCP connect to the source host before any download: an offline machine or a
# blocked host fails here in seconds instead of in ModelScope's retry loop (20+ s).
CONNECT_PROBE_S = 3.0
# Per-read socket timeout of an HTTP download: a stalled server fails the download
# (cleanly, nothing left under the final name) instead of hanging the app.
READ_TIMEOUT_S = 20.0
_CHUNK = 1 << 20
# Partial downloads older than this are someone's crashed attempt, not a live one.
_STALE_PART_S = 6 * 3600
_MODELSCOPE_DEFAULT_ENDPOINT = "https://modelscope.cn"  # modelscope_hub.constants.DEFAULT_ENDPOINT


def _fix_text(spec: WeightSpec, folder: Path) -> str:
    final = folder / spec.filename
    manual = [spec.urls[0]] if spec.urls else []
    if spec.modelscope:
        mid, rel = spec.modelscope
        page = f"https://www.modelscope.cn/models/{mid}/files (file {rel})"
        manual.insert(0 if spec.modelscope_first else len(manual), page)
    return (
        f"Fix: run `python -m gpen_core download {spec.name}` on a machine with internet access, "
        f"or download it yourself from {' or '.join(manual)} and save it as {final} "
        f"(folder {folder}, file name {spec.filename})."
    )


def _missing_error(spec: WeightSpec, folder: Path, looked: list[str], why: str, attempts: list[str]) -> WeightsError:
    """Two lines for people (what, and the fix); every place looked and each attempt in ``details``."""
    cache = modelscope_cache_root()
    tried = f" ({'; '.join(attempts)})" if attempts else ""
    head = f"{spec.name} ({spec.filename}) is not in {folder} or the ModelScope cache {cache}: {why}{tried}."
    details = ["Looked in:", *[f"  - {p}" for p in looked]]
    if attempts:
        details += ["Download attempts:", *[f"  - {a}" for a in attempts]]
    return WeightsError(f"{head}\n{_fix_text(spec, folder)}", details="\n".join(details))


def _probe(url: str, timeout: float | None = None) -> str | None:
    """None if a TCP connection to the URL's host (or its proxy) opens; else why not."""
    import socket
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or 8080
    try:
        with socket.create_connection((host, port), timeout=CONNECT_PROBE_S if timeout is None else timeout):
            return None
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({exc.strerror or exc.__class__.__name__ or exc})"


def _open_url(url: str, timeout: float):
    """urllib's opener (a seam for tests that simulate broken streams)."""
    import urllib.request

    req = urllib.request.Request(url, headers={"User-Agent": "gpen_core (python urllib)"})
    return urllib.request.urlopen(req, timeout=timeout)


def _clean_stale_parts(folder: Path, filename: str) -> None:
    """Remove temp files/folders of crashed downloads of ``filename`` (never live ones)."""
    now = time.time()
    for p in [*folder.glob(f".{filename}.*.part"), *folder.glob(f".{filename}.*.msdl")]:
        try:
            if now - p.stat().st_mtime <= _STALE_PART_S:
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()
        except OSError:
            pass


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _install(tmp: Path, spec: WeightSpec, folder: Path, total: int | None) -> Path:
    """Check a fully written temp file and move it into place atomically."""
    size = tmp.stat().st_size
    if total is not None and size != total:
        raise _Rejected(f"incomplete: got {size} of {total} bytes")
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise _Rejected(f"wrong size: {size} bytes, expected {spec.size_bytes}")
    digest = file_sha256(tmp)
    if spec.sha256 is not None and digest != spec.sha256:
        raise _Rejected(f"wrong sha256 {digest}, expected {spec.sha256}")
    final = folder / spec.filename
    os.replace(tmp, final)
    _fsync_dir(folder)
    if spec.sha256 is None:
        # The download is the trust event: record what we fetched.
        _write_atomic(sidecar_path(final, folder), f"{digest}  {final.name}\n")
    return final


class _Rejected(Exception):
    """A source delivered bytes that fail verification."""


def _fetch_url(url: str, spec: WeightSpec, folder: Path, progress: Progress | None) -> Path:
    tmp = folder / f".{spec.filename}.{uuid.uuid4().hex[:12]}.part"
    try:
        with _open_url(url, READ_TIMEOUT_S) as resp:
            length = resp.headers.get("Content-Length") if resp.headers else None
            total = int(length) if length and length.isdigit() else spec.size_bytes
            if total is not None:
                free = shutil.disk_usage(folder).free
                if free < total + (64 << 20):
                    raise _Rejected(
                        f"not enough disk space in {folder}: {free >> 20} MiB free, {total >> 20} MiB needed"
                    )
            done = 0
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                if progress:
                    progress(0, total)
                while chunk := resp.read(_CHUNK):
                    f.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
                f.flush()
                os.fsync(f.fileno())
        return _install(tmp, spec, folder, total)
    finally:
        tmp.unlink(missing_ok=True)


def modelscope_file_url(model_id: str, relpath: str, revision: str = "master") -> str:
    """ModelScope's direct file URL (the one its own SDK builds: ``/api/v1/models/{id}/repo``)."""
    q = urllib.parse.quote_plus
    return f"{_modelscope_endpoint().rstrip('/')}/api/v1/models/{model_id}/repo?Revision={q(revision)}&FilePath={q(relpath)}"


def _fetch_modelscope(spec: WeightSpec, folder: Path, progress: Progress | None) -> Path:
    """One file from ModelScope, through the same code as a direct download.

    Not through modelscope's SDK: its client waits 60 s per read with 5 retries
    (a stalled mirror held a download for over 300 s) and resumes from its own
    ``.incomplete`` files. Here the file streams to our temp file with our read
    timeout, is verified, and the temp file is removed on any failure.
    """
    assert spec.modelscope is not None
    model_id, relpath = spec.modelscope
    return _fetch_url(modelscope_file_url(model_id, relpath), spec, folder, progress)


def _modelscope_endpoint() -> str:
    return os.environ.get("MODELSCOPE_ENDPOINT") or _MODELSCOPE_DEFAULT_ENDPOINT


def _fetch(spec: WeightSpec, folder: Path, progress: Progress | None, looked: list[str]) -> Path:
    """Try every source in order; the first verified one wins. Fails fast when none is reachable."""
    import urllib.error

    _clean_stale_parts(folder, spec.filename)
    sources: list[tuple[str, str]] = [("url", u) for u in spec.urls]
    if spec.modelscope is not None:
        ms = ("modelscope", spec.modelscope[0])
        sources = [ms, *sources] if spec.modelscope_first else [*sources, ms]
    attempts: list[str] = []
    unreachable: dict[str, str] = {}  # probe once per host
    for kind, where in sources:
        probe_url = _modelscope_endpoint() if kind == "modelscope" else where
        host = urllib.parse.urlsplit(probe_url).netloc
        label = f"ModelScope {where} ({spec.modelscope[1]})" if kind == "modelscope" and spec.modelscope else where
        if host not in unreachable:
            reason = _probe(probe_url)
            if reason:
                unreachable[host] = reason
        if host in unreachable:
            attempts.append(f"{label}: {unreachable[host]}")
            continue
        try:
            if kind == "modelscope":
                return _fetch_modelscope(spec, folder, progress)
            return _fetch_url(where, spec, folder, progress)
        except _Rejected as exc:
            attempts.append(f"{label}: rejected, {exc}")
        except urllib.error.HTTPError as exc:
            attempts.append(f"{label}: HTTP {exc.code} {exc.reason}")
        except urllib.error.URLError as exc:
            attempts.append(f"{label}: {exc.reason}")
        except ImportError as exc:
            attempts.append(f"{label}: modelscope is not installed ({exc})")
        except Exception as exc:  # network stacks raise many types; report, try the next source
            attempts.append(f"{label}: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    raise _missing_error(spec, folder, looked, "no source could be downloaded", attempts)
