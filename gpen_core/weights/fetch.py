"""Downloads: probe the host, stream to a temp file in the models folder, verify (size, sha256), then flush and
rename into place, so the final name never holds a partial file."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

from gpen_core.weights.checksums import file_sha256, record_hash
from gpen_core.errors import WeightsError
from gpen_core.platform import durable
from gpen_core.platform.paths import made
from gpen_core.progress import CountProgress
from gpen_core.weights.missing import missing_error
from gpen_core.weights.registry import Arch, WeightSpec

# A TCP connect to the source host first: an offline machine fails in seconds, not in a retry loop (20+ s).
CONNECT_PROBE_S = 3.0
READ_TIMEOUT_S = 20.0  # per read: a stalled server fails the download instead of hanging the app
# A server that drips never trips the read timeout: under MIN_BYTES_PER_S over any MIN_RATE_WINDOW_S fails, and
# so does a whole download past its deadline (an hour asks under 1 MB/s of any file here).
MIN_BYTES_PER_S = 32 * 1024
MIN_RATE_WINDOW_S = 60.0
DOWNLOAD_DEADLINE_S = 3600.0
_CHUNK = 1 << 20
# The most bytes an unpinned download may bring: twice the largest released file of its kind (generators 72-272
# MiB, ParseNet 85 MB, RRDBNet ~67 MB): a stream without Content-Length cannot fill the disk (docs/files-and-limits.md).
MAX_BYTES_BY_KIND: dict[str, int] = {"generator": 640 << 20, "detector": 256 << 20, "parser": 192 << 20,
                                     "upscaler": 192 << 20}
# Disk space a download leaves free: checked before it starts and, with no size announced, as the bytes arrive.
DISK_RESERVE = 64 << 20
_DISK_CHECK_EVERY = 16 << 20
# Partial downloads older than this are someone's crashed attempt, not a live one.
_STALE_PART_S = 6 * 3600
_MODELSCOPE_DEFAULT_ENDPOINT = "https://modelscope.cn"  # modelscope_hub.constants.DEFAULT_ENDPOINT


def _probe(url: str) -> str | None:
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
        with socket.create_connection((host, port), timeout=CONNECT_PROBE_S):
            return None
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({exc.strerror or exc.__class__.__name__ or exc})"


def _open_url(url: str, timeout: float):  # a seam for tests that simulate broken streams
    import urllib.request

    req = urllib.request.Request(url, headers={"User-Agent": "gpen_core (python urllib)"})
    return urllib.request.urlopen(req, timeout=timeout)


def _clean_stale_parts(folder: Path, filename: str) -> None:
    """Remove temp files/folders of crashed downloads of ``filename`` (never live ones)."""
    now = time.time()
    for p in [*folder.glob(f".{filename}.*.part"), *folder.glob(f".{filename}.*.msdl")]:
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            if now - p.stat().st_mtime <= _STALE_PART_S:
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()


def _install(tmp: Path, spec: WeightSpec, folder: Path, total: int | None) -> Path:
    """Verify a fully written temp file and move it into place atomically."""
    size = tmp.stat().st_size
    if total is not None and size != total:
        raise _Rejected(f"incomplete: got {size} of {total} bytes")
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise _Rejected(f"wrong size: {size} bytes, expected {spec.size_bytes}")
    digest = file_sha256(tmp)
    if spec.sha256 is None:
        # Nothing pins these bytes: open them before they get the final name and a sidecar hash.
        _check_contents(tmp, spec)
    elif digest != spec.sha256:
        raise _Rejected(f"wrong sha256 {digest}, expected {spec.sha256}")
    final = folder / spec.filename
    # .NAME.RANDOM.part is swept by age, not pid: a models folder may be shared by several machines.
    durable.install(tmp, final, sync=True)
    if spec.sha256 is None:
        # The download is the trust event: record what we fetched.
        record_hash(final, digest, folder)
    return final


class _Rejected(Exception):
    """A source delivered bytes that fail verification."""


def _check_contents(tmp: Path, spec: WeightSpec) -> None:
    """Raise :class:`_Rejected` unless ``tmp`` is a state_dict of the network ``spec`` names (read ``weights_only``,
    mapped): else an unpinned source's zeros or HTML page would be installed and trusted from then on."""
    from gpen_core.errors import OutOfMemory
    from gpen_core.networks.checkpoint import build_from_state_dict, infer_config, read_checkpoint, unwrap_state_dict

    try:
        obj = read_checkpoint(tmp, "downloaded")
        sd = unwrap_state_dict(obj)
        if spec.arch_params is None:
            return
        found = infer_config(sd)
        have = tuple(getattr(found, f) for f in Arch._fields)
        if have != tuple(spec.arch_params):
            diff = ", ".join(f"{f} {h:g} (expected {e:g})" for f, h, e in zip(Arch._fields, have, spec.arch_params) if h != e)
            raise _Rejected(f"not the {spec.name} network: a GPEN generator with {diff}")
        build_from_state_dict(sd)  # every tensor's shape, on the mapped file
    except OutOfMemory:
        raise
    except WeightsError as exc:
        # About what was served, not the temporary path it waited under.
        text = str(exc).replace(f"file {tmp}", "file").replace(str(tmp), "file").replace(tmp.name, "file")
        text = text.split(" Delete it and download")[0]
        raise _Rejected(f"not a usable {spec.name} checkpoint: {text}") from None


