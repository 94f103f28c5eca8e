"""A lighter mode after a heavier one in one process, against a process that ran only the lighter one.

    .venv/bin/python benchmarks/mode_switch.py                          # balanced then low, torch, 2 runs each
    .venv/bin/python benchmarks/mode_switch.py --backend auto           # as the app picks (OpenVINO where measured faster)
    .venv/bin/python benchmarks/mode_switch.py --thread worker --runs 3 # each request in one worker thread, as the app's queue

Each run is a fresh child process with generated checkpoints of the released architectures
(``synthetic_weights``) and the real RetinaFace mobilenet0.25 from ``../shared/weights`` when it
is there, restoring ``examples/astronaut_low_resolution.jpg``. Per request it prints the meter's
peak and baseline, and where the process stood just before the request: resident anonymous and
file-backed pages (``/proc/self/status``), and glibc's heap in use, free and mapped (``mallinfo2``).
The lighter mode's peak minus the fresh process's is what the heavier mode still costs it
(``tests/test_lighter_mode_release.py`` holds it under 50 MB; docs/performance.md has the figures).
With ``--backend auto`` or ``openvino`` a first, unmeasured process converts the networks (set
``GPEN_HOME`` to a folder kept between runs to convert once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "examples" / "astronaut_low_resolution.jpg"
DETECTOR = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared")) / "weights" / "detection_mobilenet0.25_Final.pth"

CHILD = r"""
import concurrent.futures, ctypes, json, re, sys
import torch
torch.set_num_threads(1)
from gpen_core.options import RestoreOptions
from gpen_core.restorer import Restorer

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info

def where() -> dict:
    text = open("/proc/self/status").read()
    kb = lambda key: int(re.search(key + r":\s+(\d+)", text).group(1)) >> 10
    m = libc.mallinfo2()
    return {"anon": kb("RssAnon"), "file": kb("RssFile"), "heap_used": m.uordblks >> 20, "heap_free": m.fordblks >> 20,
            "mapped": m.hblkhd >> 20}

models, photo, modes, backend, thread = sys.argv[1:6]
r = Restorer(models_dir=models, device="cpu", synthetic_weights=True)
pool = concurrent.futures.ThreadPoolExecutor(1)
for mode in modes.split(","):
    before = where()
    call = lambda: r(photo, RestoreOptions(mode=mode, backend=backend))
    res = pool.submit(call).result() if thread == "worker" else call()
    print(json.dumps({"mode": mode, "peak": res.peaks.rss_bytes >> 20, "baseline": res.peaks.baseline_rss_bytes >> 20,
                      "before": before, "after": where(), "released": res.released}), flush=True)
"""


def run(models: Path, modes: str, backend: str, thread: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(models), str(PHOTO), modes, backend, thread],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "GPEN_OFFLINE": "1"})
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="balanced,low", help="the requests of one process, in order (default: balanced,low)")
    ap.add_argument("--backend", default="torch", choices=["torch", "auto", "openvino"])
    ap.add_argument("--thread", default="main", choices=["main", "worker"])
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    last = args.modes.split(",")[-1]
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(os.environ.get("GPEN_HOME") or tmp)
        if DETECTOR.is_file() and not (models / DETECTOR.name).exists():
            (models / DETECTOR.name).symlink_to(DETECTOR)
        if args.backend != "torch":  # converts to OpenVINO once, so that no measured run converts
            run(models, args.modes, args.backend, args.thread)
        print(f"{args.modes} against a fresh {last}; backend {args.backend}, {args.thread} thread; MiB")
        for i in range(args.runs):
            fresh = run(models, last, args.backend, args.thread)[-1]
            rows = run(models, args.modes, args.backend, args.thread)
            for row in rows:
                print(f"run {i + 1} {row['mode']:>10}: peak {row['peak']:5d}  baseline {row['baseline']:5d}  "
                      f"before it {row['before']}  released {row['released']}")
            print(f"run {i + 1} fresh {last:>4}: peak {fresh['peak']:5d}  baseline {fresh['baseline']:5d}  before it {fresh['before']}")
            print(f"run {i + 1} {last} after {args.modes}: {rows[-1]['peak'] - fresh['peak']:+d} MiB peak, "
                  f"{rows[-1]['baseline'] - fresh['baseline']:+d} MiB baseline")


if __name__ == "__main__":
    main()
