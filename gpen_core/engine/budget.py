"""The memory budget: what is free now, what each mode needs (measured on this machine, else a built-in estimate;
the reason says which) and the best mode that fits."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import psutil

from gpen_core.platform.meter import format_bytes
from gpen_core.modes import AUTO, MODES, TASKS, MemoryMode, get_mode
from gpen_core.platform.zerogpu import on_zerogpu
from gpen_core.engine.fit import SAFETY_MARGIN, Ranking, fits, rank  # noqa: F401  (SAFETY_MARGIN: read as budget's)
from gpen_core.engine.runtime_choice import RequestPlan

if TYPE_CHECKING:
    from gpen_core.engine.profile_records import Profile
    from gpen_core.options import RestoreOptions

# Built-in peaks above the idle process until the hardware check measures this machine: each mode's worst
# measured peak on the project's CPU machines, rounded up (README, "Memory modes").
_CPU_MODEL_BYTES = {"low": 440e6, "faces-only": 1.11e9, "balanced": 1.15e9, "quality": 1.45e9}
# GPEN's 1024 px task networks (colorize, inpaint), per mode: cold peaks rounded up, plus the parsing
# mask where the mode parses (docs/tasks.md). Seg2face uses the restoration figures.
_TASK_1024_BYTES = {"faces-only": 1.0e9, "balanced": 1.25e9, "quality": 1.8e9}
_TASK_COVERED_PIXELS = 3000 * 2000  # the largest photo behind the task figures
_COVERED_PIXELS = 4000 * 3000  # the largest workload behind the mode figures
_BYTES_PER_PIXEL = 40  # decode, working copy, result and encode buffers, uint8 and float
# The identity check, 43 MB measured (docs/identity.md), rounded up: the mode figures above predate it.
IDENTITY_BYTES = 45_000_000
ESTIMATE_SOURCE = "built-in estimate, not measured on this machine (run the hardware check to measure)"
VRAM_ESTIMATE_SOURCE = (
    "built-in VRAM estimate from the networks' sizes (weights, a float32 copy for float16 overflows, "
    "activations), not measured on this GPU (run the hardware check to measure)"
)


# What a mode needs in VRAM on a GPU until measured: every figure is an estimate, shown as one.
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Live feature maps at the generator's peak, in units of its largest one: the styled conv's
# input and output, the noise half, the skip's RGB, and the fast path's split buffers.
GENERATOR_LIVE = 6
# Detector activations per pixel of its (detect_side-bounded) input, float32: ResNet-50's
# stride-4 stage holds 256 channels at 1/16 of the pixels (64 floats a pixel) and about
# four such maps are live; mobilenet0.25's widest stage is 16× narrower.
DETECTOR_BYTES_PER_PIXEL = {"resnet50": 4 * 64 * 4, "mobilenet0.25": 4 * 4 * 4}
# ParseNet at its input size: 64 channels at full resolution, about four maps live, float32.
PARSER_BYTES_PER_PIXEL = 64 * 4 * 4
WORKSPACE_BYTES = 256 * 2**20
# The prepared generator's bytes over its parameters' in the same dtype (folded modulation, rearranged
# upsampling weights), measured and rounded up: docs/gpu.md, "Built-in VRAM estimates".
PREPARED_RATIO = {"float32": 1.08, "half": 1.53}
# RetinaFace parameter + buffer counts (facexlib's classes; tests/test_cuda_defects.py counts
# them again from facexlib on the meta device): facexlib is not imported to estimate.
DETECTOR_ELEMENTS = {"mobilenet0.25": 426_608 + 6_735, "resnet50": 27_293_600 + 58_057}


@dataclass(frozen=True)
class VramEstimate:
    """Bytes per part of one request in one mode on a GPU (all estimates); ``float32_fallback``: the copy
    kept for a face whose float16 output overflows (PreparedForward.float32_twin)."""

    weights: int
    float32_fallback: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.float32_fallback + self.activations


@lru_cache(maxsize=None)
def network_elements(model: str) -> int:
    """Parameters + buffers of the registry generator ``model``, or of the released ParseNet ("parsenet": 512 px,
    19 classes), counted on the meta device."""
    import torch

    from gpen_core.networks.arch import GPEN
    from gpen_core.networks.parsenet import ParseNet
    from gpen_core.weights.lookup import REGISTRY

    with torch.device("meta"):
        net = ParseNet(in_size=512, out_size=512, parsing_ch=19) if model == "parsenet" else GPEN(REGISTRY[model].arch)
    return sum(t.numel() for t in (*net.parameters(), *net.buffers()))


def vram_estimate(mode: MemoryMode) -> VramEstimate:
    """VRAM one request in ``mode`` needs on a GPU above what the process held before, estimated from the
    networks' sizes (docs/gpu.md, "Built-in VRAM estimates"); the photo's full-frame buffers stay in RAM."""
    from gpen_core.weights.lookup import REGISTRY

    dtype = mode.cuda_dtype
    gen = network_elements(mode.model)
    arch = REGISTRY[mode.model].arch
    channels = arch.channels()
    largest = max(2 * channels[r] * r * r for r in channels if r <= arch.size)  # one face's features + noise half
    ratio = PREPARED_RATIO["float32" if dtype == "float32" else "half"]
    weights = int(gen * _DTYPE_BYTES[dtype] * ratio) + DETECTOR_ELEMENTS[mode.detector] * 4
    acts = GENERATOR_LIVE * largest * _DTYPE_BYTES[dtype] + WORKSPACE_BYTES
    acts += DETECTOR_BYTES_PER_PIXEL[mode.detector] * mode.detect_side**2
    if mode.parsing:
        weights += network_elements("parsenet") * 4
        acts += PARSER_BYTES_PER_PIXEL * mode.parse_input**2
    fallback = int(gen * 4 * PREPARED_RATIO["float32"]) if dtype != "float32" else 0
    return VramEstimate(weights=weights, float32_fallback=fallback, activations=acts)


@dataclass(frozen=True)
class Choice:
    """The mode a request or a clip starts in, and why: ``chosen`` when ``auto`` chose it; else a lighter mode
    than asked when that does not fit (``reason`` says so), or the one asked (``reason`` "")."""

    mode: MemoryMode
    reason: str
    chosen: bool = True
    detail: str = ""  # auto's reason after "auto chose <mode>", for a caller that names what it chose for


@dataclass(frozen=True)
class Work:
    """What a request asks beyond restoring the faces of its photo, each adding to its peak."""

    upscale: int = 1  # the background ×upscale (upscale_extra_bytes)
    tile: int | None = None  # the upscaler's tile (RestoreOptions.tile; None: from the mode's budget)
    task: str = "enhance"  # GPEN's task: only modes with a plan for it, with its network's peaks
    identity: str = "auto"  # the identity switch: its check's memory where it runs (identity_bytes)

    @classmethod
    def of(cls, opts: "RestoreOptions") -> "Work":
        return cls(opts.upscale, opts.tile, opts.task, opts.identity_switch)


@dataclass(frozen=True)
class Binding:
    """Which memory binds a request ("RAM" or "VRAM") and how many bytes of it are free."""

    name: Literal["RAM", "VRAM"]
    free_bytes: int


@dataclass(frozen=True)
class Free:
    """Memory free now; VRAM None without CUDA."""

    ram_bytes: int
    vram_bytes: int | None

    def binding(self, device: str) -> Binding:
        """VRAM on a GPU whose free VRAM is known, else RAM (no CUDA, or ZeroGPU outside a GPU call)."""
        if device.startswith("cuda") and self.vram_bytes is not None:
            return Binding("VRAM", self.vram_bytes)
        return Binding("RAM", self.ram_bytes)


def free_memory(device: str) -> Free:
    """RAM and VRAM free now on ``device``. VRAM counts what this process's caching allocator holds there (each
    mode's figure includes the cache's models); None without CUDA and on ZeroGPU (not readable there)."""
    ram = int(psutil.virtual_memory().available)
    vram = None
    if device.startswith("cuda") and not on_zerogpu():
        import torch

        dev = torch.device(device)
        vram = int(torch.cuda.mem_get_info(dev)[0]) + int(torch.cuda.memory_reserved(dev))
    if os.environ.get("GPEN_FREE_RAM_BYTES"):  # tests and capped containers
        ram = int(float(os.environ["GPEN_FREE_RAM_BYTES"]))
    if os.environ.get("GPEN_FREE_VRAM_BYTES") and vram is not None:
        vram = int(float(os.environ["GPEN_FREE_VRAM_BYTES"]))
    return Free(ram, vram)


def upscale_extra_bytes(mode: MemoryMode, image_size: tuple[int, int], upscale: int = 1, tile: int | None = None) -> int:
    """RAM that upscaling ×``upscale`` adds to a request in ``mode`` (0 at ×1 and in a mode that does not paste).
    On a GPU it is added to the binding memory: it errs on the side of stepping down."""
    if upscale <= 1 or not mode.paste:
        return 0
    from gpen_core.upscale.tiles import preview

    w, h = image_size
    return preview(w, h, upscale, mode.name, tile).extra_bytes


def identity_bytes(mode: MemoryMode, device: str, task: str, identity: str, *, measured: bool = False) -> int:
    """RAM the identity check adds to a request in ``mode``: 0 where it does not run, on a GPU whose VRAM
    binds (the check runs on the CPU), and where a measured peak already holds it (the default switch)."""
    from gpen_core.faces.identity import runs_for

    if (device.startswith("cuda") and not on_zerogpu()) or not runs_for(mode.name, identity, task):
        return 0
    if measured and runs_for(mode.name, "auto", task):
        return 0
    return IDENTITY_BYTES


def _need(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None, work: Work,
          profile: Profile | None = None) -> tuple[int, int, str]:
    """(peak without upscaling, what upscaling adds, where the figures come from), the identity check counted."""
    from gpen_core import modes  # per call: every sizing of the shrunk photo asks the one rule
    from gpen_core.engine.profile_store import measured

    w, h = modes.preshrink_size(*image_size, mode.max_side)
    row = measured(mode.name, device, models_dir, task=work.task, profile=profile) if work.task != "enhance" else None
    extra = 0
    if row is not None:  # the hardware check's row for the task
        # Photos beyond the row's workload add the built-in growth (one face's row cannot measure one).
        more = max(0, w * h - row.covered_pixels) * _BYTES_PER_PIXEL
        src = row.source + (f"; ~{format_bytes(more)} of it estimated for the photo's size" if more else "")
        base = int(row.peak_bytes + more + _f32_copy(mode, device, TASKS[work.task].model))
    elif work.task in ("colorize", "inpaint"):
        base = int(_TASK_1024_BYTES[mode.name] + max(0, w * h - _TASK_COVERED_PIXELS) * _BYTES_PER_PIXEL)
        src = (f"built-in estimate for GPEN's 1024 px {work.task} network, measured on the project's CPU machine, "
               "not on this one (run the hardware check to measure)")
    else:  # the mode's figures (seg2face's too)
        peak = measured(mode.name, device, models_dir=models_dir, profile=profile)
        if peak is not None:
            # The measured peak covers photos up to its largest workload: only pixels beyond that add.
            more = max(0, w * h - peak.covered_pixels) * (peak.bytes_per_pixel or _BYTES_PER_PIXEL)
            src = "measured on this machine"
            copy = _f32_copy(mode, device, mode.model)
            if copy:
                more += copy
                src += f", plus ~{format_bytes(copy)} estimated for the float32 copy a float16 overflow loads"
            base = int(peak.peak_bytes + more)
        elif device.startswith("cuda") and not on_zerogpu():
            base, src = vram_estimate(mode).total, VRAM_ESTIMATE_SOURCE
        else:
            base = int(_CPU_MODEL_BYTES[mode.name] + max(0, w * h - _COVERED_PIXELS) * _BYTES_PER_PIXEL)
            src = ESTIMATE_SOURCE
        extra = upscale_extra_bytes(mode, image_size, work.upscale, work.tile)
        if extra:
            src += f"; ~{format_bytes(extra)} of it estimated for upscaling ×{work.upscale}"
    check = identity_bytes(mode, device, work.task, work.identity, measured=src.startswith("measured on this machine"))
    if check:
        base += check
        src += f"; +{format_bytes(check)} for the identity check (measured: benchmarks/identity.py --cost)"
    return base, extra, src


def _f32_copy(mode: MemoryMode, device: str, model: str | None) -> int:
    """VRAM of the float32 copy of ``model`` a float16 overflow loads on a GPU (0 on the CPU or in float32):
    the check runs synthetic weights, which never overflow, so its measured peak never held it."""
    if model is None or not device.startswith("cuda") or mode.cuda_dtype == "float32":
        return 0
    return int(network_elements(model) * 4 * PREPARED_RATIO["float32"])


def estimate_peak(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None = None, *,
                  work: Work = Work(), profile: Profile | None = None) -> tuple[int, str]:
    """(bytes the call needs above the idle process on its binding memory, where the figure comes from), with
    what ``work`` adds; ``profile``: a hardware check's result in place of the one saved for this machine."""
    base, extra, src = _need(mode, device, image_size, models_dir, work, profile)
    return base + extra, src