class DownloadCancelled(WeightsError):
    """The caller cancelled the download (the app's Stop button); its partial file is already removed."""


class _Pace:
    """The download's speed rules (MIN_BYTES_PER_S over each MIN_RATE_WINDOW_S, DOWNLOAD_DEADLINE_S) and its cancel flag."""

    def __init__(self, start: float, cancel: threading.Event | None = None) -> None:
        self.start, self.mark, self.mark_done, self.cancel = start, start, 0, cancel

    def check(self, done: int, now: float) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled(f"download cancelled after {done} bytes; nothing was installed")
        if now - self.start > DOWNLOAD_DEADLINE_S:
            raise _Rejected(f"stopped after {DOWNLOAD_DEADLINE_S:.0f} s (the download deadline) with {done} bytes")
        if now - self.mark >= MIN_RATE_WINDOW_S:
            rate = (done - self.mark_done) / (now - self.mark)
            if rate < MIN_BYTES_PER_S:
                raise _Rejected(f"too slow: {rate / 1024:.1f} KiB/s over the last {now - self.mark:.0f} s, under the "
                                f"{MIN_BYTES_PER_S / 1024:.0f} KiB/s minimum; try again later or download it by hand")
            self.mark, self.mark_done = now, done


def download_cap(spec: WeightSpec) -> int:
    """The most bytes a download of ``spec`` may bring: its pinned size, else :data:`MAX_BYTES_BY_KIND`."""
    return spec.size_bytes if spec.size_bytes is not None else MAX_BYTES_BY_KIND.get(spec.kind, max(MAX_BYTES_BY_KIND.values()))


def _disk_left(folder: Path, need: int) -> None:
    """Raise :class:`_Rejected` when writing ``need`` more bytes would leave under :data:`DISK_RESERVE` free."""
    free = shutil.disk_usage(folder).free
    if free < need + DISK_RESERVE:
        raise _Rejected(f"not enough disk space in {folder}: {free >> 20} MiB free, {need >> 20} MiB more needed "
                        f"(and {DISK_RESERVE >> 20} MiB kept free)")


