"""The README's performance table: every speed and memory target, measured on this machine.

    .venv/bin/python benchmarks/bench.py                # forward paths, whole requests, cold start (~10 min on 2 cores)
    .venv/bin/python benchmarks/bench.py --soak         # + 200 sequential requests through one engine (~4 min more)
    .venv/bin/python benchmarks/bench.py --readme       # also rewrite the table between the README's perf-table markers
    .venv/bin/python benchmarks/bench.py --quick        # smoke run: 256 only, 2 runs, low mode, no cold start

It runs the measurements that have their own scripts, each in fresh processes:

- ``bench_forward.py``: seconds per face of the GPEN forward for 256 and 512 px, per
  path (``plain`` = the official generic up-fir-dn in eager float32, the reference;
  ``fast`` = the exact path; ``fast-bf16`` where the CPU has native bfloat16), medians
  over ``--runs`` after a warm-up, interleaved in one process so load drifts hit every
  path alike, with the deviation from plain eager;
- ``bench_request.py``: the whole request (decode, detect, align, restore, paste,
  encode) on a 4000×3000 JPEG with one face, per memory mode, with the engine's meter;
- the cold start: ``python app.py`` launched with a GPEN-BFR-512 file in the models
  folder, then one restore through ``gradio_client``, timed from the launch;
- with ``--soak``: ``soak.py`` (200 requests, RSS growth after the first 10).

Generator weights are random (the exact architectures: time and memory do not depend
on the values). It prints each part's own table, then one table of targets and what
was measured, which is what ``--readme`` writes into README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_forward  # noqa: E402
import bench_request  # noqa: E402
import soak as soak_script  # noqa: E402
from readme_block import README, replace_block  # noqa: E402

COLD_START_EXAMPLE = ROOT / "examples" / "astronaut_blur_noise.jpg"


@dataclass(frozen=True)
class Target:
    what: str
    target: str
    measured: str
    met: bool | None  # None: not measured in this run


# ------------------------------------------------------------------ cold start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cold_start(mode: str = "balanced", timeout_s: float = 300.0) -> dict[str, float | str]:
    """Seconds from ``python app.py`` to the page answering, and to the first restored face."""
    import httpx
    from gradio_client import Client, handle_file

    with tempfile.TemporaryDirectory(prefix="gpen-cold-") as tmp:
        models = Path(tmp)
        soak_script.make_models_dir(models, mode)  # the mode's generator (random weights) and detector
        port = _free_port()
        env = dict(os.environ, GPEN_HOME=str(models), GPEN_OFFLINE="1")
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            url = f"http://127.0.0.1:{port}/"
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"app.py exited with {proc.returncode}: {proc.stderr.read()[-500:]}")
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"app.py did not answer within {timeout_s:.0f} s")
                try:
                    if httpx.get(url, timeout=1.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            page_s = time.perf_counter() - t0
            client = Client(url, verbose=False)
            *_, record = client.predict(
                handle_file(str(COLD_START_EXAMPLE)), mode, "default", "default", 1.0, 0.9, 50, False, api_name="/restore"
            )
            first_s = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "page_s": page_s,
        "first_face_s": first_s,
        "mode": record["mode"],
        "faces": record["faces"],
        "load_s": record["timings"].get("load_s", 0.0),
        "restore_s": record["timings"].get("restore_s", 0.0),
    }


# ----------------------------------------------------------------------- soak


def soak(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="gpen-soak-") as tmp:
        out = Path(tmp) / "soak.json"
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--n", str(n), "--json", str(out)], text=True, capture_output=True)
        print(proc.stdout)
        if not out.exists():
            raise RuntimeError(f"soak.py failed: {proc.stderr[-500:]}")
        data = json.loads(out.read_text())
        return data["summary"] | {"requests": len(data["requests"])}


# ---------------------------------------------------------------------- table


def _forward_rows(forward: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["size"], r["path"]): r for r in forward}


def targets(forward: list[dict], request: list[dict], cold: dict | None, soaked: dict | None) -> list[Target]:
    """The issue's targets against what this run measured."""
    f = _forward_rows(forward)
    rows: list[Target] = []

    def fwd(size: int, path: str, need: float, what: str, extra: str = "") -> None:
        r = f.get((size, path))
        if r is None:
            rows.append(Target(what, f"≥ {need:g}× plain eager{extra}", "not measured", None))
            return
        dev = r["max_abs_dev"]
        got = f"{r['median_s']:.3f} s vs {f[(size, 'plain')]['median_s']:.3f} s plain: **{r['ratio']:.2f}×**, max abs diff {dev:.1e}"
        ok = r["ratio"] >= need
        if path == "fast":
            ok = ok and dev <= 1e-4
        else:
            got += f", PSNR {r['psnr_db']:.1f} dB"
            ok = ok and r["psnr_db"] >= 40
        rows.append(Target(what, f"≥ {need:g}× plain eager{extra}", got, ok))

    fwd(512, "fast", 2.2, "GPEN-BFR-512 per face, exact path", ", max abs diff ≤ 1e-4")
    fwd(512, "fast-bf16", 4.0, "GPEN-BFR-512 per face, bf16 path", ", PSNR ≥ 40 dB")
    fwd(256, "fast", 2.5, "GPEN-BFR-256 per face, exact path", ", max abs diff ≤ 1e-4")
    req = {r["mode"]: r for r in request}
    for mode, secs, gb in (("quality", 4.0, 1.2), ("low", 1.0, 0.6)):
        what = f"whole request, 4000×3000 JPEG, one face, `{mode}`"
        want = f"≤ {secs:g} s and ≤ {gb * 1000:.0f} MB peak RSS"
        r = req.get(mode)
        if r is None:
            rows.append(Target(what, want, "not measured", None))
            continue
        t = statistics.median(x["total_s"] for x in r["rows"])
        rss = statistics.median(x["rss"] for x in r["rows"])
        got = (
            f"{t:.2f} s, {rss / 1e6:.0f} MB peak RSS, of which {r['import_rss'] / 1e6:.0f} MB is the imports alone "
            f"({r['dtype']}, {r['detector']})"
        )
        rows.append(Target(what, want, got, t <= secs and rss <= gb * 1e9))
    if cold is None:
        rows.append(Target("cold start: app launch to first restored face, 512", "≤ 15 s", "not measured", None))
    else:
        rows.append(
            Target(
                "cold start: app launch to first restored face, 512",
                "≤ 15 s",
                f"page up in {cold['page_s']:.1f} s, first face ({cold['mode']}) at {cold['first_face_s']:.1f} s",
                cold["first_face_s"] <= 15,
            )
        )
    what = "steady state: 200 sequential requests"
    if soaked is None:
        rows.append(Target(what, "RSS growth after the first 10 ≤ 50 MB", "not run (`--soak`)", None))
    else:
        g = soaked["growth_after_warm_up_bytes"] / 1e6
        rows.append(Target(what, "RSS growth after the first 10 ≤ 50 MB", f"{g:+.1f} MB over {soaked['requests']} requests", g <= 50))
    rows.append(Target("GPU: 512 float16", "≤ 1 GB VRAM, ≤ 25 ms per face (H200)", "no GPU machine was lent for this run", None))
    return rows


