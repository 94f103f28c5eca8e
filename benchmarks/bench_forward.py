"""Per-face latency of the GPEN forward paths on the CPU, against plain eager.

Its tables: the per-face rows of docs/performance.md's perf-table (through bench.py) and the
per-CPU forward tables under "One request per process" there; ``--sizes 1024`` docs/tasks.md's
"OpenVINO at 1024 px" (the CPU s column); ``--layers`` docs/performance.md's "Where balanced's
time goes on the Intel Xeon with AMX".

    .venv/bin/python benchmarks/bench_forward.py                 # 256 and 512, 5 runs, 2 threads
    .venv/bin/python benchmarks/bench_forward.py --compile       # + torch.compile variants
    .venv/bin/python benchmarks/bench_forward.py --quick         # smoke run: 256 only, 2 runs
    .venv/bin/python benchmarks/bench_forward.py --sizes 1024 --paths fast fast-bf16 ov ov-bf16 --runs 3 --no-memory
    .venv/bin/python benchmarks/bench_forward.py --layers --sizes 512 --runs 5   # where OpenVINO's time goes, per layer

Weights are random (``gpen_core.networks.synthetic``): time and memory do not depend on
their values. 1024 px is GPEN's task architecture (GPEN-Colorization-1024 and
GPEN-Inpainting-1024 share it). The input is a real face from ../shared when present (else a smooth
synthetic one).

Per size, one fresh process builds every path and times them interleaved
(plain, fast, ..., plain, fast, ...) after one warm-up call each, so a change in
machine load hits every path alike; the ratio to plain eager comes from the same
rounds. Each path then runs alone in a fresh process for its peak RSS during one
forward (and what the forward added to it). The table gives median and min seconds
per face, the ratio, max |Δ| and PSNR against plain eager (PSNR on the raw float
outputs over GPEN's [-1, 1] range), the memory, the first call's seconds
(compile included for compiled paths), and the process's CPU seconds per call (all its
threads, median: on a shared machine the figure that compares). With OpenVINO paths the
conversion runs first in a process of its own, which reports its seconds and peak RSS
(``VmHWM``: what a first ``auto`` request on OpenVINO adds).

Paths:
  plain         our arch with the official generic FIR (``set_fir_impl(m, "native")``), eager float32: the reference
  depthwise     our arch with its default depthwise FIR, eager float32
  fast          ``gpen_core.networks.prepared.prepare`` float32 (the exact path)
  fast-bf16     the same with bfloat16 convolutions (skipped where the CPU has no native bf16 unless --bf16 force)
  fast-compile  float32 + torch.compile (--compile); first call includes the compile
  fast-bf16-compile
  ov            the OpenVINO backend (``gpen_core.runtimes.openvino.generator``), float32; converted once per run into a
                temporary cache (the conversion is reported, not timed as a call)
  ov-bf16       the same compiled for bf16 (only where OpenVINO lists BF16 for this CPU)

``--record`` also stores, for this CPU, the median seconds of fast vs ov (and fast-bf16 vs
ov-bf16) in the models folder, which is what ``--backend auto`` follows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # matmul_peak, for --layers

MODELS = {256: "GPEN-BFR-256", 512: "GPEN-BFR-512", 1024: "GPEN-Colorization-1024"}
PATHS = ("plain", "depthwise", "fast", "fast-bf16", "fast-compile", "fast-bf16-compile", "ov", "ov-bf16")
OV_CACHE_ENV = "GPEN_BENCH_OV_CACHE"  # the run's conversion cache, shared by its worker processes


# --------------------------------------------------------------------- worker


def _input(size: int):
    import numpy as np
    import torch

    from gpen_core.networks.tensors import to_tensor

    face = ROOT.parent / "shared" / "faces" / "ffhq_00000_512.png"
    if face.exists():
        from PIL import Image

        rgb = np.array(Image.open(face).convert("RGB").resize((size, size), Image.BICUBIC))
    else:  # a smooth colour gradient with a little texture
        yy, xx = np.mgrid[0:size, 0:size] / size
        rgb = np.stack([xx, yy, 0.5 + 0.3 * np.sin(12 * xx * yy)], -1)
        rgb = (np.clip(rgb, 0, 1) * 255).astype(np.uint8)
    return to_tensor(rgb, dtype=torch.float32)


def _forward(path: str, size: int):
    import torch

    from gpen_core.networks.arch import set_fir_impl
    from gpen_core.networks.prepared import prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_generator
    from gpen_core.weights.lookup import REGISTRY

    model = random_generator(REGISTRY[MODELS[size]].arch, seed=0)
    if path.startswith("ov"):
        from gpen_core.runtimes.openvino import generator as ov_backend

        cache = Path(os.environ.get(OV_CACHE_ENV) or tempfile.mkdtemp(prefix="gpen-ov-"))
        ckpt = cache / f"random-{MODELS[size]}.pth"
        if not ckpt.exists():  # the same file for every worker of the run: converted once
            tmp = ckpt.with_suffix(".tmp")
            torch.save(model.state_dict(), tmp)
            os.replace(tmp, ckpt)
        del model
        fwd = ov_backend.load(ckpt, "bf16" if path == "ov-bf16" else "f32", models_dir=cache)
        if fwd.convert_s is not None:
            print(f"converted {ckpt.name} to OpenVINO in {fwd.convert_s:.1f} s", file=sys.stderr)
        return fwd, torch.float32
    if path in ("plain", "depthwise"):
        set_fir_impl(model, "native" if path == "plain" else "depthwise")

        def run(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return model(x)

        return run, torch.float32
    plan = ForwardPlan(dtype="bfloat16" if "bf16" in path else "float32", compile=path.endswith("compile"))
    fwd = prepare(model, plan)
    del model  # only the prepared network's tensors stay (for float32 it shares the big ones)
    return fwd, plan.dtype_torch


def time_worker(size: int, paths: list[str], runs: int, threads: int, out: Path) -> None:
    """All paths in one process, runs interleaved (p1 p2 p3 p1 p2 p3 ...): load drifts hit every path alike."""
    import torch

    torch.set_num_threads(threads)
    x32 = _input(size)
    fwds, first, outputs = {}, {}, {}
    for path in paths:
        fwd, dtype = _forward(path, size)
        x = x32.to(dtype)
        t = time.perf_counter()
        y = fwd(x)
        first[path] = time.perf_counter() - t
        fwds[path] = (fwd, x)
        outputs[path] = y.float().cpu()
    times: dict[str, list[float]] = {p: [] for p in paths}
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(runs):
        for path, (fwd, x) in fwds.items():
            c, t = time.process_time(), time.perf_counter()
            fwd(x)
            times[path].append(time.perf_counter() - t)
            cpu[path].append(time.process_time() - c)
    torch.save(outputs, out.with_suffix(".pt"))
    out.write_text(json.dumps({"times": times, "cpu": cpu, "first_s": first}))


def convert_worker(size: int, out: Path) -> None:
    """The OpenVINO conversion (and float32 compile) of the random-weight checkpoint, alone in a
    fresh process: its seconds and the process's peak RSS (``VmHWM``)."""
    fwd, _ = _forward("ov", size)
    hwm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    out.write_text(json.dumps({"convert_s": fwd.convert_s, "load_s": fwd.load_s, "peak_rss": hwm}))


