"""The generated tables of the docs: docs/performance.md's perf-table (every speed and memory target,
measured on this machine), the README's modes-table and tasks-table (``--modes-table``), the soak
(``--soak``), and the writer every table script here uses for its block (``replace_block``).

    .venv/bin/python benchmarks/bench.py                # forward paths, whole requests, cold start
    .venv/bin/python benchmarks/bench.py --soak --readme  # + 200 requests (the soak); rewrite docs/performance.md's perf-table block
    .venv/bin/python benchmarks/bench.py --record       # also store torch-vs-OpenVINO speeds for `--backend auto`
    .venv/bin/python benchmarks/bench.py --quick        # smoke run: 256 only, 2 runs, low mode, no cold start
    .venv/bin/python benchmarks/bench.py --refusals     # only: how fast bad input and missing weights are refused
    .venv/bin/python benchmarks/bench.py --soak-only [--soak-n 60] [--json soak.json]   # only the soak
    .venv/bin/python benchmarks/bench.py --modes-table --synthetic [--readme]  # only: the README's modes and tasks tables
    .venv/bin/python benchmarks/bench.py --modes-table --from profile.json     # the same from a saved / shared profile

About 10 minutes on a quiet 2-core machine (+4 with ``--soak``), the first OpenVINO
conversions included; run it on a quiet machine: every figure is a wall-clock median.

It runs the measurements that have their own scripts, each in fresh processes:

- ``bench_forward.py``: seconds per face of the GPEN forward for 256 and 512 px, per
  path (``plain`` = the official generic up-fir-dn in eager float32, the reference the
  ratios are taken against; ``fast`` = the torch exact path; ``fast-bf16`` where the CPU
  has native bfloat16; ``ov`` / ``ov-bf16`` = the OpenVINO backend), medians over
  ``--runs`` after a warm-up, interleaved in one process so load drifts hit every path
  alike, with the deviation from plain eager;
- ``bench_request.py``: the whole request (decode, detect, align, restore, paste,
  encode) on a 4000×3000 JPEG with one face, per memory mode, with the engine's meter,
  twice: as a **fresh install** gets it (``--fresh``: a new models folder, no hardware
  check, no speed record, so ``auto`` follows the per-CPU-kind defaults of
  ``gpen_core/runtimes/openvino/defaults.py``; the conversions ``python -m gpen_core
  download`` does ahead are done first, in their own process), and **after the hardware
  check** (each mode on the backend that was faster for its face size and dtype in the
  forward table: what ``auto`` picks once the speeds are recorded); the generator is a
  checkpoint file on disk (loaded memory-mapped, as users have it);
- ``bench_request.py --one-shot --fresh`` for the modes with a whole-request target: one
  photo per cold process, as ``python -m gpen_core restore photo.jpg`` runs it (each network
  dropped after its stage), three processes each; the memory targets are judged on the
  highest of their lifetime peaks, beside the peak of a process that keeps its networks;
- the cold start: ``python app.py`` launched with a GPEN-BFR-512 file in the models
  folder, then one restore through ``gradio_client``, timed from the launch;
- with ``--soak``: the soak (200 requests, RSS growth after the first 10; see ``soak_run``), in a
  fresh process (``--soak-only``).

Generator weights are random (the exact architectures: time and memory do not depend
on the values). It prints each part's own table, then one table of targets and what
was measured (the CPU model and its features in the caption: the targets differ per
CPU class, AMX / AVX-512 BF16 / neither), judged on the fresh install with the checked
figure beside, and a per-mode table of both, which is what ``--readme`` writes into docs/performance.md.

``--modes-table`` runs :func:`gpen_core.hwcheck.runner.run_profile` (or loads a JSON written by
``python -m gpen_core profile --json PATH`` or the models folder's ``profile.json``) and prints
markdown: one row per mode with what it trades, its peaks above the idle process over the standard
workloads, seconds per face, and under the table the machine and the command line that made it; then
a second table, GPEN's other tasks (colorize, inpaint, seg2face) per mode (the README's ``tasks-table``
block). Measuring here does not overwrite the models folder's ``profile.json`` unless ``--save`` is given.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_forward  # noqa: E402
import bench_request  # noqa: E402
from gpen_core.modes import MODES  # noqa: E402
from gpen_core.platform.meter import current_rss, format_bytes  # noqa: E402

COLD_START_EXAMPLE = ROOT / "examples" / "astronaut_blur_noise.jpg"


# ------------------------------------------------------------ the docs' generated blocks
# The text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``. Each block lives in one file;
# ``BLOCKS`` says which, so a generator names the block and never a path. The README keeps what a
# user needs first (the modes table); the measured detail lives under ``docs/``.

README = ROOT / "README.md"
DOCS = ROOT / "docs"

BLOCKS: dict[str, Path] = {
    "modes-table": README,  # bench.py --modes-table
    "tasks-table": README,  # bench.py --modes-table (GPEN's other tasks, under the modes table)
    "perf-table": DOCS / "performance.md",  # bench.py (and its GPU row: benchmarks/gpu_check.py)
    "advice-table": DOCS / "advice.md",  # benchmarks/advice.py
    "upscale-table": DOCS / "upscaling.md",  # benchmarks/bench_upscale.py
}


def block_path(name: str) -> Path:
    """The file that holds block ``name``."""
    return BLOCKS[name]


def require_blocks(names: list[str]) -> None:
    """SystemExit naming every block of ``names`` whose markers its file lacks (check before writing any)."""
    missing = [f"<!-- {n}:start --> … <!-- {n}:end --> in {block_path(n)}" for n in names
               if not all(f"<!-- {n}:{e} -->" in block_path(n).read_text(encoding="utf-8") for e in ("start", "end"))]
    if missing:
        raise SystemExit("add these markers first: " + "; ".join(missing))


def replace_block(name: str, body: str, path: Path | None = None) -> Path:
    """Put ``body`` between the ``name`` markers of ``path`` (default: the block's file); return that file.

    SystemExit when the markers are missing.
    """
    path = path or block_path(name)
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} block to replace")
    path.write_text(re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: f"{start}\n{body}\n{end}", text, flags=re.S),
                    encoding="utf-8")
    return path


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
# Many sequential restores through one engine: does resident memory keep growing? Its figures: the
# soak row of the perf-table (``--soak``); alone: ``--soak-only``.
#
# A server keeps one :class:`~gpen_core.restorer.Restorer` for its whole life, so a
# small leak per request becomes an out-of-memory after a day. The soak makes the
# same kind of setup the tests use, by itself, in a temporary models folder:
#
# - the mode's generator with random weights of its exact architecture, saved under
#   the registry's file name (so it is resolved and loaded like the real file);
# - the real RetinaFace detector from ``../shared/weights`` when it is there (the
#   example photo's face is then really detected). Without it the engine runs with
#   ``synthetic_weights=True`` (the detector network still runs, with random weights)
#   and a fixed face box is given with ``detections=``.
#
# The folder is written by a child process, so the soak process holds only what the
# engine holds (making 75 MB of random weights leaves ~250 MB of allocator pools behind).
#
# It then restores the same photo (a file path: decode, detect, restore, paste,
# encode every time) ``--soak-n`` times, one after another in one worker thread, as the app's
# queue runs them (``--soak-main-thread``: in the main thread, as the CLI does; glibc and
# OpenMP keep per-thread state, so the two can differ), records the process's RSS after each request and
# the meter's peak during it, and prints a small table and the growth after the
# warm-up: the highest RSS of the last 10 requests minus the highest of the first 10
# (the first requests fill caches and allocator pools; the target is ≤ 50 MB). Highest
# of a window, not one request's value: glibc keeps or returns a request's ~50 MB of
# buffers from one request to the next, so RSS after a single request flips between two
# levels; a leak raises both. The least-squares trend after request 10 is printed too.
# Exit status 1 when the growth is over ``--soak-target-mb``.

SHARED_WEIGHTS = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared")) / "weights"
SOAK_INPUT = ROOT / "examples" / "astronaut_low_resolution.jpg"
WARM_UP = 10  # growth is measured from the end of this request on


def soak_models_dir(folder: Path, mode_name: str) -> tuple[bool, str]:
    """Fill ``folder`` for ``mode_name``: random generator, real detector if ../shared has it.

    Returns (real detector present, one line describing the setup).
    """
    import torch

    from gpen_core.options import DETECTOR_WEIGHTS
    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.weights.lookup import REGISTRY

    mode = MODES[mode_name]
    gen = REGISTRY[mode.model]
    torch.save(random_state_dict(gen.arch, seed=0), folder / gen.filename)
    det = REGISTRY[DETECTOR_WEIGHTS[mode.detector]]
    source = SHARED_WEIGHTS / det.filename
    if source.is_file():
        (folder / det.filename).symlink_to(source)
        return True, f"random-weights {mode.model} + real {mode.detector} detector ({source})"
    return False, f"random-weights {mode.model} + synthetic {mode.detector} detector with a given face box ({source} not found)"


def central_face(path: Path) -> list[Any]:
    """One template detection on the middle half of the photo (cost is what matters, not the face)."""
    from gpen_core.images.decode import decode_image
    from gpen_core.hwcheck.workloads import template_detection

    w, h = decode_image(path).size
    side = min(w, h) // 2
    x0, y0 = (w - side) // 2, (h - side) // 2
    return [template_detection((x0, y0, x0 + side, y0 + side))]


def soak_run(n: int, mode_name: str, image: Path, *, main_thread: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run ``n`` sequential restores of ``image`` in a fresh engine; the per-request figures and a summary.

    Requests run one at a time in a single worker thread (``main_thread``: in this thread).
    """
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    with tempfile.TemporaryDirectory(prefix="gpen-soak-") as tmp:
        folder = Path(tmp)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            real_detector, setup = pool.apply(soak_models_dir, (folder, mode_name))
        restorer = Restorer(models_dir=folder, device="cpu", synthetic_weights=not real_detector)
        given = None if real_detector else central_face(image)
        options = RestoreOptions(mode=mode_name)
        rss_start = current_rss()
        rows: list[dict[str, Any]] = []
        worker = ThreadPoolExecutor(1, thread_name_prefix="soak-worker")
        t_all = time.perf_counter()
        for i in range(1, n + 1):
            if main_thread:
                res = restorer(str(image), options, detections=given)
            else:
                res = worker.submit(restorer, str(image), options, detections=given).result()
            rows.append({
                "request": i,
                "rss_after_bytes": current_rss(),
                "peak_rss_bytes": res.peaks.rss_bytes,
                "baseline_rss_bytes": res.peaks.baseline_rss_bytes,
                "total_s": round(res.timings.total_s, 4),
                "faces": len(res.faces),
            })  # fmt: skip
            if progress:
                print(f"\r{i}/{n} RSS {format_bytes(rows[-1]['rss_after_bytes'])}", end="", file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
        wall = time.perf_counter() - t_all
        worker.shutdown()
    return {"setup": setup, "mode": mode_name, "input": str(image), "n": n, "rss_start_bytes": rss_start,
            "thread": "main" if main_thread else "one worker thread",
            "wall_s": round(wall, 2), "requests": rows, "summary": soak_summary(rows)}  # fmt: skip


def soak_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth after the warm-up (highest RSS of the last 10 minus highest of the first 10, and the
    worst single point after the warm-up), plus the per-request trend."""
    rss = [r["rss_after_bytes"] for r in rows]
    ref = max(rss[:WARM_UP])
    after = rss[WARM_UP:] or rss[-1:]
    # Least-squares slope over the requests after the warm-up: a leak shows as a steady climb.
    xs = list(range(len(after)))
    mx, my = sum(xs) / len(xs), sum(after) / len(after)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, after)) / var if var else 0.0
    totals = sorted(r["total_s"] for r in rows)
    return {
        "rss_after_first_bytes": rss[0],
        "rss_max_first_10_bytes": ref,
        "rss_max_last_10_bytes": max(rss[-WARM_UP:]),
        "rss_end_bytes": rss[-1],
        "growth_after_warm_up_bytes": max(rss[-WARM_UP:]) - ref,
        "worst_growth_after_warm_up_bytes": max(after) - ref,
        "slope_bytes_per_request": round(slope),
        "peak_rss_max_bytes": max(r["peak_rss_bytes"] for r in rows),
        "median_total_s": totals[len(totals) // 2],
        "faces": sorted({r["faces"] for r in rows}),
    }


def soak_table(rows: list[dict[str, Any]], lines: int = 10) -> str:
    """Markdown rows at request 1, 10 and evenly spaced to the end."""
    n = len(rows)
    picks = sorted({1, min(WARM_UP, n), n, *(round(1 + k * (n - 1) / (lines - 1)) for k in range(lines))})
    out = ["| request | RSS after | peak during | seconds |", "|---:|---:|---:|---:|"]
    for i in picks:
        r = rows[i - 1]
        out.append(f"| {i} | {format_bytes(r['rss_after_bytes'])} | {format_bytes(r['peak_rss_bytes'])} | {r['total_s']:.2f} |")
    return "\n".join(out)


def soak_main(args: argparse.Namespace, command: str) -> int:
    """``--soak-only``: the soak in this process, its table and verdict; exit status 1 when the growth is over the target."""
    out = soak_run(args.soak_n, args.soak_mode, args.soak_input, main_thread=args.soak_main_thread)
    s = out["summary"]
    growth = s["growth_after_warm_up_bytes"]
    ok = growth <= args.soak_target_mb * 1e6
    out |= {"command": command, "target_bytes": int(args.soak_target_mb * 1e6), "passed": ok,
            "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version(), "platform": platform.platform()}}  # fmt: skip
    print(f"Soak: {args.soak_n} requests, mode {args.soak_mode}, {out['setup']}; input {args.soak_input.name}; "
          f"{out['thread']}; {out['wall_s']:.0f} s wall, "
          f"median {s['median_total_s']:.2f} s a request, faces {s['faces']}")
    print(soak_table(out["requests"]))
    print(f"\nRSS before the first request {format_bytes(out['rss_start_bytes'])}, after it {format_bytes(s['rss_after_first_bytes'])}; "
          f"highest of requests 1-{WARM_UP} {format_bytes(s['rss_max_first_10_bytes'])}, of the last {WARM_UP} "
          f"{format_bytes(s['rss_max_last_10_bytes'])}; at the end {format_bytes(s['rss_end_bytes'])}")
    print(f"Growth after request {WARM_UP}: {growth / 1e6:+.1f} MB (worst single point {s['worst_growth_after_warm_up_bytes'] / 1e6:+.1f} MB, "
          f"trend {s['slope_bytes_per_request'] / 1e3:+.1f} kB a request); target ≤ {args.soak_target_mb:.0f} MB: {'PASS' if ok else 'FAIL'}")
    print(f"Generated by `{command}`.")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def soak(n: int) -> dict[str, float]:
    """The soak of ``n`` requests in a fresh process (``--soak-only``): its summary."""
    with tempfile.TemporaryDirectory(prefix="gpen-soak-") as tmp:
        out = Path(tmp) / "soak.json"
        proc = subprocess.run([sys.executable, __file__, "--soak-only", "--soak-n", str(n), "--json", str(out)], text=True, capture_output=True)
        print(proc.stdout)
        if not out.exists():
            raise RuntimeError(f"the soak failed: {proc.stderr[-500:]}")
        data = json.loads(out.read_text())
        return data["summary"] | {"requests": len(data["requests"])}


# ---------------------------------------------------------------------- table


def _forward_rows(forward: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["size"], r["path"]): r for r in forward}


# Per-face forward targets, per CPU class: (quality exact, balanced) × the
# official-equivalent plain eager path. A CPU without native bf16 runs balanced in float32.
# Judged on a fresh install (no hardware check, no speed record): what a new user gets.
FORWARD_TARGETS = {"amx": (4.5, 14.0), "avx512_bf16": (4.5, 8.0), "none": (3.5, 3.5)}
REQUEST_TARGETS = {"quality": (2.5, 1000), "low": (0.7, 450)}  # (seconds, MiB) of a whole 4000×3000 request
MIB = 2**20


def cpu_class() -> str:
    """"amx", "avx512_bf16" or "none": which row of the targets applies here."""
    from gpen_core.networks.plan import cpu_features

    f = cpu_features()
    if f.get("amx_bf16"):
        return "amx"
    return "avx512_bf16" if f.get("native_bf16") else "none"


def _best(f: dict, size: int, paths: tuple[str, ...]) -> dict | None:
    rows = [f[(size, p)] for p in paths if (size, p) in f]
    return min(rows, key=lambda r: r["median_s"]) if rows else None


def backend_of(path: str) -> str:
    return "openvino" if path.startswith("ov") else "torch"


def targets(forward: list[dict], request: list[dict], cold: dict | None, soaked: dict | None, cls: str = "none",
            fresh: dict[str, dict] | None = None, fresh_request: list[dict] | None = None,
            one_shot: list[dict] | None = None) -> list[Target]:
    """The targets against what this run measured (``cls``: see :func:`cpu_class`).

    Judged on the fresh install (``fresh``: :func:`fresh_install_plan`; ``fresh_request``: the
    whole requests measured with it), with what the hardware check makes of it beside; without
    them, on the faster backend of this run (what auto picks after the hardware check).

    ``one_shot`` (``bench_request.py --one-shot --fresh``: one photo per cold process on a fresh
    install, as ``python -m gpen_core restore photo.jpg`` runs it): where given, a whole-request
    row's memory is judged on the highest of those processes' lifetime peaks (the targets are
    set for a cold process), its time still on the warm request's median; the peak of a process
    that keeps its networks loaded (the app's way) stays beside it."""
    f = _forward_rows(forward)
    rows: list[Target] = []
    need_q, need_b = FORWARD_TARGETS[cls]
    label = {"amx": "with AMX", "avx512_bf16": "AVX-512 BF16, no AMX", "none": "no native bf16"}[cls]

    def fwd(size: int, paths: tuple[str, ...], mode: str, need: float, what: str, exact: bool) -> None:
        want = f"≥ {need:g}× plain eager ({label})" + (", max abs diff ≤ 1e-4" if exact else ", PSNR ≥ 40 dB")
        checked = _best(f, size, paths)
        plan = (fresh or {}).get(mode)
        judged = f.get((size, fresh_path(plan["backend"], plan["dtype"]))) if plan else checked
        if judged is None or checked is None or (size, "plain") not in f:
            rows.append(Target(what, want, "not measured", None))
            return
        plain = f[(size, "plain")]["median_s"]

        def one(r: dict) -> str:
            return f"{r['path']} ({backend_of(r['path'])}): {r['median_s']:.3f} s vs {plain:.3f} s plain: **{r['ratio']:.2f}×**"

        got = (f"fresh install: {one(judged)}; after the hardware check: {one(checked)}" if plan else one(judged))
        got += f", max abs diff {judged['max_abs_dev']:.1e}"
        ok = judged["ratio"] >= need
        if exact:
            ok = ok and judged["max_abs_dev"] <= 1e-4
        else:
            got += f", PSNR {judged['psnr_db']:.1f} dB"
            ok = ok and judged["psnr_db"] >= 40
        rows.append(Target(what, want, got, ok))

    fwd(512, ("fast", "ov"), "quality", need_q, "GPEN-BFR-512 per face, `quality` (exact float32)", True)
    bf16 = any((512, p) in f for p in ("fast-bf16", "ov-bf16"))
    if bf16:
        fwd(512, ("fast-bf16", "ov-bf16"), "balanced", need_b, "GPEN-BFR-512 per face, `balanced` (bfloat16)", False)
    else:
        fwd(512, ("fast", "ov"), "balanced", need_b, "GPEN-BFR-512 per face, `balanced` (float32 here: no native bf16)", False)
    fwd(256, ("fast", "ov"), "low", 2.5, "GPEN-BFR-256 per face, `low` (exact float32)", True)
    req = {r["mode"]: r for r in request}
    fresh_req = {r["mode"]: r for r in fresh_request or []}
    for mode, (secs, mib) in REQUEST_TARGETS.items():
        what = f"whole request, 4000×3000 JPEG, one face, `{mode}`"
        want = f"≤ {secs:g} s and ≤ {mib} MiB process peak"
        r = fresh_req.get(mode) if fresh_request is not None else req.get(mode)
        if r is None:
            rows.append(Target(what, want, "not measured", None))
            continue
        t = statistics.median(x["total_s"] for x in r["rows"])
        rss = statistics.median(x["rss"] for x in r["rows"])
        shot = {x["mode"]: x for x in one_shot or []}.get(mode)
        got = f"{'fresh install: ' if fresh_request is not None else ''}{t:.2f} s"
        if shot is not None:
            peaks = shot.get("peaks", [shot["peak"]])
            judged_rss = max(peaks)
            got += (f" (warm request); one photo per cold process (the CLI): **{judged_rss / MIB:.0f} MiB** peak, the highest of "
                    f"{len(peaks)} processes ({', '.join(f'{p / MIB:.0f}' for p in peaks)}), {shot['total_s']:.2f} s with loading; "
                    f"networks kept loaded (the app): {rss / MIB:.0f} MiB")
        else:
            judged_rss = rss
            got += f", {rss / MIB:.0f} MiB peak"
        got += f"; of it {r['import_rss'] / MIB:.0f} MiB is the imports alone ({r.get('backend', 'torch')} {r['dtype']}, {r['detector']})"
        checked = req.get(mode)
        if fresh_request is not None and checked is not None:
            got += (f"; after the hardware check: {statistics.median(x['total_s'] for x in checked['rows']):.2f} s, "
                    f"{statistics.median(x['rss'] for x in checked['rows']) / MIB:.0f} MiB ({checked.get('backend', 'torch')})")
        rows.append(Target(what, want, got, t <= secs and judged_rss <= mib * MIB))
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
    # Measured by benchmarks/gpu_check.py --readme on a GPU machine (it rewrites this row).
    rows.append(Target("GPU: 512 float16", "≤ 1 GB VRAM, ≤ 25 ms per face (H200)", "not measured yet (no GPU was lent; run `benchmarks/gpu_check.py --readme` on one)", None))
    return rows


def fresh_path(backend: str, dtype: str) -> str:
    """The forward table's path for a generator run on ``backend`` in ``dtype``."""
    return ("ov" if backend == "openvino" else "fast") + ("-bf16" if dtype == "bfloat16" else "")


def fresh_install_plan(modes: list[str] | None = None) -> dict[str, dict]:
    """{mode: {"backend", "dtype", "why"}}: what ``--backend auto`` runs each mode's generator on
    in a fresh install (an empty models folder: no hardware check, no speed record, so the
    per-CPU-kind defaults of :mod:`gpen_core.runtimes.openvino.defaults` decide)."""
    from gpen_core.modes import MODES
    from gpen_core.networks.plan import choose_plan
    from gpen_core.runtimes.openvino.generator import choose_mode_backend
    from gpen_core.weights.lookup import REGISTRY

    saved = os.environ.pop("GPEN_OPENVINO_DEFAULTS", None)  # a fresh install has them on
    try:
        with tempfile.TemporaryDirectory(prefix="gpen-fresh-") as empty:
            plan = {}
            for name, mode in MODES.items():
                if modes is not None and name not in modes:
                    continue
                dtype = choose_plan("cpu", mode.cpu_dtype)[0].dtype
                choice = choose_mode_backend(mode, "auto", REGISTRY[mode.model].arch.size, dtype, models_dir=empty)
                plan[name] = {"backend": choice.runtime, "dtype": dtype, "why": choice.why}
            return plan
    finally:
        if saved is not None:
            os.environ["GPEN_OPENVINO_DEFAULTS"] = saved


def out_of_box_table(forward: list[dict], fresh: dict[str, dict], checked: dict[str, str],
                     fresh_request: list[dict], request: list[dict]) -> str:
    """Markdown, one row per mode: per face and whole request on a fresh install, and after the hardware check."""
    from gpen_core.modes import MODES
    from gpen_core.weights.lookup import REGISTRY

    f = _forward_rows(forward)
    fr, cr = {r["mode"]: r for r in fresh_request}, {r["mode"]: r for r in request}

    def face(size: int, path: str) -> str:
        r = f.get((size, path))
        return f"{r['median_s']:.3f} s ({r['ratio']:.1f}×)" if r else "–"

    def whole(r: dict | None) -> str:
        if r is None:
            return "– | –"
        return (f"{statistics.median(x['total_s'] for x in r['rows']):.2f} s | "
                f"{statistics.median(x['rss'] for x in r['rows']) / MIB:.0f} MiB")

    lines = ["| mode | fresh install: generator on | per face (× plain) | whole request | peak | "
             "after the hardware check: generator on | per face (× plain) | whole request | peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode, plan in fresh.items():
        size = REGISTRY[MODES[mode].model].arch.size
        dtype = plan["dtype"]
        back = checked.get(mode, "torch")
        lines.append(f"| {mode} | {plan['backend']} {dtype} ({plan['why']}) | {face(size, fresh_path(plan['backend'], dtype))} | "
                     f"{whole(fr.get(mode))} | {back} {dtype} | {face(size, fresh_path(back, dtype))} | {whole(cr.get(mode))} |")
    return "\n".join(lines)


def request_backends(forward: list[dict], modes: list[str] | None = None) -> dict[str, str]:
    """{mode: "torch" | "openvino"}: per mode, the backend whose forward was faster in this run
    for that mode's face size and dtype (what ``--backend auto`` picks once the speeds are recorded;
    torch for a mode without :attr:`~gpen_core.modes.MemoryMode.auto_openvino`)."""
    from gpen_core.modes import MODES
    from gpen_core.weights.lookup import REGISTRY

    f = _forward_rows(forward)
    plan = {}
    for name, mode in MODES.items():
        if modes is not None and name not in modes:
            continue
        size = REGISTRY[mode.model].arch.size
        pairs = (("fast-bf16", "ov-bf16"), ("fast", "ov")) if mode.cpu_dtype != "float32" else (("fast", "ov"),)
        pair = next((p for p in pairs if (size, p[0]) in f), None)
        best = _best(f, size, pair) if pair else None
        plan[name] = backend_of(best["path"]) if best and mode.auto_openvino else "torch"
    return plan


def forward_table(forward: list[dict]) -> str:
    """Markdown: seconds per face per size and path, against plain eager."""
    lines = ["| size | path | median s per face | × plain eager | max abs diff | PSNR dB | peak RSS (one forward) |", "|---|---|---|---|---|---|---|"]
    for r in forward:
        rss = f"{r['peak_rss'] / 1e6:.0f} MB" if "peak_rss" in r else "n/a"
        lines.append(
            f"| {r['size']} | {r['path']} | {r['median_s']:.3f} | {r['ratio']:.2f}× | {r['max_abs_dev']:.1e} | {r['psnr_db']:.1f} | {rss} |"
        )
    return "\n".join(lines)


def format_report(rows: list[Target], forward: list[dict], request: list[dict], command: str, machine: str,
                  fresh: dict[str, dict] | None = None, fresh_request: list[dict] | None = None,
                  checked: dict[str, str] | None = None) -> str:
    """The docs/performance.md block: targets, the fresh-install-vs-hardware-check table, then the
    per-face and whole-request tables they come from."""
    from gpen_core.runtimes.openvino.defaults import KIND_NAMES, cpu_kind

    kind = cpu_kind()
    mark = {True: "yes", False: "**no**", None: "–"}
    lines = ["| what | target | measured here | met |", "|---|---|---|---|"]
    lines += [f"| {t.what} | {t.target} | {t.measured} | {mark[t.met]} |" for t in rows]
    lines += [
        "",
        f"Measured on {machine} ({KIND_NAMES.get(kind or '', 'a CPU kind with no recorded defaults')}), "
        f"{time.strftime('%Y-%m-%d')}, with random weights of the exact architectures "
        "(time and memory do not depend on the values). Generated by "
        f"`{command}`.",
        "",
        "Per face, the generator alone (`plain` is the official generic up-fir-dn in eager float32):",
        "",
        forward_table(forward),
        "",
        "Whole request, 4000×3000 JPEG with one face, per mode (`Restorer.__call__` on the file), after the hardware check:",
        "",
        bench_request.format_table(request),
    ]
    if fresh is not None and fresh_request is not None:
        lines[lines.index("Per face, the generator alone (`plain` is the official generic up-fir-dn in eager float32):"):0] = [
            "Out of the box (a fresh install: new models folder, no hardware check, no speed record; the conversions "
            "`python -m gpen_core download` does ahead) and after the hardware check (speed records written: each mode's "
            "generator on the backend that was faster in the per-face table below), per mode:",
            "",
            out_of_box_table(forward, fresh, checked or {}, fresh_request, request),
            "",
            "Whole request on a fresh install:",
            "",
            bench_request.format_table(fresh_request),
            "",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------- refusals (--refusals)
# How fast bad input and missing weights are refused: the timing claims the unit tests leave out.
# The unit tests check *why* each refusal is quick (decided on the header, frames counted up to a
# cap, no network touched, one request with the read timeout); how quick it is depends on the
# machine and its load, so it is measured here, on a quiet machine, with a target per row.
# Wall-clock medians; each row runs in this process after one warm-up (imports are not counted).

def _refusal_median_s(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up: imports and first-use caches are not what the row is about
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _refused(fn: Callable[[], object], *errors: type[BaseException]) -> Callable[[], None]:
    def call() -> None:
        try:
            fn()
        except errors:
            return
        raise AssertionError(f"{fn} was not refused")

    return call


def _silent_server() -> tuple[socket.socket, str]:
    """A loopback port that accepts connections (kernel backlog) and never answers."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    return srv, f"http://127.0.0.1:{srv.getsockname()[1]}"


def refusal_rows(runs: int) -> list[dict[str, object]]:
    import dataclasses

    import numpy as np

    from gpen_core.errors import InputError, WeightsError
    from gpen_core.images.decode import decode_image
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.weights import fetch
    from gpen_core.weights import lookup as weights
    from tests.hostile import CASES_BY_NAME

    rows: list[dict[str, object]] = []

    def row(what: str, target_s: float, seconds: float) -> None:
        rows.append({"what": what, "target_s": target_s, "measured_s": round(seconds, 5), "ok": seconds <= target_s})

    with tempfile.TemporaryDirectory(prefix="gpen-bench-refusals-") as tmp:
        folder = Path(tmp)
        files = {n: CASES_BY_NAME[n].make(folder) for n in ("png_bomb_50000x50000", "gif_1M_frames", "tiff_20000_pages", "jpeg_8000x6000")}
        row("PNG header declaring 50000×50000: refused", 0.05, _refusal_median_s(_refused(lambda: decode_image(files["png_bomb_50000x50000"]), InputError), runs))
        row("GIF of 1M frames: first frame decoded", 2.0, _refusal_median_s(lambda: decode_image(files["gif_1M_frames"]), runs))
        row("TIFF of 20000 pages: first page decoded", 2.0, _refusal_median_s(lambda: decode_image(files["tiff_20000_pages"]), runs))
        row("8000×6000 JPEG: full decode", 15.0, _refusal_median_s(lambda: decode_image(files["jpeg_8000x6000"]), runs))
        row("8000×6000 JPEG: decode reduced to 1024 px", 5.0, _refusal_median_s(lambda: decode_image(files["jpeg_8000x6000"], reduce_to=1024), runs))

        home = folder / "models"
        home.mkdir()
        os.environ["GPEN_HOME"] = str(home)
        os.environ["GPEN_OFFLINE"] = "1"
        row("GPEN_OFFLINE=1, weights missing: WeightsError", 1.0, _refusal_median_s(_refused(lambda: weights.resolve("GPEN-BFR-512"), WeightsError), runs))
        restorer = Restorer(device="cpu")
        photo = np.zeros((64, 64, 3), np.uint8)
        row("restore with the generator missing: WeightsError", 10.0,
            _refusal_median_s(_refused(lambda: restorer(photo, RestoreOptions(mode="low")), WeightsError), runs))

        # Downloads: a refused host, and a host that accepts and never answers (read timeout 0.5 s).
        del os.environ["GPEN_OFFLINE"]
        os.environ["MODELSCOPE_ENDPOINT"] = "http://127.0.0.1:9"
        spec = weights.REGISTRY["GPEN-BFR-512"]
        weights.REGISTRY["GPEN-BFR-512"] = dataclasses.replace(spec, urls=("http://127.0.0.1:9/GPEN-BFR-512.pth",))
        srv, url = _silent_server()
        det = weights.REGISTRY["retinaface-mobilenet0.25"]
        weights.REGISTRY["retinaface-mobilenet0.25"] = dataclasses.replace(det, urls=(f"{url}/detection_mobilenet0.25_Final.pth",))
        old_timeout = fetch.READ_TIMEOUT_S
        fetch.READ_TIMEOUT_S = 0.5
        try:
            row("every source refused: WeightsError", 5.0,
                _refusal_median_s(_refused(lambda: weights.resolve("GPEN-BFR-512", allow_download=True), WeightsError), runs))
            row("a server that never answers (0.5 s read timeout)", 5.0,
                _refusal_median_s(_refused(lambda: weights.download("retinaface-mobilenet0.25"), WeightsError), runs))
        finally:
            fetch.READ_TIMEOUT_S = old_timeout
            weights.REGISTRY["GPEN-BFR-512"], weights.REGISTRY["retinaface-mobilenet0.25"] = spec, det
            srv.close()
    return rows


def refusal_table(rows: list[dict[str, object]]) -> str:
    lines = ["| refusal | target | measured (median) | |", "|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | ≤ {r['target_s']} s | {r['measured_s']:.4f} s | {'ok' if r['ok'] else 'MISSED'} |")
    return "\n".join(lines)


# ------------------------------------------------------------ --modes-table: the README's tables


def modes_table(p: Any, command: str) -> str:
    """The README's modes table for the profile ``p``, with the command that produced it and the machine underneath."""
    from gpen_core.engine import profile_records as records
    from gpen_core.hwcheck import report

    lines = [
        "| mode | what it trades | peak RAM | peak VRAM (reserved) | seconds per face | dtype here |",
        "|---|---|---|---|---|---|",
    ]
    for name, mode in MODES.items():
        m = p.modes.get(name)
        if m is None:
            continue
        vram = "n/a" if m.peak_vram_reserved_bytes is None else format_bytes(m.peak_vram_reserved_bytes)
        spf = "n/a" if m.seconds_per_face is None else f"{m.seconds_per_face:.2f}"
        lines.append(f"| `{name}` | {mode.hint} | {format_bytes(m.peak_ram_bytes)} | {vram} | {spf} | {m.dtype} |")
    workloads = "; ".join(w["label"] for w in p.workloads)
    lines += [
        "",
        f"Peaks are above the idle process, the worst of: {workloads}. "
        f"Measured on {report.machine_line(p)}, {p.created}"
        + (f"; {records.SYNTHETIC_NOTE}" if p.synthetic else "")
        + ".",
        f"Generated by `{command}`" + (f" (profile made by `{p.command}`)" if p.command and p.command not in command else "") + ".",
    ]
    return "\n".join(lines)


def tasks_readme_table(p: Any) -> str:
    """The README's second table: GPEN's other tasks in each mode, from the same profile ("" when it has none)."""
    from gpen_core.engine import profile_records as records
    from gpen_core.hwcheck import report

    table = report.tasks_table(p, fits=False)
    if not table:
        return ""
    return "\n".join([
        table,
        "",
        "Each cell: peak above the idle process · seconds per face · dtype, a first request (loading included) of "
        "the task's workload" + (" in a fresh process" if p.isolated else "") + ", measured by the same check as the table above"
        + (f" ({records.SYNTHETIC_NOTE})" if any(t.weights == "synthetic" for t in p.tasks) else "")
        + ". `refused`: the engine has no plan for that task in that mode and says which modes to use "
        "([docs/tasks.md](docs/tasks.md)). `auto` reads these peaks for the tasks.",
    ])


def modes_table_main(args: argparse.Namespace, command: str) -> int:
    """``--modes-table``: measure (or load) a hardware profile; print, and with ``--readme`` write, the README's tables."""
    from gpen_core.engine import profile_store
    from gpen_core.hwcheck import runner

    if args.source:
        p = profile_store.load_json(args.source, device=args.device)
    else:
        p = runner.run_profile(
            modes=args.modes,
            models_dir=args.models_dir,
            progress=lambda f, d: print(f"\r[{100 * f:5.1f}%] {d[:90]:<90}", end="\n" if f >= 1 else "", file=sys.stderr, flush=True),
            synthetic=True if args.synthetic else None,
            device=args.device,
            save=args.save,
            command=command,
            tasks=False if args.no_tasks else None,
        )
    table = modes_table(p, command)
    tasks = tasks_readme_table(p)
    print(table + (f"\n\n{tasks}" if tasks else ""))
    if args.readme:
        require_blocks(["modes-table", "tasks-table"] if tasks else ["modes-table"])  # both or neither
        replace_block("modes-table", table)
        if tasks:
            replace_block("tasks-table", tasks)
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per path / mode after a warm-up (median reported)")
    ap.add_argument("--soak", action="store_true", help="also run --soak-n sequential requests (the soak) in a fresh process")
    ap.add_argument("--quick", action="store_true", help="smoke run: 256 only, 2 runs, low mode, no cold start")
    ap.add_argument("--readme", action="store_true", help="write the table into its block: docs/performance.md's perf-table "
                    "(with --modes-table: the README's modes-table and tasks-table)")
    ap.add_argument("--json", type=Path, help="also write everything measured here")
    ap.add_argument("--record", action="store_true", help="store this CPU's torch-vs-OpenVINO speeds in the models folder (used by --backend auto)")
    ap.add_argument("--refusals", action="store_true", help="only how fast bad input and missing weights are refused: "
                    "a table, a target per row (exit 1 when one misses); --runs defaults to 3 here")
    soak_args = ap.add_argument_group("the soak", "many sequential restores through one engine: does RSS keep growing?")
    soak_args.add_argument("--soak-only", action="store_true", help="only the soak, in this process (exit 1 when the growth is over the target)")
    soak_args.add_argument("--soak-n", type=int, default=200, help="number of sequential requests (default 200)")
    soak_args.add_argument("--soak-mode", default="low", choices=tuple(MODES), help="memory mode (default low)")
    soak_args.add_argument("--soak-input", type=Path, default=SOAK_INPUT, help="photo restored every time (default: the smallest example)")
    soak_args.add_argument("--soak-main-thread", action="store_true", help="run the requests in the main thread (default: one worker thread, as the app)")
    soak_args.add_argument("--soak-target-mb", type=float, default=50.0, help="allowed RSS growth after request 10, MB (default 50)")
    prof = ap.add_argument_group("--modes-table", "the README's memory-modes table (and GPEN's other tasks) from a hardware profile")
    prof.add_argument("--modes-table", action="store_true", help="only these tables (--readme: write them into README.md)")
    prof.add_argument("--from", dest="source", metavar="PATH", help="load this profile JSON instead of measuring")
    prof.add_argument("--modes", nargs="+", choices=tuple(MODES), help="modes to measure (default: all)")
    prof.add_argument("--synthetic", action="store_true", help="random weights even when real ones are present")
    prof.add_argument("--models-dir", help="models folder (default: $GPEN_HOME or ~/.cache/gpen)")
    prof.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    prof.add_argument("--save", action="store_true", help="also save the measured profile for `auto`")
    prof.add_argument("--no-tasks", action="store_true", help="skip GPEN's other tasks (colorize, inpaint, seg2face)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    command = "python benchmarks/bench.py" + "".join(" " + shlex.quote(a) for a in given)
    if args.refusals:
        rows = refusal_rows(args.runs if "--runs" in given else 3)
        print(refusal_table(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return 0 if all(r["ok"] for r in rows) else 1
    if args.soak_only:
        if args.soak_n < WARM_UP + 1:
            ap.error(f"--soak-n must be more than the {WARM_UP} warm-up requests")
        return soak_main(args, command)
    if args.modes_table:
        return modes_table_main(args, command)
    return perf_main(args, command)


def perf_main(args: argparse.Namespace, command: str) -> int:
    """The perf-table: forward paths, whole requests (fresh install and after the check), cold start, the soak."""
    with tempfile.TemporaryDirectory(prefix="gpen-bench-all-") as tmp:
        fj = Path(tmp) / "forward.json"
        runs = str(2 if args.quick else args.runs)
        sizes = ["256"] if args.quick else ["256", "512"]
        print("## Per-face forward\n", flush=True)
        paths = ["plain", "fast", "fast-bf16", "ov", "ov-bf16"]
        bench_forward.main(["--sizes", *sizes, "--runs", runs, "--paths", *paths, "--json", str(fj), *(["--record"] if args.record else [])])
        forward = json.loads(fj.read_text())
        modes = ["low"] if args.quick else None
        fresh = fresh_install_plan(modes)
        print("\n## Whole request, 4000×3000 JPEG with one face, fresh install\n", flush=True)
        print("generator per mode with auto and no speed record: " + ", ".join(f"{m} {p['backend']} {p['dtype']} ({p['why']})"
                                                                             for m, p in fresh.items()))
        fj_req = Path(tmp) / "request-fresh.json"
        bench_request.main(["--runs", runs, "--modes", *fresh, "--fresh", "--json", str(fj_req)])
        fresh_request = json.loads(fj_req.read_text()) if fj_req.exists() else []
        print("\n## One photo per cold process (the CLI's way), fresh install\n", flush=True)
        fj_shot = Path(tmp) / "request-one-shot.json"
        shot_modes = [m for m in REQUEST_TARGETS if m in fresh]
        bench_request.main(["--runs", "3", "--modes", *shot_modes, "--one-shot", "--fresh", "--json", str(fj_shot)])
        one_shot = json.loads(fj_shot.read_text()) if fj_shot.exists() else []
        plan = request_backends(forward["results"], modes)
        print("\n## Whole request, 4000×3000 JPEG with one face, after the hardware check\n", flush=True)
        print("backend per mode, the faster one in the forward table above: " + ", ".join(f"{m} {b}" for m, b in plan.items()))
        request = []
        for backend in dict.fromkeys(plan.values()):
            rj = Path(tmp) / f"request-{backend}.json"
            group = [m for m, b in plan.items() if b == backend]
            bench_request.main(["--runs", runs, "--modes", *group, "--backend", backend, "--json", str(rj)])
            request += json.loads(rj.read_text()) if rj.exists() else []
        order = list(plan)
        request.sort(key=lambda r: order.index(r["mode"]))
    cold = None
    if not args.quick:
        print("\n## Cold start\n", flush=True)
        cold = cold_start()
        print(json.dumps(cold))
    soaked = soak(args.soak_n) if args.soak else None

    rows = targets(forward["results"], request, cold, soaked, cpu_class(), fresh, fresh_request, one_shot)
    table = format_report(rows, forward["results"], request, command, forward["machine"].split("; load average")[0],
                          fresh, fresh_request, plan)
    print("\n## Targets\n")
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"forward": forward, "fresh": fresh, "fresh_request": fresh_request, "request": request,
                                         "one_shot": one_shot, "cold_start": cold, "soak": soaked}, indent=1))
    if args.readme:
        written = replace_block("perf-table", table)
        print(f"\nwrote the table into {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