def request_plan(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None, start_rss: int, *,
                 work: Work = Work()) -> RequestPlan | None:
    """The memory plan a request in ``mode`` keeps to: :func:`estimate_peak` above ``start_rss``. None on a GPU:
    the plan guards the RAM an OpenVINO conversion (CPU only) would take."""
    if device.startswith("cuda"):
        return None
    planned, _ = estimate_peak(mode, device, image_size, models_dir, work=work)
    return RequestPlan(mode.name, planned, start_rss)


def choose(device: str, image_size: tuple[int, int], models_dir: Path | None = None, free: Free | None = None,
           available: Callable[[MemoryMode], bool] | None = None, *, work: Work = Work()) -> Choice:
    """Highest-ranked pasting mode of ``work.task`` that fits, else the lightest with an honest reason; modes whose
    weights are not ``available`` are passed over while any with weights fits."""
    free = free or free_memory(device)
    total, upscaling, source = {}, {}, {}  # by mode: the need with upscaling, upscaling's share, the figures' source
    for name in TASKS[work.task].modes:
        base, upscaling[name], source[name] = _need(MODES[name], device, image_size, models_dir, work)
        total[name] = base + upscaling[name]
    missing = {n: "weights not downloaded" for n in total if available is not None and not available(MODES[n])}
    if len(missing) == len(total):
        missing = {}  # nothing has its weights: rank them all, the load will say what is missing
    bound = free.binding(device)
    ranked = rank(total, bound.free_bytes, binding=bound.name, passed_over=missing)
    where, have, upscale = bound.name, bound.free_bytes, work.upscale
    skipped = [m.mode for m in ranked.modes if not m.runnable]
    why_skip = f"; passed over {', '.join(skipped)} (weights not downloaded)" if skipped else ""

    def plain_fits(name: str) -> bool:  # fits once upscaling's share is taken off
        return bool(upscaling[name]) and fits(total[name] - upscaling[name], have)

    def sized(name: str) -> str:
        return f"~{format_bytes(total[name])} {where} ({source[name]})"

    best = ranked.best
    if best is not None:
        too_big = [f"{m.mode} (needs ~{format_bytes(m.need_bytes)} with upscaling, "
                   f"~{format_bytes(m.need_bytes - upscaling[m.mode])} without)"
                   for m in ranked.above(best.mode)[::-1] if m.runnable and plain_fits(m.mode)]
        they = "it fits" if len(too_big) == 1 else "they fit"
        why_up = f"; passed over {', '.join(too_big)}: {they} only without upscaling ×{upscale}" if too_big else ""
        detail = f": needs {sized(best.mode)}, {format_bytes(have)} free{why_skip}{why_up}"
        return Choice(MODES[best.mode], f"auto chose {best.mode}{detail}", detail=detail)
    low = ranked.lightest.mode
    fix = f"; it would fit without upscaling ×{upscale}: choose a smaller upscale" if plain_fits(low) else ""
    detail = f", the lightest mode: even it may need {sized(low)}, {format_bytes(have)} free{fix}"
    return Choice(MODES[low], f"auto chose {low}{detail}", detail=detail)


