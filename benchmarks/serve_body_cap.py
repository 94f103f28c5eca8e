"""What a 60 MB POST /restore costs Ray Serve's HTTP proxy and the replica before the 413.

    .venv/bin/python benchmarks/serve_body_cap.py [--mb 60] [--port 8765] [--no-proxy-cap]

Starts a local loopback Ray (2 CPUs) with the deployment as ``python -m gpen_core serve``
makes it (1 replica, no weights: the replica answers the cap before any restore), then
sends a body of ``--mb`` MB twice: with Content-Length, and chunked (no length). For the
proxy actor and the replica it prints RSS before, the peak (VmHWM, reset before each
send) and RSS after, plus the time from the first byte sent to the 413 and how much of
the body the client got to send. ``--no-proxy-cap`` leaves out the proxy's body cap
(gpen_core.scaleout.proxy_limits), to see what Serve does on its own. Ray is shut down
at the end. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MB = 1_000_000


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _descendants(root: int) -> dict[int, str]:
    """pid → command line of every process under ``root`` (Ray's local processes are its children)."""
    kids: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            names[int(p.name)] = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(p.name))
    out, todo = {}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out[c] = names.get(c, "")
            todo.append(c)
    return out


def _find(label: str) -> int:
    for pid, cmd in _descendants(os.getpid()).items():
        if cmd.startswith(label):
            return pid
    raise SystemExit(f"no process {label!r} under this one")


def _send(port: int, mb: int, chunked: bool) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.putrequest("POST", "/restore")
    if chunked:
        conn.putheader("Transfer-Encoding", "chunked")
    else:
        conn.putheader("Content-Length", str(mb * MB))
    conn.endheaders()
    sent = [0]
    piece = b"\0" * MB

    def pump() -> None:
        try:
            for _ in range(mb):
                conn.sock.sendall(b"%x\r\n" % MB + piece + b"\r\n" if chunked else piece)
                sent[0] += MB
            if chunked:
                conn.sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: what a cap should do
            pass

    t0 = time.perf_counter()
    sender = threading.Thread(target=pump, daemon=True)
    sender.start()
    resp = conn.getresponse()
    status, took = resp.status, time.perf_counter() - t0
    resp.read()
    sender.join(60)
    conn.close()
    return {"status": status, "s_to_answer": took, "mb_sent": sent[0] / MB}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=60)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--no-proxy-cap", action="store_true", help="Serve's proxy without our body cap")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="serve-cap-home-")
    os.environ.update(GPEN_HOME=home, GPEN_OFFLINE="1")  # no weights, no downloads: the replica warms up to an error
    if args.no_proxy_cap:
        from gpen_core.scaleout.proxy_limits import PROXY_CALLBACK_ENV

        os.environ[PROXY_CALLBACK_ENV] = ""  # set (so ray_session keeps it) and empty: Serve adds no middleware

    from ray import serve

    from gpen_core.scaleout.runtime import ray_session
    from gpen_core.scaleout.serve import ServeConfig, deploy

    with ray_session(None, num_cpus=2, temp_dir=tempfile.mkdtemp(prefix="rc-", dir="/tmp")):
        try:
            deploy(ServeConfig(port=args.port, models_dir=home, memory_bytes=1 << 30))
            proxy, replica = _find("ray::ProxyActor"), _find("ray::ServeReplica")
            warm = _send(args.port, 1, chunked=False)  # a first request warms the route; the replica answers it
            print(f"1 MB of zeros with Content-Length: HTTP {warm['status']} (from the replica: not an image)")
            for chunked in (False, True):
                before = {n: _status(p, "VmRSS") for n, p in (("proxy", proxy), ("replica", replica))}
                for p in (proxy, replica):
                    Path(f"/proc/{p}/clear_refs").write_text("5")  # VmHWM := current RSS
                r = _send(args.port, args.mb, chunked)
                time.sleep(2)  # let the proxy drain what it still reads after the answer
                how = "chunked, no length" if chunked else "with Content-Length"
                print(f"{args.mb} MB {how}: HTTP {r['status']} after {r['s_to_answer']:.2f} s, "
                      f"client sent {r['mb_sent']:.0f} MB")
                for n, p in (("proxy", proxy), ("replica", replica)):
                    print(f"  {n:7s} RSS {before[n] / MB:6.0f} MB before, peak +{(_status(p, 'VmHWM') - before[n]) / MB:4.0f} MB, "
                          f"{(_status(p, 'VmRSS') - before[n]) / MB:+5.0f} MB after")
        finally:
            serve.shutdown()


if __name__ == "__main__":
    main()
