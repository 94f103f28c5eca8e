"""Winograd stride-1 3×3 decoder convs in the OpenVINO export, A/B against today's graph.

    .venv/bin/python benchmarks/bench_winograd.py --size 512 --runs 5
    .venv/bin/python benchmarks/bench_winograd.py --size 256 --runs 7

Not used by the engine: it measures whether rewriting GPEN's stride-1 3×3 decoder convs as
Winograd F(m×m, 3×3) pays on this CPU (docs/performance.md, "Winograd convolutions on the
CPU"). Each variant is :func:`gpen_core.runtimes.openvino.export.exportable` with the
weight-modulated stride-1 convs of the chosen levels replaced by

  input transform (depthwise convs, separable: rows then columns, one per tile position)
  → one grouped 1×1 conv (groups = tile positions; weight G·W·Gᵀ, modulated per call, small)
  → output transform (element-wise sums, then the m×m blocks interleaved back),

so OpenVINO's conv kernels do the multiplies (2.25× fewer for F(2×2), 4× for F(4×4)). All
variants are converted and compiled in this one process and timed interleaved after a
warm-up (wall and CPU seconds, load average), with max |Δ| and PSNR against the plain
torch model on random weights.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (Bᵀ, G, Aᵀ) of Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", keyed by m
MATS = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6],
         [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
# variant name → ({decoder level in px: m}, precisions it is compiled for); F(4×4) is f32 only:
# one layer in bf16 lands 0.5 off (measured), its transforms amplify the rounding
VARIANTS = {
    "today": ({}, ("f32", "bf16")),
    "F4@64,128": ({64: 4, 128: 4}, ("f32",)),
    "F2@64": ({64: 2}, ("bf16",)),
    "F2@64,128": ({64: 2, 128: 2}, ("bf16",)),
}


def weight_tf(w, m: int):
    """(out, in, 3, 3) → (a², out, in), a = m + 2: G·W·Gᵀ per tile position (in float64, stored float32)."""
    import torch

    g = torch.tensor(MATS[m][1], dtype=torch.float64)
    u = torch.einsum("ak,oikl,bl->aboi", g, w.double(), g)
    return u.reshape(-1, w.shape[0], w.shape[1]).float().contiguous()


def _dw(x, k, stride, padding):
    from torch.nn import functional as F

    c = int(x.shape[1])
    return F.conv2d(x, k.repeat(c, 1, 1, 1), stride=stride, padding=padding, groups=c)


def _comb(coefs, terms):
    out = None
    for c, t in zip(coefs, terms):
        if c:
            t = t if c == 1 else (-t if c == -1 else t * float(c))
            out = t if out is None else out + t
    return out


def winograd(parts, u, m: int):
    """conv2d(cat(parts), W, padding=1) for batch 1, H and W multiples of m, with u = weight_tf(W) (modulated or not)."""
    import torch
    from torch.nn import functional as F

    bt, _, at = MATS[m]
    a = m + 2
    bt_t = torch.tensor(bt, dtype=torch.float32)
    vs: list[list] = [[] for _ in range(a * a)]
    h, w = int(parts[0].shape[2]), int(parts[0].shape[3])
    for x in parts:
        rows = [_dw(x, bt_t[j].view(1, 1, a, 1), (m, 1), 1) for j in range(a)]
        for j, r in enumerate(rows):
            for k in range(a):
                vs[j * a + k].append(_dw(r, bt_t[k].view(1, 1, 1, a), (1, m), 0))
    v = torch.cat([t for ts in vs for t in ts], 1)  # channels: (tile position, input channel)
    cout = int(u.shape[1])
    y = torch.split(F.conv2d(v, u.reshape(a * a * cout, -1, 1, 1), groups=a * a), cout, 1)
    q = [[_comb(at[p], [y[i * a + j] for i in range(a)]) for j in range(a)] for p in range(m)]
    out = torch.cat([_comb(at[r], q[p]) for p in range(m) for r in range(m)], 1)
    return out.reshape(m, m, cout, h // m, w // m).permute(2, 3, 0, 4, 1).reshape(1, cout, h, w)


def build(name: str, levels: dict[int, int]):
    import torch

    from gpen_core.networks.synthetic import random_generator
    from gpen_core.runtimes.openvino.export import exportable
    from gpen_core.weights.lookup import REGISTRY

    model = exportable(random_generator(REGISTRY[name].arch, seed=0))
    for i, conv in enumerate(model.generator.convs):
        res, m = 2 ** (i // 2 + 2 + i % 2), conv.conv
        if m.upsample or res not in levels or m.export_input_modulated:
            continue
        m.export_u = weight_tf(m.export_weight, levels[res])

        def forward(self, x, style, mm=levels[res]):
            parts = x if isinstance(x, tuple) else (x,)
            s = self.modulation(style)[0]
            d = torch.rsqrt(self.export_wsq @ (s * s) + 1e-8)
            return winograd(parts, self.export_u * (d.view(-1, 1) * s.view(1, -1)), mm)

        m.forward = types.MethodType(forward, m)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, choices=(256, 512), default=512)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import numpy as np
    import openvino as ov
    import torch

    from gpen_core.networks.synthetic import random_generator
    from gpen_core.weights.lookup import REGISTRY

    name = {256: "GPEN-BFR-256", 512: "GPEN-BFR-512"}[args.size]
    torch.manual_seed(1)
    x = torch.rand(1, 3, args.size, args.size) * 2 - 1
    with torch.no_grad():
        ref = random_generator(REGISTRY[name].arch, seed=0)(x).numpy()
    core, compiled = ov.Core(), {}
    for vn, (levels, precs) in VARIANTS.items():
        model = build(name, levels)
        with torch.no_grad():
            om = ov.convert_model(model, example_input=x, input=[(1, 3, args.size, args.size)])
        del model
        for p in precs:
            compiled[vn, p] = core.compile_model(om, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": p,
                                                             "INFERENCE_NUM_THREADS": args.threads})
    xs = x.numpy()
    for (vn, p), c in compiled.items():  # also the warm-up
        out = c([xs])[0]
        psnr = 10 * math.log10(4.0 / float(((out - ref) ** 2).mean()))  # GPEN's range is [-1, 1]
        print(f"{vn:10s} {p:4s} max|Δ| vs plain {np.abs(out - ref).max():.3g}  PSNR {psnr:.1f} dB")
    times: dict = {k: [] for k in compiled}
    for _ in range(args.runs):
        for k, c in compiled.items():
            t0, p0 = time.perf_counter(), time.process_time()
            c([xs])
            times[k].append((time.perf_counter() - t0, time.process_time() - p0))
    print(f"{name}, {args.runs} interleaved runs, {args.threads} threads, load average {os.getloadavg()}")
    for (vn, p), v in times.items():
        wall, cpu = [a for a, _ in v], [b for _, b in v]
        print(f"{vn:10s} {p:4s} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}) | "
              f"CPU median {statistics.median(cpu):.3f} s (min {min(cpu):.3f})")


if __name__ == "__main__":
    main()
