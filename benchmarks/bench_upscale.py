"""Background upscaling (RealESRNet / RRDBNet): per-tile memory, speed, and the table of docs/upscaling.md.

    .venv/bin/python benchmarks/bench_upscale.py --calibrate        # per-tile peak RAM vs tile size (the cost model)
    .venv/bin/python benchmarks/bench_upscale.py --speed            # float32 vs bf16 autocast vs bf16 weights, s/MP, PSNR
        [--threads 1 --photo ../shared/faces/Solvay_conference_1927.png --init official]
    .venv/bin/python benchmarks/bench_upscale.py --table [--readme] # 2 MP and 12 MP photos at ×2 / ×4 per mode

Weights are random (``gpen_core.networks.upscaler.random_upscaler``) with the released
architecture (num_feat 32, 23 blocks, grow 32): time and memory do not depend on
their values. Every measurement runs in a fresh worker process; RAM is the
engine's own meter (``gpen_core.platform.meter.PeakMeter``, kernel VmHWM) around the call,
reported as the peak above the process before the call.

The table: a full 12 MP photo at ×4 is ~10 M multiply-adds per input pixel
(~10^14 in all), hours on a 2-core CPU. So each (photo, factor, mode) row runs the
real tiled upscale on a measured crop of the photo (``--crop-mp``, default 0.25 MP)
for seconds per megapixel, and measures the peak of the full-size run only where
it fits ``--max-seconds``; other rows show the peak the model predicts (output
buffer + one tile, :func:`gpen_core.upscale.tiles.tile_cost_bytes`) and the seconds
extrapolated from the measured s/MP, both marked "est.".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHOTOS = {"2 MP": (1200, 1600), "12 MP": (3000, 4000)}  # H, W of the synthetic photos


def _photo(h: int, w: int, seed: int = 0):
    """A smooth synthetic RGB uint8 photo with some texture (values do not change time or memory)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    zero = np.zeros((h, w), np.float32)
    base = np.stack([zero + y * 200 + 20 + x * 20, zero + x * 180 + 30, zero + (1 - y) * 150 + 50 * x], axis=-1)
    noise = rng.integers(-12, 13, size=(h, w, 1), dtype=np.int16)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _crop(path: str, h: int, w: int):
    """An h×w RGB uint8 crop from the centre of a real photo (texture and edges, unlike _photo)."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB"))
    if img.shape[0] < h or img.shape[1] < w:
        raise SystemExit(f"{path} is {img.shape[1]}×{img.shape[0]}, smaller than the {w}×{h} crop asked; pass a smaller --side")
    y, x = (img.shape[0] - h) // 2, (img.shape[1] - w) // 2
    return np.ascontiguousarray(img[y : y + h, x : x + w])


def _official_init(config):
    """The official RRDBNet initialisation (see gpen_core.networks.upscaler.official_init_upscaler).

    Why, for accuracy: ``random_upscaler``'s output is ~96 % saturated at 0 or 255 at ×4, so a bf16
    rounding flips whole pixels and its PSNR says little about a trained network; this one's output
    stays mostly in range, as a trained upscaler's does. Speed does not depend on the values.
    """
    from gpen_core.networks.upscaler import official_init_upscaler

    return official_init_upscaler(config)


# --------------------------------------------------------------------- worker


def _worker(spec: dict) -> dict:
    import torch

    from gpen_core.platform.meter import PeakMeter
    from gpen_core.upscale.tiles import run_tiles
    from gpen_core.networks.upscaler import UpscalerConfig, random_upscaler

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    config = UpscalerConfig(scale=spec["scale"], num_block=spec.get("blocks", 23))
    if spec.get("weights"):
        from gpen_core.networks.upscaler import load_upscaler

        net = load_upscaler(spec["weights"])  # a released file: the accuracy that matters
    else:
        net = _official_init(config) if spec.get("init") == "official" else random_upscaler(config, seed=0)
    net = net.to(memory_format=torch.channels_last)  # as build_upscaler: every variant runs channels-last
    if spec.get("bf16_weights"):
        net = net.to(torch.bfloat16)  # run_tiles feeds the input in the weights' dtype
    bf16 = bool(spec.get("bf16"))
    h, w = spec["h"], spec["w"]
    rgb = _crop(spec["photo"], h, w) if spec.get("photo") else _photo(h, w)
    warm = _photo(48, 48, 1)
    run_tiles(warm, net, 0, bf16=bf16)  # first-call setup (oneDNN primitives) outside the measurement
    with PeakMeter("cpu") as m:
        t0, c0 = time.perf_counter(), time.process_time()
        r = run_tiles(rgb, net, spec["tile"], spec.get("pad", 10), bf16=bf16)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    assert m.peaks is not None
    out = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,  # all threads' CPU time: with --threads 1, less inflated by other jobs than wall time
        "dtype": r.dtype,
        "peak_delta": m.peaks.rss_delta_bytes,
        "peak": m.peaks.rss_bytes,
        "tiles": r.grid.count,
        "tile": r.grid.tile,
        "out_bytes": r.image.nbytes,
        "method": m.peaks.method,
    }
    if spec.get("save"):
        import numpy as np

        np.save(spec["save"], r.image)
    return out


def _run_worker(spec: dict) -> dict:
    code = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, cwd=ROOT
    )
    if code.returncode != 0:
        raise RuntimeError(code.stderr[-2000:])
    return json.loads(code.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- calibrate


def calibrate(args) -> None:
    """One tile per worker (image = tile, no padding context needed): peak vs trunk pixels."""
    from gpen_core.upscale.tiles import TILE_BYTES_PER_PX, TILE_FIXED_BYTES, tile_cost_bytes

    rows = []
    for scale in (2, 4):
        u = {4: 1, 2: 2}[scale]
        for side in args.sides:
            r = _run_worker({"scale": scale, "h": side, "w": side, "tile": 0, "blocks": args.blocks, "threads": args.threads})
            trunk = side * side / (u * u)
            tile_only = r["peak_delta"] - r["out_bytes"]
            rows.append((scale, side, trunk, r["peak_delta"], tile_only, r["seconds"]))
            model = tile_cost_bytes(side, scale, pad=0)
            print(
                f"x{scale} side {side:4d}: peak +{r['peak_delta'] / 2**20:7.1f} MiB, minus output "
                f"{tile_only / 2**20:7.1f} MiB = {tile_only / trunk:6.0f} B per trunk px; model {model / 2**20:7.1f} MiB "
                f"({r['seconds']:.2f} s, {r['method']})",
                flush=True,
            )
    # least squares of tile_only on trunk px
    xs = [r[2] for r in rows]
    ys = [r[4] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"fit: fixed {(my - slope * mx) / 2**20:.1f} MiB, {slope:.0f} B per trunk px "
          f"(model: {TILE_FIXED_BYTES / 2**20:.1f} MiB, {TILE_BYTES_PER_PX} B)")


# --------------------------------------------------------------------- speed


def _psnr(a, b) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def speed(args) -> None:
    """float32 vs bf16 autocast (run_tiles' ``bf16``) vs bf16 weights, all channels-last; each run in a fresh
    worker, the variants interleaved so contention hits them alike; min of ``--repeat`` runs."""
    import tempfile

    import numpy as np

    h = w = args.side
    mp = h * w / 1e6
    variants = (("float32", {}), ("bf16 autocast", {"bf16": True}), ("bf16 weights", {"bf16_weights": True}))
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        scales = (2, 4)
        if args.weights:
            from gpen_core.networks.upscaler import load_upscaler

            scales = (load_upscaler(args.weights).scale,)
        for scale in scales:
            runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
            for _ in range(args.repeat):
                for name, extra in variants:
                    spec = {"scale": scale, "h": h, "w": w, "tile": args.tile, "threads": args.threads,
                            "photo": args.photo, "init": args.init, "weights": args.weights, "save": f"{tmp}/{scale}-{name.replace(' ', '_')}.npy", **extra}
                    runs[name].append(_run_worker(spec))
            ref = np.load(f"{tmp}/{scale}-float32.npy")
            for name, _ in variants:
                img = np.load(f"{tmp}/{scale}-{name.replace(' ', '_')}.npy")
                cpu = [r["cpu_seconds"] for r in runs[name]]
                wall = [r["seconds"] for r in runs[name]]
                diff = np.abs(img.astype(np.int16) - ref.astype(np.int16))
                print(
                    f"x{scale} {name:14s}: {min(cpu) / mp:7.1f} CPU s per input MP (min of {len(cpu)}; wall min "
                    f"{min(wall) / mp:.1f}), tile {runs[name][0]['tile']} ({runs[name][0]['tiles']}), peak +"
                    f"{max(r['peak_delta'] for r in runs[name]) / 2**20:.0f} MiB, PSNR vs float32 {_psnr(img, ref):.1f} dB, "
                    f"max diff {diff.max()}, saturated (0 or 255) share of float32 {float(np.mean((ref == 0) | (ref == 255))):.2f}",
                    flush=True,
                )


# --------------------------------------------------------------------- table


def table(args) -> str:
    """Per photo × factor × mode: seconds and peak RAM above idle.

    Rows whose estimated time is within ``--max-seconds`` run in full (measured);
    the others are estimates: seconds = s/MP measured on a crop with the same tile
    size × the photo's MP; peak = output buffers + one tile (the cost model, whose
    per-tile figure is bounded by measurement: --calibrate and tests/test_upscaler.py).
    """
    from gpen_core.modes import MODES, preshrink_size
    from gpen_core.upscale.tiles import MAX_OUTPUT_PIXELS, MODE_TILE_BUDGET, choose_bf16, plan_grid, tile_for_budget, upscale_extra_bytes

    lines = [
        "| photo | factor | mode | dtype | tile (tiles) | seconds | peak RAM added | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    crop = int((args.crop_mp * 1e6) ** 0.5)
    s_per_mp: dict[tuple[int, int, bool], float] = {}
    for label, (h0, w0) in PHOTOS.items():
        for scale in (2, 4):
            for mode in MODES:
                if mode == "faces-only":
                    continue  # returns the faces only: no background to upscale
                w, h = preshrink_size(w0, h0, MODES[mode].max_side)  # what the mode upscales: low shrinks first
                shrunk = f", shrunk by {mode} to {w}×{h}" if (w, h) != (w0, h0) else ""
                tile = tile_for_budget(MODE_TILE_BUDGET[mode], scale)
                grid = plan_grid(h, w, scale, tile)
                bf16, _ = choose_bf16("cpu", MODES[mode])  # the dtype the pipeline runs this mode's upscale in
                dtype = "bfloat16" if bf16 else "float32"
                if (scale, tile, bf16) not in s_per_mp:
                    side = max(crop, tile)  # at least one whole tile with its context
                    r = _run_worker({"scale": scale, "h": side, "w": side, "tile": tile, "threads": args.threads, "bf16": bf16})
                    s_per_mp[(scale, tile, bf16)] = r["seconds"] / (side * side / 1e6)
                    print(f"x{scale} tile {tile} {dtype}: {s_per_mp[(scale, tile, bf16)]:.0f} s per input MP on {side}×{side}", flush=True)
                seconds = s_per_mp[(scale, tile, bf16)] * h * w / 1e6
                if h * w * scale * scale > MAX_OUTPUT_PIXELS:
                    sec_txt = peak_txt = f"refused: over the {MAX_OUTPUT_PIXELS / 1e6:.0f} MP cap"
                elif seconds <= args.max_seconds:
                    r = _run_worker({"scale": scale, "h": h, "w": w, "tile": tile, "threads": args.threads, "bf16": bf16})
                    sec_txt, peak_txt = f"{r['seconds']:.0f}", f"{r['peak_delta'] / 2**20:.0f} MiB"
                else:
                    sec_txt = f"~{seconds:,.0f} (est.)"
                    peak_txt = f"~{upscale_extra_bytes(w, h, scale, tile) / 2**20:,.0f} MiB (est.)"
                lines.append(
                    f"| {label} ({w0}×{h0}{shrunk}) | ×{scale} | {mode} | {dtype} | {grid.tile} px ({grid.count}) | {sec_txt} | {peak_txt} "
                    f"| {w * scale}×{h * scale} ({h * w * scale * scale / 1e6:.0f} MP) |"
                )
                print(lines[-1], flush=True)
    return "\n".join(lines)


def _cpu_model() -> str:
    from gpen_core.platform.cpuinfo import cpu_model

    return cpu_model()


def _write_docs(block: str) -> None:
    """Put ``block`` between the upscale-table markers of docs/upscaling.md."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench import replace_block

    print(f"wrote the table into {replace_block('upscale-table', block)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--speed", action="store_true")
    p.add_argument("--table", action="store_true")
    p.add_argument("--readme", action="store_true", help="write the --table result into docs/upscaling.md between the markers")
    p.add_argument("--sides", type=int, nargs="+", default=[64, 128, 192, 256])
    p.add_argument("--blocks", type=int, default=2, help="RRDB blocks for --calibrate (memory does not depend on depth)")
    p.add_argument("--side", type=int, default=256, help="--speed: input side in px")
    p.add_argument("--tile", type=int, default=128, help="--speed: tile size")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--photo", default=None, help="--speed: time a centre crop of this photo (default: a synthetic one)")
    p.add_argument("--weights", default=None, help="--speed: a RealESRNet file (realesrnet_x2.pth / _x4) instead of random weights")
    p.add_argument("--init", choices=("random", "official"), default="random",
                   help="--speed: random_upscaler weights, or the official RRDBNet initialisation (see _official_init)")
    p.add_argument("--crop-mp", type=float, default=0.02)
    p.add_argument("--max-seconds", type=float, default=120.0)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return
    if args.calibrate:
        calibrate(args)
    if args.speed:
        speed(args)
    if args.table:
        load_before = os.getloadavg()[0]
        block = table(args)
        print(block)
        if args.readme:
            from gpen_core.networks.plan import cpu_features

            feats = ", ".join(k for k in ("avx512_bf16", "amx_bf16") if cpu_features().get(k)) or "no native bf16"
            command = "python benchmarks/bench_upscale.py " + " ".join(sys.argv[1:])
            _write_docs(
                block
                + f"\n\n*Measured {time.strftime('%Y-%m-%d')} on {_cpu_model()} ({feats}), {os.cpu_count()} cores, "
                f"load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after; random weights of the released "
                "23-block architecture (time and memory do not depend on the values). Rows with seconds run the whole photo; "
                f"rows marked est. would take over {args.max_seconds:.0f} s and are the seconds per input MP measured on a "
                "crop with the same tile size × the photo's MP, and the cost model's peak. "
                f"Generated by `{command}`.*"
            )


if __name__ == "__main__":
    main()