def check_fits(mode: MemoryMode, device: str, image_size: tuple[int, int], models_dir: Path | None = None,
               free: Free | None = None, *, work: Work = Work()) -> Choice | None:
    """None when ``mode`` fits with what ``work`` adds; else the lighter mode to run instead, with the reason."""
    free = free or free_memory(device)
    need, src = estimate_peak(mode, device, image_size, models_dir, work=work)
    bound = free.binding(device)
    if fits(need, bound.free_bytes):
        return None
    lighter = choose(device, image_size, models_dir, free, work=work)
    if lighter.mode.rank >= mode.rank:
        return None
    return Choice(lighter.mode, f"{mode.name} needs ~{format_bytes(need)} {bound.name} ({src}) but only "
                                f"{format_bytes(bound.free_bytes)} is free: ran {lighter.mode.name} instead", False)


def mode_to_start(opts: "RestoreOptions", device: str, size: tuple[int, int], models_dir: Path | None,
                  available: Callable[[MemoryMode], bool]) -> Choice:
    """The one mode choice for a photo and for a clip's frames of ``size``: auto's choice, or the asked mode
    when it fits."""
    work = Work.of(opts)
    if opts.mode == AUTO:
        return choose(device=device, image_size=size, models_dir=models_dir, available=available, work=work)
    mode = get_mode(opts.mode)
    return check_fits(mode, device=device, image_size=size, models_dir=models_dir, work=work) or Choice(mode, "", False)