def memory_worker(size: int, path: str, threads: int, out: Path) -> None:
    """One path alone in a fresh process: peak RSS of one forward after a warm-up call."""
    import torch

    from gpen_core.platform.meter import PeakMeter

    torch.set_num_threads(threads)
    fwd, dtype = _forward(path, size)
    x = _input(size).to(dtype)
    fwd(x)
    with PeakMeter() as meter:
        fwd(x)
    p = meter.peaks
    out.write_text(json.dumps({"peak_rss": p.rss_bytes, "fwd_rss": p.rss_delta_bytes, "rss_method": p.method}))


def _ov_unavailable(paths: list[str]) -> dict[str, str]:
    """{path: why} for the OpenVINO paths this machine cannot run."""
    wanted = [p for p in paths if p.startswith("ov")]
    if not wanted:
        return {}
    from gpen_core.runtimes.openvino import generator as ov_backend

    why = ov_backend.unavailable_reason()
    if why:
        return {p: f"skipped the OpenVINO paths: {why}" for p in wanted}
    if "ov-bf16" in wanted and "BF16" not in ov_backend.capabilities():
        return {"ov-bf16": "skipped ov-bf16: OpenVINO has no BF16 on this CPU (needs AVX-512 BF16 or AMX)"}
    return {}


def _record(results: list[dict]) -> None:
    """Store torch-vs-OpenVINO medians for this CPU (see gpen_core.runtimes.openvino.generator.record_speed)."""
    from gpen_core.runtimes.openvino import generator as ov_backend

    by = {(r["size"], r["path"]): r["median_s"] for r in results}
    for size in sorted({r["size"] for r in results}):
        for torch_path, ov_path, dtype in (("fast", "ov", "float32"), ("fast-bf16", "ov-bf16", "bfloat16")):
            if (size, torch_path) in by and (size, ov_path) in by:
                f = ov_backend.record_speed(size, dtype, by[(size, torch_path)], by[(size, ov_path)], source="benchmarks/bench_forward.py")
                print(f"recorded {size} px {dtype}: torch {by[(size, torch_path)]:.3f} s, OpenVINO {by[(size, ov_path)]:.3f} s -> {f}")


