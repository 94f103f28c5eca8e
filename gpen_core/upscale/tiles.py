"""Upscale a whole photo with RealESRNet in tiles whose memory fits a budget (docs/upscaling.md): each tile's centre
goes into a preallocated output, so the peak is the output plus one tile. The official ``tile_process`` grid on the
input padded as the official ``process`` pads it: the same pixels. RGB uint8 H×W×3 in, RGB uint8 sH×sW×3 out.
"""

from __future__ import annotations

import itertools
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpen_core.platform.heap import MAPPED_FROM, map_blocks_from
from gpen_core.progress import CountProgress
from gpen_core.rgb import check_rgb

if TYPE_CHECKING:
    from gpen_core.modes import MemoryMode
    from gpen_core.networks.upscaler import RRDBNet

DEFAULT_PAD = 10  # the official tile_pad; seams measured in tests/test_upscaler.py and docs/upscaling.md

# Per-tile peak RAM: TILE_FIXED_BYTES + TILE_BYTES_PER_PX per trunk pixel (padded tile area / unshuffle²) at the
# released widths, scaled by (num_feat + 2 * num_grow_ch) / 96; above every tile measured (docs/upscaling.md).
TILE_FIXED_BYTES = 16 << 20
TILE_BYTES_PER_PX = 7800

# Per-tile working-set budget of each memory mode (bytes); the output buffer (s² × the input) comes on top.
MODE_TILE_BUDGET: dict[str, int] = {"low": 96 << 20, "faces-only": 192 << 20, "balanced": 192 << 20, "quality": 384 << 20}
MIN_TILE = 32  # below this the 2 × 10 px of context costs more than the tile itself
MAX_TILE = 1024

# Largest result we make (pixels), and how many result-sized buffers the flow holds at its peak (the resized
# original, the upscaled background, the composed photo).
MAX_OUTPUT_PIXELS = 100_000_000
FLOW_BUFFERS = 3


def check_output_size(width: int, height: int, factor: int) -> None:
    """InputError when ``factor``× the photo would exceed :data:`MAX_OUTPUT_PIXELS`, naming what fits."""
    from gpen_core.errors import InputError

    out = width * height * factor * factor
    if factor <= 1 or out <= MAX_OUTPUT_PIXELS:
        return
    k = math.sqrt(MAX_OUTPUT_PIXELS / out)
    shrink = f"{int(width * k)}×{int(height * k)}"
    x2_fits = factor > 2 and width * height * 4 <= MAX_OUTPUT_PIXELS
    alt = f"choose ×2 ({width * 2}×{height * 2}), or " if x2_fits else "choose upscale 1, or "
    raise InputError(f"upscaling {width}×{height} by ×{factor} would make a {width * factor}×{height * factor} result "
                     f"({out / 1e6:.0f} MP), over the {MAX_OUTPUT_PIXELS / 1e6:.0f} MP limit. To fix: {alt}shrink "
                     f"the photo to at most {shrink} first.")


def upscale_extra_bytes(width: int, height: int, factor: int, tile: int, *, pad: int = DEFAULT_PAD) -> int:
    """Estimated RAM (bytes, from the cost model) the upscaling flow adds to a request: its result-sized buffers
    plus one tile's working set."""
    if factor <= 1:
        return 0
    return FLOW_BUFFERS * width * height * 3 * factor * factor + tile_cost_bytes(tile, factor, pad=pad)


