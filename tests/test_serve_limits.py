"""Ray Serve's edges without a Ray cluster: the upload cap while streaming, a dying replica, the reaper.

The deployment and the client are driven with stand-ins for Starlette's request and
Serve's handle; the exceptions are Ray's own classes (Ray must be installed for those).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpen_core.errors import InputError, ResourceError
from gpen_core.scaleout import serve

MB = 1_000_000


class FakeRequest:
    """Starlette's Request as the deployment reads it: headers, query, and a body streamed in chunks."""

    def __init__(self, chunks: int, chunk_bytes: int = MB, declared: int | None = None) -> None:
        self.headers = {"content-length": str(declared)} if declared is not None else {}
        self.query_params: dict[str, str] = {}
        self.chunks, self.chunk_bytes, self.read = chunks, chunk_bytes, 0

    async def stream(self):
        for _ in range(self.chunks):
            self.read += 1
            yield b"\0" * self.chunk_bytes

    async def body(self) -> bytes:  # what reading it all at once would do
        return b"".join([c async for c in self.stream()])


def test_a_declared_oversize_body_is_refused_before_a_byte_is_read() -> None:
    req = FakeRequest(chunks=60, declared=60 * MB)
    with pytest.raises(InputError) as err:
        asyncio.run(serve.read_body_capped(req))
    assert req.read == 0
    assert "The file is 60 MB; the limit is 25 MB" in str(err.value)


def test_an_undeclared_oversize_body_is_refused_at_the_first_chunk_past_the_limit() -> None:
    req = FakeRequest(chunks=60)  # chunked transfer: no Content-Length
    with pytest.raises(InputError) as err:
        asyncio.run(serve.read_body_capped(req))
    assert req.read == 26  # 25 MB fit; the 26th chunk passes the limit and reading stops
    assert "over 25 MB" in str(err.value)
    small = FakeRequest(chunks=3, declared=3 * MB)
    assert len(asyncio.run(serve.read_body_capped(small))) == 3 * MB


def test_the_http_route_answers_413_without_restoring() -> None:
    pytest.importorskip("starlette")
    dep = serve.RestoreDeployment.__new__(serve.RestoreDeployment)  # no Restorer: it must not be reached
    dep.restore = lambda *a: pytest.fail("restore was called for an oversize upload")  # type: ignore[method-assign]
    resp = asyncio.run(dep(FakeRequest(chunks=60)))
    assert resp.status_code == 413 and b"25 MB" in resp.body


# ------------------------------------------------------------ a dying replica


class _Handle:
    """Serve's handle: ``restore.remote(...).result()``; fails with ``errors`` in turn, then answers."""

    def __init__(self, errors: list[BaseException], served: object) -> None:
        self.errors, self.served, self.calls = list(errors), served, 0
        self.restore = self

    def remote(self, *_: object) -> "_Handle":
        return self

    def result(self) -> object:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.served


def _died() -> BaseException:
    ray_exceptions = pytest.importorskip("ray.exceptions", reason="needs Ray (requirements-ray.txt)")

    class Died(ray_exceptions.ActorDiedError):
        # Ray's own text carries the actor id, pid, namespace and IP: none of it may reach the user
        def __str__(self) -> str:
            return "The actor died unexpectedly. actor_id=8f3a pid=4242 namespace=serve ip=10.1.2.3"

    return Died()


def _client(handle: _Handle) -> serve.RayRestorer:
    client = serve.RayRestorer(None)
    client._handle = handle
    return client


def test_a_replica_that_dies_is_retried_once_and_the_result_says_so() -> None:
    from .test_app import _fake_result

    served = serve.Served(_fake_result(), "replica-2", "node0001", 4343)
    handle = _Handle([_died()], served)
    result = _client(handle)(b"image bytes")
    assert handle.calls == 2
    assert any("another one made this result" in n for n in result.notes)


def test_a_replica_dying_twice_gives_a_plain_message_without_ray_internals() -> None:
    handle = _Handle([_died(), _died()], None)
    with pytest.raises(ResourceError) as err:
        _client(handle)(b"image bytes", progress=lambda f, d: None)
    text = str(err.value)
    assert handle.calls == 2
    for internal in ("actor_id", "4242", "namespace", "10.1.2.3", "ActorDiedError"):
        assert internal not in text
    assert "Try again" in text and "10.1.2.3" in err.value.details  # the log keeps Ray's words


# ------------------------------------------------------------ the reaper

_DRIVER = """
import subprocess, sys, time
sys.path.insert(0, {root!r})
from gpen_core.scaleout import reaper
session = sys.argv[1]
keep = reaper.start(session)
# an "agent": keeps a log in the session folder, in its own session (as Ray's are after the raylet dies)
agent = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(600)",
                          session + "/logs/agent.log"], start_new_session=True)
print(agent.pid, keep.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the reaper reads /proc (Linux)")
def test_the_reaper_stops_a_sessions_processes_when_the_driver_is_killed(tmp_path: Path) -> None:
    session = tmp_path / "session_1"
    (session / "logs").mkdir(parents=True)
    bystander_log = tmp_path / "other_session" / "logs"
    bystander_log.mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(600)",
                                  str(bystander_log / "x.log")])
    root = str(Path(__file__).resolve().parents[1])
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER.format(root=root), str(session)], stdout=subprocess.PIPE, text=True)
    try:
        agent, watcher = (int(x) for x in driver.stdout.readline().split())  # type: ignore[union-attr]
        assert _alive(agent) and _alive(watcher)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        for _ in range(300):  # liveness, not a timing claim: the reaper waits a grace period first
            if not _alive(agent) and not _alive(watcher):
                break
            time.sleep(0.1)
        assert not _alive(agent), "the session's process outlived its driver"
        assert not _alive(watcher)
        assert bystander.poll() is None, "a process of another session was touched"
    finally:
        bystander.kill()
        bystander.wait()
        for pid in locals().get("agent", None), locals().get("watcher", None):
            if isinstance(pid, int) and _alive(pid):
                os.kill(pid, signal.SIGKILL)