def _run(args: list[str], env: dict[str, str], out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args, "--out", str(out)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[:300]}
    return json.loads(out.read_text())


def _compare(ref, out) -> tuple[float, float]:
    """(max |Δ|, PSNR in dB) of ``out`` against ``ref``, both float N×3×S×S.

    PSNR over the generator's nominal [-1, 1] range (peak-to-peak 2), on the raw
    floats: random weights drive much of the output past ±1, where uint8 images
    would clip both to the same value and hide the difference.
    """
    import math

    d = (out.double() - ref.double())
    mse = float(d.pow(2).mean())
    return float(d.abs().max()), (math.inf if mse == 0 else 10 * math.log10(2.0**2 / mse))


def _machine(threads: int) -> str:
    import platform

    import torch

    from gpen_core.networks.plan import cpu_features

    model = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    from gpen_core.runtimes.openvino import generator as ov_backend

    feats = ",".join(k for k, v in cpu_features().items() if v) or "none"
    ov = ov_backend.openvino_version()
    ov_text = f"OpenVINO {ov.split('-')[0]} ({','.join(ov_backend.capabilities())})" if ov and not ov_backend.unavailable_reason() else "no OpenVINO"
    return (
        f"{model}; {os.cpu_count()} cpus, {threads} threads; torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); "
        f"{ov_text}; features: {feats}; load average {os.getloadavg()[0]:.2f}"
    )


# --------------------------------------------------------------------- --layers: where the OpenVINO time goes

# Each node of the compiled graph goes into a group by its runtime kind, the modules it came from
# and its shapes (layer_group); these are the kinds that only move or combine values.
ELTWISE_KINDS = ("Subgraph", "Eltwise")
COPY_KINDS = ("Concatenation", "Split", "StridedSlice", "Transpose", "Slice", "VariadicSplit", "Crop", "Gather")
# The groups that do dense matrix work (the rest is bound by memory traffic, not arithmetic).
DENSE_GROUPS = ("modulated 3×3 conv", "upsampling transposed", "encoder 3×3", "style MLP")


