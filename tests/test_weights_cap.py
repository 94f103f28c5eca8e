"""A download without a Content-Length is capped, and the disk is watched as its bytes arrive.

A loopback HTTP server streams zeros without announcing a size (HTTP/1.0, no
Content-Length) for as long as the client reads; every test bounds it.
"""

from __future__ import annotations

import http.server
import threading
from collections import namedtuple
from pathlib import Path

import pytest

from gpen_core.errors import WeightsError
from gpen_core.weights import fetch
from gpen_core.weights import lookup as weights

from .test_weights import no_proxy, patch_spec  # noqa: F401  (fixture)


class _Endless:
    """Serves zeros without a Content-Length until the client hangs up or ``limit`` bytes went out."""

    def __init__(self, limit: int = 1 << 30, declared: int | None = None) -> None:
        server = self
        self.sent = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(200)
                if declared is not None:
                    self.send_header("Content-Length", str(declared))
                self.end_headers()
                block = b"\0" * 65536
                try:
                    while server.sent < limit:
                        self.wfile.write(block)
                        server.sent += len(block)
                except OSError:  # the client stopped reading: what the cap should do
                    pass

            def log_message(self, *a: object) -> None:
                pass

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}/GPEN-BFR-512.pth"
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    def __enter__(self) -> "_Endless":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._srv.shutdown()
        self._srv.server_close()


def _parts(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part")) if folder.exists() else []


def test_every_registry_file_has_a_cap_above_its_real_size() -> None:
    for spec in weights.REGISTRY.values():
        cap = fetch.download_cap(spec)
        assert cap >= (spec.size_bytes or 0)
        # the released generators' float32 weights are at most 272 MiB (GPEN-BFR-512.pth: 284 MB on disk)
        if spec.kind == "generator":
            assert 284_000_000 < cap <= 1 << 30


def test_a_stream_without_a_size_stops_at_the_cap_and_leaves_nothing(monkeypatch, no_proxy) -> None:  # noqa: F811
    monkeypatch.setitem(fetch.MAX_BYTES_BY_KIND, "generator", 4 << 20)
    with _Endless(limit=64 << 20) as server:  # 16x the cap: the client must stop first
        patch_spec(monkeypatch, "GPEN-BFR-512", urls=(server.url,), modelscope=None)
        monkeypatch.delenv("GPEN_OFFLINE", raising=False)
        with pytest.raises(WeightsError) as err:
            weights.download("GPEN-BFR-512")
        assert server.sent < 16 << 20
    assert "stopped at 4194304 bytes" in str(err.value) and "no size announced" in str(err.value)
    assert _parts(weights.models_dir()) == []


def test_an_announced_size_over_the_cap_is_refused_before_any_byte(monkeypatch, no_proxy) -> None:  # noqa: F811
    with _Endless(limit=1 << 20, declared=10 << 30) as server:
        patch_spec(monkeypatch, "GPEN-BFR-512", urls=(server.url,), modelscope=None)
        monkeypatch.delenv("GPEN_OFFLINE", raising=False)
        with pytest.raises(WeightsError, match="announces 10737418240 bytes, more than GPEN-BFR-512 can be"):
            weights.download("GPEN-BFR-512")
    assert _parts(weights.models_dir()) == []


def test_the_disk_is_watched_while_a_stream_without_a_size_arrives(monkeypatch, no_proxy) -> None:  # noqa: F811
    folder = weights.models_dir()
    usage = namedtuple("usage", "total used free")
    room = fetch.DISK_RESERVE + (6 << 20)  # the disk fills 6 MiB into the download

    def disk_usage(path: object) -> object:
        written = sum(p.stat().st_size for p in Path(folder).glob("*.part"))
        return usage(1 << 40, 0, room - written)

    monkeypatch.setattr(fetch.shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(fetch, "_DISK_CHECK_EVERY", 1 << 20)
    with _Endless(limit=256 << 20) as server:
        patch_spec(monkeypatch, "GPEN-BFR-512", urls=(server.url,), modelscope=None)
        monkeypatch.delenv("GPEN_OFFLINE", raising=False)
        with pytest.raises(WeightsError, match="not enough disk space"):
            weights.download("GPEN-BFR-512")
        assert server.sent < 64 << 20
    assert _parts(folder) == []