def _fetch_url(url: str, spec: WeightSpec, folder: Path, progress: CountProgress | None,
               cancel: threading.Event | None = None) -> Path:
    tmp = folder / f".{spec.filename}.{uuid.uuid4().hex[:12]}.part"
    cap = download_cap(spec)
    try:
        with _open_url(url, READ_TIMEOUT_S) as resp:
            length = resp.headers.get("Content-Length") if resp.headers else None
            total = int(length) if length and length.isdigit() else spec.size_bytes
            if total is not None and total > cap:
                raise _Rejected(f"the server announces {total} bytes, more than {spec.name} can be ({cap} bytes)")
            limit = total if total is not None else cap  # more than announced is not the file either
            if total is not None:
                _disk_left(folder, total)
            done, checked = 0, 0
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                if progress:
                    progress(0, total)
                # read1: return what one receive brought, so the rules below run while a server drips
                read = getattr(resp, "read1", resp.read)
                pace = _Pace(time.monotonic(), cancel)
                while chunk := read(_CHUNK):
                    if done + len(chunk) > limit:
                        raise _Rejected(f"stopped at {limit} bytes: the server sent more than "
                                        + (f"it announced ({total})" if total is not None
                                           else f"any {spec.kind} file here can be (no size announced)"))
                    if total is None and done + len(chunk) - checked >= _DISK_CHECK_EVERY:
                        _disk_left(folder, _DISK_CHECK_EVERY)  # no size announced: watch the disk as it fills
                        checked = done
                    f.write(chunk)
                    done += len(chunk)
                    pace.check(done, time.monotonic())
                    if progress:
                        progress(done, total)
        return _install(tmp, spec, folder, total)
    finally:
        tmp.unlink(missing_ok=True)


def modelscope_file_url(model_id: str, relpath: str, revision: str = "master") -> str:
    """ModelScope's direct file URL on ``$MODELSCOPE_ENDPOINT`` (the one its SDK builds: ``/api/v1/models/{id}/repo``)."""
    q = urllib.parse.quote_plus
    endpoint = os.environ.get("MODELSCOPE_ENDPOINT") or _MODELSCOPE_DEFAULT_ENDPOINT
    return f"{endpoint.rstrip('/')}/api/v1/models/{model_id}/repo?Revision={q(revision)}&FilePath={q(relpath)}"


def download_into(spec: WeightSpec, folder: Path, progress: CountProgress | None, looked: list[str],
                  cancel: threading.Event | None = None) -> Path:
    """The first source, in order, whose bytes verify; fails fast when none is reachable. ``cancel`` set (another
    thread) stops at the next chunk: :class:`DownloadCancelled`, nothing left."""
    import urllib.error

    _clean_stale_parts(made(folder), spec.filename)
    # (label, URL). ModelScope's file URL, not its SDK: that client waits 60 s per read with 5 retries (a
    # stalled mirror held a download for over 300 s); here every source gets the same timeouts and checks.
    sources = spec.in_download_order(
        lambda u: (u, u), lambda mid, rel: (f"ModelScope {mid} ({rel})", modelscope_file_url(mid, rel))
    )
    attempts: list[str] = []
    unreachable: dict[str, str] = {}  # probe once per host
    for label, url in sources:
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled(f"download of {spec.name} cancelled; nothing was installed")
        host = urllib.parse.urlsplit(url).netloc
        if host not in unreachable and (reason := _probe(url)):
            unreachable[host] = reason
        if host in unreachable:
            attempts.append(f"{label}: {unreachable[host]}")
            continue
        try:
            return _fetch_url(url, spec, folder, progress, cancel)
        except DownloadCancelled:
            raise
        except _Rejected as exc:
            attempts.append(f"{label}: rejected, {exc}")
        except urllib.error.HTTPError as exc:
            attempts.append(f"{label}: HTTP {exc.code} {exc.reason}")
        except urllib.error.URLError as exc:
            attempts.append(f"{label}: {exc.reason}")
        except Exception as exc:  # network stacks raise many types; report, try the next source
            attempts.append(f"{label}: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    raise missing_error([spec.name], folder, "no source could be downloaded", looked, attempts)
