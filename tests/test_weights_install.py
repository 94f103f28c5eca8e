"""What a download may install: only a checkpoint of the registry's network, only at a usable pace.

Sources are ``file://`` URLs and a loopback HTTP server that drips its body. conftest gives
every test an empty ``GPEN_HOME`` and ``MODELSCOPE_CACHE`` and sets ``GPEN_OFFLINE=1``.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
import time
from pathlib import Path

import pytest

from gpen_core.errors import WeightsError
from gpen_core.progress import CountProgress
from gpen_core.weights import fetch
from gpen_core.weights import lookup as weights

from .factories import TINY, write_checkpoint

TINY_ARCH = weights.Arch(TINY.size, TINY.channel_multiplier, TINY.narrow, TINY.style_dim, TINY.n_mlp)


def _spec(monkeypatch: pytest.MonkeyPatch, name: str, **changes: object) -> weights.WeightSpec:
    spec = dataclasses.replace(weights.REGISTRY[name], **changes)
    monkeypatch.setitem(weights.REGISTRY, name, spec)
    return spec


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)


# ------------------------------------------------------------------ contents


def test_three_megabytes_of_zeros_are_refused_naming_the_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    junk = tmp_path / "zeros.pth"
    junk.write_bytes(b"\0" * 3_000_000)
    _spec(monkeypatch, "GPEN-BFR-512", urls=(junk.as_uri(),), modelscope=None)
    with pytest.raises(WeightsError) as e:
        weights.download("GPEN-BFR-512")
    msg = str(e.value)
    assert junk.as_uri() in msg and "rejected, not a usable GPEN-BFR-512 checkpoint" in msg
    assert "not a usable GPEN-BFR-512 checkpoint: the downloaded file is not a PyTorch checkpoint (" in msg, msg
    assert _left(weights.models_dir()) == []  # no file, no sidecar hash, no partial file
    with pytest.raises(WeightsError, match="is not in"):  # and it is not trusted later
        weights.resolve("GPEN-BFR-512")


def test_a_checkpoint_of_another_architecture_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = write_checkpoint(tmp_path / "tiny.pth", TINY, seed=3)  # a real GPEN, but not the 512 px one
    _spec(monkeypatch, "GPEN-BFR-512", urls=(other.as_uri(),), modelscope=None)
    with pytest.raises(WeightsError) as e:
        weights.download("GPEN-BFR-512")
    assert "not the GPEN-BFR-512 network: a GPEN generator with size 64 (expected 512)" in str(e.value)
    assert _left(weights.models_dir()) == []


def test_a_text_file_served_as_a_parser_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    page = tmp_path / "error.html"
    page.write_text("<html><body>404 Not Found</body></html>")
    _spec(monkeypatch, "ParseNet-latest", urls=(page.as_uri(),), modelscope=None)
    with pytest.raises(WeightsError, match="not a usable ParseNet-latest checkpoint"):
        weights.download("ParseNet-latest")
    assert _left(weights.models_dir()) == []


def test_the_right_architecture_is_installed_with_its_sidecar(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    good = write_checkpoint(tmp_path / "tiny.pth", TINY, seed=3)
    _spec(monkeypatch, "GPEN-BFR-512", urls=(good.as_uri(),), modelscope=None, arch_params=TINY_ARCH)
    path = weights.download("GPEN-BFR-512")
    assert _left(weights.models_dir()) == ["GPEN-BFR-512.pth", "GPEN-BFR-512.pth.sha256"]
    assert path.read_bytes() == good.read_bytes()


# --------------------------------------------------------------------- pace


class _Drip:
    """A loopback HTTP server sending ``chunk`` bytes every ``every_s`` seconds, ``total`` in all."""

    def __init__(self, total: int, chunk: int, every_s: float) -> None:
        stop = self.stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(200)
                self.send_header("Content-Length", str(total))
                self.end_headers()
                sent = 0
                try:
                    while sent < total and not stop.is_set():
                        n = min(chunk, total - sent)
                        self.wfile.write(b"\0" * n)
                        self.wfile.flush()
                        sent += n
                        stop.wait(every_s)
                except OSError:  # the client gave up: what the test wants
                    pass

            def log_message(self, *a: object) -> None:
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/GPEN-BFR-512.pth"

    def __enter__(self) -> "_Drip":
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.srv.shutdown()
        self.srv.server_close()


# Not a speed requirement: without the rate rule the 10 MB drip below would take ~3 hours, so
# the download runs in a thread and the test fails (instead of hanging the suite) if it has not
# ended by then. The rule itself stops it after its 1 s window; 60 s is slack for a loaded machine.
_HANG_LIMIT_S = 60.0


def _download_ending_within(name: str, progress: CountProgress, limit_s: float) -> BaseException | None:
    """Run ``weights.download(name)`` in a daemon thread; return what it raised (None if it returned).

    Fails the test if the download is still running after ``limit_s``: a missing stall rule then
    shows up as a failure, and the thread ends when the caller's server closes the connection.
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            weights.download(name, progress=progress)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed back to the test to assert on
            outcome.append(e)

    worker = threading.Thread(target=run, name="drip-download", daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        pytest.fail(f"the download of a dripping server was still running after {limit_s:.0f} s: nothing stopped it")
    return outcome[0]


def test_a_server_dripping_under_the_minimum_rate_is_dropped_and_its_part_removed(
    monkeypatch: pytest.MonkeyPatch, no_proxy: None
) -> None:
    """The rule scaled down (a 1 s window): 100 bytes every 0.1 s is 1 KB/s, under a 4 KiB/s floor.
    Each read is well inside the read timeout, which alone never stops such a server."""
    monkeypatch.setattr(fetch, "MIN_RATE_WINDOW_S", 1.0)
    monkeypatch.setattr(fetch, "MIN_BYTES_PER_S", 4096)
    seen: list[int] = []
    with _Drip(total=10_000_000, chunk=100, every_s=0.1) as drip:
        _spec(monkeypatch, "GPEN-BFR-512", urls=(drip.url,), modelscope=None)
        folder = weights.models_dir()

        def progress(done: int, total: int | None) -> None:
            seen.append(done)
            parts = [p.name for p in folder.iterdir() if p.name.endswith(".part")]
            assert len(parts) == 1  # streaming into its partial file

        error = _download_ending_within("GPEN-BFR-512", progress, _HANG_LIMIT_S)
    assert isinstance(error, WeightsError), f"expected a WeightsError, got {error!r}"
    assert "too slow" in str(error) and "under the 4 KiB/s minimum" in str(error)
    assert 0 < seen[-1] < 4096 * 3  # it stopped after the first window, not at the end of the file
    assert _left(folder) == []  # the partial file went with it


def test_the_whole_download_has_a_deadline(monkeypatch: pytest.MonkeyPatch, no_proxy: None) -> None:
    """A server fast enough for the rate rule still meets the overall deadline (scaled to 0.5 s)."""
    monkeypatch.setattr(fetch, "DOWNLOAD_DEADLINE_S", 0.5)
    with _Drip(total=10_000_000, chunk=64 * 1024, every_s=0.05) as drip:  # ~1.3 MB/s: the rate rule passes
        _spec(monkeypatch, "GPEN-BFR-512", urls=(drip.url,), modelscope=None)
        with pytest.raises(WeightsError, match="the download deadline"):
            weights.download("GPEN-BFR-512")
    assert _left(weights.models_dir()) == []


def test_a_server_above_the_minimum_rate_completes(monkeypatch: pytest.MonkeyPatch, no_proxy: None, tmp_path: Path) -> None:
    """The floor does not stop an honest server that pauses between chunks: 256 KiB every 0.1 s against a
    4 KiB/s floor checked every 0.25 s (the rule scaled down: about five windows in the ~1.3 s download)."""
    monkeypatch.setattr(fetch, "MIN_RATE_WINDOW_S", 0.25)
    monkeypatch.setattr(fetch, "MIN_BYTES_PER_S", 4096)
    good = write_checkpoint(tmp_path / "tiny.pth", TINY, seed=3)
    data = good.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(0, len(data), 256 * 1024):
                self.wfile.write(data[i : i + 256 * 1024])
                self.wfile.flush()
                time.sleep(0.1)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        _spec(monkeypatch, "GPEN-BFR-512", urls=(f"http://127.0.0.1:{srv.server_address[1]}/x.pth",), modelscope=None,
              arch_params=TINY_ARCH)
        assert weights.download("GPEN-BFR-512").read_bytes() == data
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_cancelled_download_stops_at_once_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch, no_proxy: None) -> None:
    """The app's Stop button sets the event from another thread; no other source is tried."""
    cancel = threading.Event()
    with _Drip(total=10_000_000, chunk=4096, every_s=0.02) as drip:
        _spec(monkeypatch, "GPEN-BFR-512", urls=(drip.url, drip.url.replace("GPEN", "mirror-GPEN")), modelscope=None)
        seen: list[int] = []

        def progress(done: int, total: int | None) -> None:
            seen.append(done)
            if done >= 40_000:
                cancel.set()  # as a Stop button would, mid-file

        with pytest.raises(weights.DownloadCancelled, match="cancelled after"):
            weights.download("GPEN-BFR-512", progress=progress, cancel=cancel)
    assert seen[-1] < 40_000 + 2 * 4096 and seen.count(0) == 1  # stopped at the next chunk; no second source
    assert _left(weights.models_dir()) == []
