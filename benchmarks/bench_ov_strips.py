"""The OpenVINO generator with its full-size level in strips, against the whole level (revision 2).

    .venv/bin/python benchmarks/bench_ov_strips.py --sizes 512 256 --strips 1 2 4 8 --runs 5

Each variant is :func:`gpen_core.runtimes.openvino.export.exportable` with ``strips=N``,
converted as the engine converts (:func:`gpen_core.runtimes.openvino.generator.to_openvino`),
against ``rev2``: the graph of revision 2 (the whole level, ``strips=1``, and ToRGB's sum with
the level's conv first) converted as revision 2 did (``openvino.convert_model`` on the module);
``--strips 1`` adds the whole level with this revision's ToRGB order. Synthetic weights of the real architecture
(:mod:`gpen_core.networks.synthetic`, seed 0). Three phases, each variant in its own fresh
process where memory is measured:

1. convert: ``openvino.convert_model`` + save (float32 IR) into a temporary folder; seconds (wall, CPU) and
   the converting process's peak RSS (VmHWM), whole and above the process before the model
   was built. The plain torch model's output on a fixed input is kept as the reference.
2. memory: compile (the engine's settings: LATENCY hint, the precision, OpenVINO's default
   threads), drop the mapped IR pages as the engine does, then two faces through
   :meth:`OVForward.one` (the engine's call: infer, copy, ``release_memory``, ``malloc_trim``),
   VmHWM reset (``echo 5 > /proc/self/clear_refs``) before each: the peak above the loaded
   compiled model, first and second face; max |Δ| against the torch reference.
3. time: every variant of a size and precision compiled in one process, CPU seconds per face
   (``time.process_time``: all threads), interleaved, after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
NAMES = {256: "GPEN-BFR-256", 512: "GPEN-BFR-512"}
MiB = 2**20


def _status(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", text).group(1)) * 1024


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _input(size: int):
    import numpy as np

    return np.random.default_rng(1).uniform(-1, 1, (1, 3, size, size)).astype(np.float32)


def convert(size: int, variant: str, out: Path) -> dict:
    """Child: convert one variant into ``out``; its torch reference beside (once per size)."""
    import numpy as np
    import openvino as ov
    import torch

    from gpen_core.networks.arch import ToRGB
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.runtimes.openvino.export import exportable
    from gpen_core.runtimes.openvino.generator import to_openvino
    from gpen_core.weights.lookup import REGISTRY

    arch = REGISTRY[NAMES[size]].arch
    x = _input(size)
    if variant == "reference":  # the plain torch model's output, in its own process
        with torch.no_grad():
            np.save(out / "reference.npy", random_generator(arch, seed=0)(torch.from_numpy(x)).numpy())
        return {}
    before = _status("VmRSS")
    _reset_hwm()
    t0, c0 = time.perf_counter(), time.process_time()
    model = exportable(random_generator(arch, seed=0), strips=1 if variant == "rev2" else int(variant))
    if variant == "rev2":
        for m in model.modules():
            if isinstance(m, ToRGB):
                del m.forward  # revision 2's ToRGB: the level's conv first in the sum (its plugin order)
        with torch.no_grad():
            om = ov.convert_model(model, example_input=torch.from_numpy(x), input=[(1, 3, size, size)])
    else:
        om = to_openvino(model, size)
    del model
    ov.save_model(om, out / "model.xml", compress_to_fp16=False)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"convert_s": seconds, "cpu_s": cpu, "peak": _status("VmHWM"), "above": _status("VmHWM") - before}


def memory(xml: Path, size: int, precision: str) -> dict:
    """Child: compile ``xml`` as the engine does and measure two faces."""
    import numpy as np

    from gpen_core.runtimes.openvino.base import CacheKey, drop_mapped_pages, get_core
    from gpen_core.runtimes.openvino.generator import OVForward

    compiled = get_core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision})
    drop_mapped_pages(xml.parent)
    fwd = OVForward(compiled, size, precision, CacheKey("0" * 64, "", precision, ""), load_s=0.0, convert_s=None)
    x = _input(size)
    ref = np.load(xml.parent.parent / "reference.npy")  # written by convert(size, "reference", ...)
    res: dict = {"loaded": _status("VmRSS"), "above": []}
    for _ in range(2):
        base = _status("VmRSS")
        _reset_hwm()
        y = fwd.one(x)
        res["above"].append(_status("VmHWM") - base)
    res["max_diff"] = float(np.abs(y - ref).max())
    return res


def timing(xmls: dict[str, Path], size: int, precision: str, runs: int) -> dict:
    """Child: CPU seconds per face of every variant, interleaved."""
    from gpen_core.runtimes.openvino.base import CacheKey, get_core
    from gpen_core.runtimes.openvino.generator import OVForward

    fwds = {}
    for n, xml in xmls.items():
        compiled = get_core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision})
        fwds[n] = OVForward(compiled, size, precision, CacheKey("0" * 64, "", precision, ""), load_s=0.0, convert_s=None)
    x = _input(size)
    for f in fwds.values():
        f.one(x)  # warm-up
    cpu: dict[str, list[float]] = {n: [] for n in fwds}
    for _ in range(runs):
        for n, f in fwds.items():
            p0 = time.process_time()
            f.one(x)
            cpu[n].append(time.process_time() - p0)
    return {"cpu": cpu, "load": os.getloadavg()}


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", choices=sorted(NAMES), default=[512, 256])
    ap.add_argument("--strips", type=int, nargs="+", default=[2, 4, 8], help="strip counts, each against rev2")
    ap.add_argument("--precisions", nargs="+", default=["f32", "bf16"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="keep the converted IRs here (default: a temporary folder)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = json.loads(args.child)
        if kind == "convert":
            r = convert(int(rest[0]), rest[1], Path(rest[2]))
        elif kind == "memory":
            r = memory(Path(rest[0]), int(rest[1]), rest[2])
        else:
            r = timing({k: Path(v) for k, v in json.loads(rest[0]).items()}, int(rest[1]), rest[2], int(rest[3]))
        print(json.dumps(r))
        return

    from gpen_core.platform.cpuinfo import cpu_model

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ov-strips-"))
    print(f"CPU {cpu_model()}, {os.cpu_count()} logical CPUs; IRs in {work}")
    for size in args.sizes:
        xmls: dict[str, Path] = {}
        (work / str(size)).mkdir(parents=True, exist_ok=True)
        if not (work / str(size) / "reference.npy").exists():
            _child("convert", str(size), "reference", str(work / str(size)))
        for n in ["rev2", *map(str, args.strips)]:
            d = work / str(size) / n
            d.mkdir(parents=True, exist_ok=True)
            xmls[n] = d / "model.xml"
            if not xmls[n].exists():
                c = _child("convert", str(size), str(n), str(d))
                print(f"{NAMES[size]} {n} convert {c['convert_s']:.1f} s ({c['cpu_s']:.1f} CPU s), peak {c['peak'] / MiB:.0f} MiB "
                      f"(+{c['above'] / MiB:.0f} MiB above the process before)", flush=True)
        for p in args.precisions:
            for n, xml in xmls.items():
                m = _child("memory", str(xml), str(size), p)
                a = [v / MiB for v in m["above"]]
                print(f"{NAMES[size]} {p} {n}: loaded {m['loaded'] / MiB:.0f} MiB, inference peak above it "
                      f"+{a[0]:.0f} / +{a[1]:.0f} MiB (first / second face), max|Δ| vs torch {m['max_diff']:.2g}", flush=True)
            t = _child("timing", json.dumps({k: str(v) for k, v in xmls.items()}), str(size), p, str(args.runs))
            base = statistics.median(t["cpu"]["rev2"])
            for n, v in t["cpu"].items():
                med = statistics.median(v)
                rel = f" ({med / base:.3f}x rev2)"
                print(f"{NAMES[size]} {p} {n}: CPU {med:.3f} s/face median of {len(v)} "
                      f"(min {min(v):.3f}, max {max(v):.3f}){rel}", flush=True)
            print(f"  load average during timing {t['load']}", flush=True)


if __name__ == "__main__":
    main()