def forward_table(forward: list[dict]) -> str:
    """Markdown: seconds per face per size and path, against plain eager."""
    lines = ["| size | path | median s per face | × plain eager | max abs diff | PSNR dB | peak RSS (one forward) |", "|---|---|---|---|---|---|---|"]
    for r in forward:
        rss = f"{r['peak_rss'] / 1e6:.0f} MB" if "peak_rss" in r else "n/a"
        lines.append(
            f"| {r['size']} | {r['path']} | {r['median_s']:.3f} | {r['ratio']:.2f}× | {r['max_abs_dev']:.1e} | {r['psnr_db']:.1f} | {rss} |"
        )
    return "\n".join(lines)


def format_report(rows: list[Target], forward: list[dict], request: list[dict], command: str, machine: str) -> str:
    """The README block: targets, then the per-face and whole-request tables they come from."""
    mark = {True: "yes", False: "**no**", None: "–"}
    lines = ["| what | target | measured here | met |", "|---|---|---|---|"]
    lines += [f"| {t.what} | {t.target} | {t.measured} | {mark[t.met]} |" for t in rows]
    lines += [
        "",
        f"Measured on {machine}, {time.strftime('%Y-%m-%d')}, with random weights of the exact architectures "
        "(time and memory do not depend on the values). Generated by "
        f"`{command}`.",
        "",
        "Per face, the generator alone (`plain` is the official generic up-fir-dn in eager float32):",
        "",
        forward_table(forward),
        "",
        "Whole request, 4000×3000 JPEG with one face, per mode (`Restorer.__call__` on the file):",
        "",
        bench_request.format_table(request),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per path / mode after a warm-up (median reported)")
    ap.add_argument("--soak", action="store_true", help="also run 200 sequential requests (benchmarks/soak.py)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 256 only, 2 runs, low mode, no cold start")
    ap.add_argument("--readme", action="store_true", help="write the targets table into README.md")
    ap.add_argument("--json", type=Path, help="also write everything measured here")
    args = ap.parse_args(argv)
    command = "python benchmarks/bench.py" + "".join(" " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))

    with tempfile.TemporaryDirectory(prefix="gpen-bench-all-") as tmp:
        fj, rj = Path(tmp) / "forward.json", Path(tmp) / "request.json"
        runs = str(2 if args.quick else args.runs)
        sizes = ["256"] if args.quick else ["256", "512"]
        print("## Per-face forward\n", flush=True)
        bench_forward.main(["--sizes", *sizes, "--runs", runs, "--paths", "plain", "fast", "fast-bf16", "--json", str(fj)])
        print("\n## Whole request, 4000×3000 JPEG with one face\n", flush=True)
        bench_request.main(["--runs", runs, *(["--modes", "low"] if args.quick else []), "--json", str(rj)])
        forward = json.loads(fj.read_text())
        request = json.loads(rj.read_text())
    cold = None
    if not args.quick:
        print("\n## Cold start\n", flush=True)
        cold = cold_start()
        print(json.dumps(cold))
    soaked = soak(200) if args.soak else None

    rows = targets(forward["results"], request, cold, soaked)
    table = format_report(rows, forward["results"], request, command, forward["machine"].split("; load average")[0])
    print("\n## Targets\n")
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"forward": forward, "request": request, "cold_start": cold, "soak": soaked}, indent=1))
    if args.readme:
        replace_block("perf-table", table)
        print(f"\nwrote the table into {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
