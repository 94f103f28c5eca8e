"""``auto``: the best mode whose peak memory fits what is free now.

Peaks come from the hardware profile saved in the models folder when there is
one for this machine and these versions (:mod:`gpen_core.profile`), and from a
conservative built-in estimate otherwise; the reason string says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from .meter import format_bytes
from .modes import MODES, MemoryMode

# Keep this much of the free memory unused: other programs and allocator slack.
SAFETY_MARGIN = 0.8

# Built-in peak estimates above the idle process, in bytes, for one 512 px face
# in a ~1 MP photo; scaled with the photo's pixel count (full-frame buffers).
# Measured with benchmarks/bench.py on CPU; replaced by the saved profile when present.
_CPU_MODEL_BYTES = {"low": 260e6, "faces-only": 560e6, "balanced": 560e6, "quality": 900e6}
_CUDA_MODEL_BYTES = {"low": 150e6, "faces-only": 420e6, "balanced": 420e6, "quality": 900e6}
_BYTES_PER_PIXEL = 40  # decode, working copy, result and encode buffers, uint8 and float


@dataclass(frozen=True)
class Choice:
    mode: MemoryMode
    reason: str


@dataclass(frozen=True)
class Free:
    """Memory free now; VRAM None without CUDA."""

    ram_bytes: int
    vram_bytes: int | None


def free_memory(device: str) -> Free:
    ram = int(psutil.virtual_memory().available)
    vram = None
    if device.startswith("cuda"):
        import torch

        vram = int(torch.cuda.mem_get_info()[0])
    if os.environ.get("GPEN_FREE_RAM_BYTES"):  # tests and capped containers
        ram = int(float(os.environ["GPEN_FREE_RAM_BYTES"]))
    if os.environ.get("GPEN_FREE_VRAM_BYTES") and vram is not None:
        vram = int(float(os.environ["GPEN_FREE_VRAM_BYTES"]))
    return Free(ram, vram)


def estimate_peak(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None = None) -> tuple[int, str]:
    """(bytes the call needs above the idle process on its binding memory, where the figure comes from)."""
    from . import profile

    w, h = image_size
    if mode.max_side and max(w, h) > mode.max_side:
        s = mode.max_side / max(w, h)
        w, h = int(w * s), int(h * s)
    pixels = w * h
    measured = profile.measured(mode.name, device, models_dir=models_dir)
    if measured is not None:
        # The measured peak already covers photos up to the largest workload (a 12 MP
        # photo): only pixels beyond that add, at the measured growth when there is one.
        per_pixel = measured.bytes_per_pixel or _BYTES_PER_PIXEL
        extra = max(0, pixels - measured.covered_pixels) * per_pixel
        return int(measured.peak_bytes + extra), "measured on this machine"
    table = _CUDA_MODEL_BYTES if device.startswith("cuda") else _CPU_MODEL_BYTES
    return int(table[mode.name] + pixels * _BYTES_PER_PIXEL), "built-in estimate (run the hardware check to measure)"


def _fits(mode: MemoryMode, device: str, image_size: tuple[int, int], free: Free, models_dir: Path | None) -> tuple[bool, int, int, str]:
    need, src = estimate_peak(mode, device, image_size, models_dir)
    have = free.vram_bytes if (device.startswith("cuda") and free.vram_bytes is not None) else free.ram_bytes
    return need <= have * SAFETY_MARGIN, need, have, src


def choose(
    device: str,
    image_size: tuple[int, int],
    models_dir: Path | None = None,
    free: Free | None = None,
    available: Callable[[MemoryMode], bool] | None = None,
) -> Choice:
    """Highest-ranked pasting mode that fits; ``low`` with an honest reason if none does.

    ``available(mode)`` says whether the mode's weights are present: modes without
    them are passed over while any mode with weights fits (someone who downloaded
    only GPEN-BFR-256 gets ``low``, not a missing-weights error for ``quality``).
    """
    free = free or free_memory(device)
    where = "VRAM" if device.startswith("cuda") else "RAM"
    ranked = sorted((m for m in MODES.values() if m.paste), key=lambda m: -m.rank)
    have_weights = [m for m in ranked if available is None or available(m)]
    skipped = [m.name for m in ranked if m not in have_weights]
    why_skip = f"; passed over {', '.join(skipped)} (weights not downloaded)" if skipped and have_weights else ""
    for m in have_weights or ranked:
        ok, need, have, src = _fits(m, device, image_size, free, models_dir)
        if ok:
            return Choice(m, f"auto chose {m.name}: needs ~{format_bytes(need)} {where} ({src}), {format_bytes(have)} free{why_skip}")
    low = ranked[-1]
    _, need, have, src = _fits(low, device, image_size, free, models_dir)
    return Choice(low, f"auto chose {low.name}, the lightest mode: even it may need ~{format_bytes(need)} {where}, {format_bytes(have)} free")


def check_fits(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None = None, free: Free | None = None) -> Choice | None:
    """None when ``mode`` fits; else the lighter mode to run instead, with the reason."""
    free = free or free_memory(device)
    ok, need, have, src = _fits(mode, device, image_size, free, models_dir)
    if ok:
        return None
    lighter = choose(device, image_size, models_dir, free)
    if lighter.mode.rank >= mode.rank:
        return None
    where = "VRAM" if device.startswith("cuda") else "RAM"
    return Choice(
        lighter.mode,
        f"{mode.name} needs ~{format_bytes(need)} {where} but only {format_bytes(have)} is free: ran {lighter.mode.name} instead",
    )