def _bytes_per_input_px(scale: int, num_feat: int, num_grow_ch: int) -> float:
    # The trunk runs on the input pixel-unshuffled by 4 / scale (×4: none, ×2: 2×2 blocks, ×1: 4×4 blocks).
    return TILE_BYTES_PER_PX * (num_feat + 2 * num_grow_ch) / 96 / (4 // scale) ** 2


def tile_cost_bytes(tile: int, scale: int, *, pad: int = DEFAULT_PAD, num_feat: int = 32, num_grow_ch: int = 32) -> int:
    """Predicted peak RAM of one tile of ``tile`` input px (plus ``pad`` each side), in bytes."""
    return int(TILE_FIXED_BYTES + _bytes_per_input_px(scale, num_feat, num_grow_ch) * (tile + 2 * pad) ** 2)


def tile_for_budget(budget_bytes: int, scale: int, *, pad: int = DEFAULT_PAD, num_feat: int = 32,
                    num_grow_ch: int = 32) -> int:
    """The largest tile (input px, a multiple of 16) whose predicted peak fits ``budget_bytes``, at least
    :data:`MIN_TILE` (the caller's memory check decides whether to run at all)."""
    room = max(0, budget_bytes - TILE_FIXED_BYTES)
    side = math.sqrt(room / _bytes_per_input_px(scale, num_feat, num_grow_ch))
    tile = int(side - 2 * pad) // 16 * 16
    return max(MIN_TILE, min(MAX_TILE, tile))


@dataclass(frozen=True)
class TileGrid:
    """The official tile grid on the (unshuffle-padded) input."""

    tile: int  # input px per tile side (the last row/column of tiles may be smaller)
    pad: int  # context px on each side of a tile, clipped at the borders
    rows: int
    cols: int
    padded_h: int  # input height after reflect-padding to a multiple of the unshuffle factor
    padded_w: int

    @property
    def count(self) -> int:
        return self.rows * self.cols


def plan_grid(height: int, width: int, scale: int, tile: int, pad: int = DEFAULT_PAD) -> TileGrid:
    """Tiles for an H×W input (``tile`` 0 or ≥ the image: one); tile and pad rounded up to the unshuffle factor."""
    u = 4 // scale  # the unshuffle factor
    hp, wp = height + (-height) % u, width + (-width) % u
    pad = pad + (-pad) % u
    if tile <= 0 or tile >= max(hp, wp):
        return TileGrid(max(hp, wp), 0, 1, 1, hp, wp)
    tile = tile + (-tile) % u
    return TileGrid(tile, pad, math.ceil(hp / tile), math.ceil(wp / tile), hp, wp)


@dataclass(frozen=True)
class Upscaled:
    """What :func:`run_tiles` returns: the image and how it was made."""

    image: np.ndarray  # RGB uint8, exactly (scale·H) × (scale·W) × 3
    scale: int
    grid: TileGrid
    seconds: float
    dtype: str  # the compute dtype: "float32" or "bfloat16" (autocast)


def choose_bf16(device: str, mode: MemoryMode | None = None, features: dict[str, bool] | None = None) -> tuple[bool, str]:
    """(whether the upscaler runs under CPU bfloat16 autocast, why): on a CPU with native bf16 (31× slower emulated:
    docs/upscaling.md) in a mode that accepts reduced precision. ``features``: ``cpu_features()`` (default: now)."""
    if not str(device).startswith("cpu"):
        return False, f"float32 on {device} (the CPU bfloat16 path applies to the CPU only)"
    if mode is not None and mode.cpu_dtype == "float32" and mode.cuda_dtype == "float32":
        return False, f"float32: {mode.name} mode computes in float32 everywhere"
    if features is None:
        from gpen_core.networks.plan import cpu_features

        features = cpu_features()
    if not features.get("native_bf16", False):
        return False, "float32: this CPU has no native bfloat16 (AVX-512 BF16 / AMX), where bfloat16 runs slower"
    return True, "bfloat16: this CPU has native bfloat16 (AVX-512 BF16 / AMX), several times faster than float32"


def _index(n: int, start: int, stop: int) -> slice | np.ndarray:
    """Rows [start, stop) of an input of ``n`` rows, reflect-padded past its end (torch's 'reflect')."""
    if stop <= n:
        return slice(start, stop)
    idx = np.arange(start, stop)
    if n == 1:
        return np.zeros_like(idx)
    return np.where(idx < n, idx, 2 * (n - 1) - idx)


def run_tiles(rgb: np.ndarray, net: RRDBNet, tile: int, pad: int = DEFAULT_PAD, progress: CountProgress | None = None,
              *, bf16: bool = False) -> Upscaled:
    """Upscale RGB uint8 H×W×3 by ``net.scale`` in tiles; ``bf16``: under CPU bfloat16 autocast (CPU only)."""
    import torch

    check_rgb(rgb, "the photo to upscale")
    # glibc's sliding mmap threshold let the same tile's peak vary by 70% (docs/upscaling.md); set on each call.
    map_blocks_from(MAPPED_FROM)
    t0 = time.perf_counter()
    s = net.scale
    h, w = rgb.shape[:2]
    grid = plan_grid(h, w, s, tile, pad)
    # Exactly s×H × s×W, odd sizes at ×2 too: the official result's top-left region (it is a pixel bigger there).
    out = np.empty((h * s, w * s, 3), np.uint8)
    param = next(net.parameters())
    device, wdtype = param.device, param.dtype  # a net cast to bfloat16 gets its input in bfloat16
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 and device.type == "cpu" else nullcontext()
    with torch.inference_mode(), autocast:
        for done, (ty, tx) in enumerate(itertools.product(range(grid.rows), range(grid.cols)), 1):
            y0, x0 = ty * grid.tile, tx * grid.tile
            y1, x1 = min(y0 + grid.tile, grid.padded_h), min(x0 + grid.tile, grid.padded_w)
            py0, px0 = max(y0 - grid.pad, 0), max(x0 - grid.pad, 0)
            py1, px1 = min(y1 + grid.pad, grid.padded_h), min(x1 + grid.pad, grid.padded_w)
            piece = np.ascontiguousarray(rgb[_index(h, py0, py1)][:, _index(w, px0, px1)])
            x = torch.from_numpy(piece).to(device).permute(2, 0, 1).unsqueeze(0).float().div_(255.0).to(wdtype)
            y = net(x)
            del x
            # Only the part inside the original image (not the reflect padding) is kept.
            ye, xe = min(y1, h), min(x1, w)
            oy, ox = (y0 - py0) * s, (x0 - px0) * s
            crop = y[0, :, oy : oy + (ye - y0) * s, ox : ox + (xe - x0) * s]
            # float32 before rounding, as the official code (bf16 results are cast up first).
            crop = crop.float().clamp_(0, 1).mul_(255.0).round_().to(torch.uint8)
            out[y0 * s : ye * s, x0 * s : xe * s] = crop.permute(1, 2, 0).cpu().numpy()
            del y, crop
            if progress is not None:
                progress(done, grid.count)
    used = "bfloat16" if (bf16 and device.type == "cpu") or wdtype == torch.bfloat16 else str(wdtype).replace("torch.", "")
    return Upscaled(out, s, grid, time.perf_counter() - t0, used)


@dataclass(frozen=True)
class UpscalePreview:
    """What upscaling a photo will make, before it runs (for the app's Upscale radio)."""

    out_size: tuple[int, int]  # width, height of the result
    tile: int  # tile side the mode's budget gives (input px)
    tiles: int
    extra_bytes: int  # estimated RAM upscaling adds (upscale_extra_bytes): an estimate, not a measurement
    problem: str | None  # why it would be refused (over MAX_OUTPUT_PIXELS), else None


def preview(width: int, height: int, factor: int, mode: str | None, tile: int | None = None) -> UpscalePreview:
    """What ``factor``× a ``width``×``height`` photo makes in ``mode`` (``auto`` / None: the smallest tile budget)."""
    from gpen_core.errors import InputError
    from gpen_core.modes import MODES, preshrink_size

    m = MODES.get(mode or "")
    if m is not None:
        width, height = preshrink_size(width, height, m.max_side)
    out_size = (width * factor, height * factor)
    if factor <= 1:
        return UpscalePreview(out_size, 0, 0, 0, None)
    t = tile or tile_for_budget(MODE_TILE_BUDGET.get(mode or "", min(MODE_TILE_BUDGET.values())), factor)
    grid = plan_grid(height, width, factor, t)
    problem = None
    try:
        check_output_size(width, height, factor)
    except InputError as exc:
        problem = str(exc)
    return UpscalePreview(out_size, grid.tile, grid.count, upscale_extra_bytes(width, height, factor, t), problem)