def layer_group(kind: str, name: str, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> str:
    """The group a node of the compiled generator belongs to: ``kind`` is its runtime type
    (``layerType``), ``name`` its original layers' names, ``ins`` / ``out`` its static shapes."""
    if kind in ("Reorder", "Convert"):
        return "reorders / precision converts"
    if kind in COPY_KINDS:
        return "concats / slices (noise halves, strips)"
    if kind in ("FullyConnected", "MatMul", "RMS"):
        return "style MLP, modulation FCs, demodulation mat-vecs"
    if "to_rgb" in name:
        return "ToRGB 1×1 convs + skip upsampling"
    if kind == "Deconvolution":
        return f"upsampling transposed 3×3 conv → {2 * ins[0][-1]} px"
    if kind == "Convolution" and len(ins[1]) == 5:
        return "FIR blur (depthwise 4×4)"
    if kind == "Convolution" and "generator." not in name:
        # the input's 1×1 conv reads 3 channels: memory traffic, not arithmetic (the strips recompute it)
        return "encoder's input 1×1 conv (3 channels in)" if ins[1][1] <= 4 else "encoder 3×3 stride-2 convs"
    if kind == "Convolution":
        return f"modulated 3×3 conv at {out[-1]} px"
    if kind in ELTWISE_KINDS:
        # an output with a batch over 1 is a weight: the big levels' modulated weights, made per call
        return "weight modulation (per call)" if out and out[0] != 1 else "noise / bias / activation eltwise"
    return "other (input, reshapes)"


def layer_flops(kind: str, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> float:
    """Multiply-add FLOPs (2 per MAC) of one node from its shapes; 0 for the kinds that do no matmul work.

    Conv weights are [Cout, Cin, kh, kw] or grouped [G, Cout/G, Cin/G, kh, kw]; transposed
    ones [Cin, Cout, kh, kw] (grouped [G, Cin/G, Cout/G, kh, kw]), counted per input pixel."""
    import math

    if kind in ("Convolution", "Deconvolution"):
        w = ins[1]
        per = math.prod(w[2:]) if len(w) == 5 else math.prod(w[1:])
        return 2.0 * math.prod(out if kind == "Convolution" else ins[0]) * per
    if kind == "FullyConnected":
        return 2.0 * math.prod(ins[0]) * ins[1][0]
    if kind == "MatMul":
        return 2.0 * math.prod(out) * ins[0][-1]
    return 0.0


def _runtime_nodes(compiled) -> dict[str, dict]:
    """{node name: kind, original layers' names, input and output shapes} of the compiled graph."""
    nodes = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        shape = lambda p: tuple(int(d.get_length()) for d in p.get_partial_shape())  # noqa: E731
        nodes[op.get_friendly_name()] = {
            "kind": info["layerType"].astype(str),
            "name": info["originalLayersNames"].astype(str),
            "ins": [shape(op.input(i)) for i in range(op.get_input_size())],
            "out": shape(op.output(0)) if op.get_output_size() else (),
        }
    return nodes


def profile_variants(xml: Path, configs: list[dict], x, runs: int) -> list[dict]:
    """Compile ``xml`` once per config with OpenVINO's per-node counters; one warm-up each, then
    ``runs`` faces interleaved across the configs (a load drift hits them alike): per config each
    face's wall seconds and each node's real time and kernel, with the runtime graph's shapes."""
    from gpen_core.runtimes.openvino.base import get_core

    compiled = [get_core().compile_model(str(xml), "CPU", {**c, "PERF_COUNT": True}) for c in configs]
    requests = [c.create_infer_request() for c in compiled]
    profs: list[dict] = [{"walls": [], "times": {}, "kernels": {}, "nodes": _runtime_nodes(c)} for c in compiled]
    for request in requests:
        request.infer([x])
    for _ in range(runs):
        for request, prof in zip(requests, profs):
            t = time.perf_counter()
            request.infer([x])
            prof["walls"].append(time.perf_counter() - t)
            for p in request.get_profiling_info():
                prof["times"].setdefault(p.node_name, []).append(p.real_time.total_seconds())
                prof["kernels"][p.node_name] = p.exec_type
    return profs


def group_layers(prof: dict) -> list[dict]:
    """The per-group rows of one profiled variant: nodes, kernels (by time), median seconds, FLOPs."""
    groups: dict[str, dict] = {}
    runs = len(prof["walls"])
    for name, ts in prof["times"].items():
        node = prof["nodes"].get(name)
        if node is None or not any(ts):
            continue
        g = groups.setdefault(layer_group(node["kind"], node["name"], node["ins"], node["out"]),
                              {"nodes": 0, "per_run": [0.0] * runs, "flops": 0.0, "kernels": {}})
        g["nodes"] += 1
        g["flops"] += layer_flops(node["kind"], node["ins"], node["out"])
        for i, t in enumerate(ts[:runs]):
            g["per_run"][i] += t
        k = prof["kernels"][name]
        g["kernels"][k] = g["kernels"].get(k, 0.0) + statistics.median(ts)
    rows = [{"group": k, "nodes": g["nodes"], "seconds": statistics.median(g["per_run"]), "flops": g["flops"],
             "kernels": sorted(g["kernels"], key=g["kernels"].get, reverse=True)} for k, g in groups.items()]
    return sorted(rows, key=lambda r: -r["seconds"])


def layers_table(label: str, prof: dict, floor: float) -> str:
    """Markdown: one row per layer group, its time and share of the face, its GFLOP and GFLOP/s against ``floor``."""
    rows = group_layers(prof)
    total = sum(r["seconds"] for r in rows)
    lines = [f"| {label}: layer group | nodes | kernels (most time first) | ms | share | GFLOP | GFLOP/s | of floor |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        rate = r["flops"] / r["seconds"] / 1e9 if r["flops"] and r["seconds"] else None
        lines.append(f"| {r['group']} | {r['nodes']} | {', '.join(r['kernels'][:3])} | {1e3 * r['seconds']:.1f} | "
                     f"{r['seconds'] / total:.1%} | " + (f"{r['flops'] / 1e9:.1f} | {rate:.0f} | {rate / floor:.2f} |" if rate else "– | – | – |"))
    flops = sum(r["flops"] for r in rows)
    wall = statistics.median(prof["walls"])
    lines.append(f"| **the face** (wall, median of {len(prof['walls'])}) | | | {1e3 * wall:.1f} | sum of layers {total / wall:.0%} of wall | "
                 f"{flops / 1e9:.1f} | {flops / wall / 1e9:.0f} | {flops / wall / 1e9 / floor:.2f} |")
    # The bound this graph has: its dense convs and matmuls at the floor, the rest (memory-bound:
    # the depthwise blur, the 3-channel ToRGB, eltwise, copies) as measured, scaled to the wall.
    dense = [r for r in rows if r["group"].startswith(DENSE_GROUPS)]
    bound = sum(r["flops"] for r in dense) / floor / 1e9 + (total - sum(r["seconds"] for r in dense)) * wall / total
    lines.append(f"| *the dense convs and matmuls at the floor, the rest as measured* | | | {1e3 * bound:.1f} | | {flops / 1e9:.1f} | "
                 f"{flops / bound / 1e9:.0f} | {flops / bound / 1e9 / floor:.2f} |")
    return "\n".join(lines)


def layers_main(size: int, runs: int, threads: int, extra: dict[str, str]) -> int:
    """The conv floor (matmul_peak's probe) and the OpenVINO generator's per-layer profile, in one process."""
    import torch

    import matmul_peak
    from gpen_core.networks.plan import cpu_features
    from gpen_core.runtimes.openvino import generator as ov_backend

    torch.set_num_threads(threads)
    bf16 = cpu_features()["native_bf16"] and "BF16" in ov_backend.capabilities()
    precisions = ("bf16", "f32") if bf16 else ("f32",)
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    print(_machine(threads))
    with tempfile.TemporaryDirectory(prefix="gpen-bench-layers-") as tmp:
        os.environ[OV_CACHE_ENV] = tmp
        fwd, _ = _forward("ov", size)  # converts the random-weight checkpoint once
        xml = fwd.key.ir_dir(ov_backend.cache_root(tmp)) / "model.xml"
        del fwd
        x = _input(size).numpy()
        floors = {p: [matmul_peak.conv_peak(dtypes[p], 7)] for p in precisions}
        variants = [(p, {}) for p in precisions] + ([(precisions[0], extra)] if extra else [])
        base = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
        profs = profile_variants(xml, [{**base, "INFERENCE_PRECISION_HINT": p, **cfg} for p, cfg in variants], x, runs)
        for p in precisions:
            floors[p].append(matmul_peak.conv_peak(dtypes[p], 7))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for p in precisions:
        (b0, m0), (b1, m1) = floors[p]
        print(f"{p} conv floor (benchmarks/matmul_peak.py's 3×3 512→512 at 64 px, {threads} threads): best {max(b0, b1):.1f} "
              f"GFLOP/s (before the profile {b0:.1f}, after {b1:.1f}; medians {m0:.1f}, {m1:.1f})")
    for (p, cfg), prof in zip(variants, profs):
        label = f"ov {p}" + "".join(f" {k}={v}" for k, v in cfg.items())
        print("\n" + layers_table(label, prof, max(b for b, _ in floors[p])))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512], choices=sorted(MODELS))
    ap.add_argument("--paths", nargs="+", choices=PATHS, help="default: plain depthwise fast fast-bf16 (+ compiled with --compile)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per path after one warm-up call (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="add the torch.compile paths (first call compiles)")
    ap.add_argument("--bf16", choices=("auto", "force", "skip"), default="auto", help="auto: only where the CPU has native bf16")
    ap.add_argument("--thp", action="store_true", help="run every path with THP_MEM_ALLOC_ENABLE=1 (transparent huge pages for torch's CPU buffers)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 256 only, 2 runs, plain and fast")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--record", action="store_true", help="store fast-vs-ov seconds for this CPU in the models folder (read by --backend auto)")
    ap.add_argument("--time-worker", nargs="+", metavar="SIZE PATH", help=argparse.SUPPRESS)
    ap.add_argument("--memory-worker", nargs=2, metavar=("SIZE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--convert-worker", type=int, metavar="SIZE", help=argparse.SUPPRESS)
    ap.add_argument("--no-memory", action="store_true", help="skip the per-path peak-RSS processes")
    ap.add_argument("--layers", action="store_true", help="only: the conv floor (matmul_peak.py's probe) and the OpenVINO "
                    "generator's time per layer group, bf16 and f32, in one process (docs/performance.md)")
    ap.add_argument("--ov-config", nargs="+", default=[], metavar="KEY=VALUE",
                    help="with --layers: also profile the first precision compiled with these OpenVINO properties")
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.layers:
        return layers_main(args.sizes[-1], args.runs, args.threads, dict(kv.split("=", 1) for kv in args.ov_config))

    if args.time_worker:
        time_worker(int(args.time_worker[0]), args.time_worker[1:], args.runs, args.threads, args.out)
        return 0
    if args.memory_worker:
        memory_worker(int(args.memory_worker[0]), args.memory_worker[1], args.threads, args.out)
        return 0
    if args.convert_worker:
        convert_worker(args.convert_worker, args.out)
        return 0

    from gpen_core.networks.plan import cpu_features

    if args.quick:
        args.sizes, args.runs = [256], 2
    paths = list(args.paths or (["plain", "fast"] if args.quick else ["plain", "depthwise", "fast", "fast-bf16"]))
    if args.compile and not args.paths:
        paths += ["fast-compile", "fast-bf16-compile"]
    native_bf16 = cpu_features()["native_bf16"]
    skipped = []
    if args.bf16 == "skip" or (args.bf16 == "auto" and not native_bf16):
        skipped = [p for p in paths if "bf16" in p]
        paths = [p for p in paths if "bf16" not in p]
    ov_missing = _ov_unavailable(paths)
    if ov_missing:
        skipped += [p for p in paths if p.startswith("ov") and p in ov_missing]
        print("; ".join(sorted(set(ov_missing.values()))))
        paths = [p for p in paths if p not in ov_missing]
    if "plain" not in paths:
        paths.insert(0, "plain")

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    ov_cache = tempfile.TemporaryDirectory(prefix="gpen-bench-ov-")
    env[OV_CACHE_ENV] = ov_cache.name
    if args.thp:
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    print(_machine(args.threads))
    if skipped:
        print(f"skipped {', '.join(skipped)}: this CPU has no native bfloat16 (use --bf16 force to time the emulation)")
    print(
        f"{args.runs} timed runs per path after 1 warm-up, interleaved across paths in one process; "
        "peak RSS from a separate process per path" + (", THP on" if args.thp else "")
    )
    header = (
        f"{'size':>4}  {'path':<18} {'median s':>9} {'min s':>8} {'x plain':>8} {'max|Δ|':>9} {'PSNR dB':>8} "
        f"{'peak RSS':>9} {'fwd +RSS':>9} {'1st call s':>10} {'CPU s':>7}"
    )
    print(header)
    print("-" * len(header))
    import torch

    results = []
    with tempfile.TemporaryDirectory(prefix="gpen-bench-") as tmp:
        for size in args.sizes:
            load0 = os.getloadavg()[0]
            if any(p.startswith("ov") for p in paths):
                c = _run(["--convert-worker", str(size)], env, Path(tmp) / f"convert_{size}.json")
                print(f"{size:>4}  OpenVINO conversion in a fresh process: " + (f"{c['convert_s']:.1f} s, compile {c['load_s']:.1f} s, "
                      f"peak RSS {c['peak_rss'] / 2**20:.0f} MiB" if "peak_rss" in c else f"failed: {c['error']}"), flush=True)
            out = Path(tmp) / f"time_{size}.json"
            r = _run(["--time-worker", str(size), *paths, "--runs", str(args.runs), "--threads", str(args.threads)], env, out)
            if "error" in r:
                print(f"{size:>4}  timing failed: {r['error']}")
                continue
            outputs = torch.load(out.with_suffix(".pt"), weights_only=True)
            base = statistics.median(r["times"]["plain"])
            for path in paths:
                ts = r["times"][path]
                med, best = statistics.median(ts), min(ts)
                dev, psnr = _compare(outputs["plain"], outputs[path])
                mem = {} if args.no_memory else _run(["--memory-worker", str(size), path, "--threads", str(args.threads)], env, Path(tmp) / f"mem_{size}_{path}.json")
                rss = f"{mem['peak_rss'] / 1e6:>7.0f}MB {mem['fwd_rss'] / 1e6:>7.0f}MB" if "peak_rss" in mem else f"{'n/a':>9} {'n/a':>9}"
                print(
                    f"{size:>4}  {path:<18} {med:>9.3f} {best:>8.3f} {base / med:>7.2f}x {dev:>9.2e} {psnr:>8.1f} "
                    f"{rss} {r['first_s'][path]:>10.2f} {statistics.median(r['cpu'][path]):>7.2f}",
                    flush=True,
                )
                results.append(
                    {"size": size, "path": path, "median_s": med, "min_s": best, "times": ts, "ratio": base / med,
                     "cpu_median_s": statistics.median(r["cpu"][path]),
                     "max_abs_dev": dev, "psnr_db": psnr, "first_s": r["first_s"][path], **mem}
                )
            print(f"{'':>4}  (load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    ov_cache.cleanup()
    if args.record:
        _record(results)
    if args.json:
        args.json.write_text(json.dumps({"machine": _machine(args.threads), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
