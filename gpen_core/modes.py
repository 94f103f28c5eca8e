"""The memory modes: named, measured presets for the folk advice around GPEN.

One literal table (``MODES``). ``auto`` is not a row: it is resolved at request
time to one of these rows by :mod:`gpen_core.engine.budget` from measured peaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Detector = Literal["mobilenet0.25", "resnet50"]
DTypePref = Literal["float32", "bfloat16", "float16"]
OutputFormat = Literal["jpeg", "png"]


@dataclass(frozen=True)
class MemoryMode:
    name: str
    # One line for the radio button: what this mode trades.
    hint: str
    # Registry name of the generator; the checkpoint decides the architecture.
    model: str
    # RetinaFace backbone: mobilenet0.25 is ~1.7 MB and ~10x cheaper than resnet50 (~105 MB).
    detector: Detector
    # Compute dtype on CUDA: float16 halves VRAM with no visible change.
    cuda_dtype: DTypePref
    # Compute dtype on CPU: bfloat16 only where the CPU has native bf16 (AVX-512 BF16 / AMX);
    # float16 is never used on CPU (measured ~500x slower than float32 there).
    cpu_dtype: DTypePref
    # Longest side the input is shrunk to before anything else (None: never). Big photos
    # dominate RAM through full-frame buffers, not through the network.
    max_side: int | None
    # torch intra-op threads (None: torch's default). Fewer threads, smaller per-thread buffers.
    threads: int | None
    # Format of the downloadable result; JPEG keeps big results small, PNG is lossless.
    output_format: OutputFormat
    # Paste restored faces back into the photo (False: return only the restored crops).
    paste: bool
    # Paste through GPEN's face-parsing mask (ParseNet-latest.pth or facexlib's
    # parsing_parsenet.pth, when present), as the official code always does; else GPEN's
    # feathered rectangle. Off only where the mode cannot afford it (README, "How faces
    # are pasted": measured cost per face).
    parsing: bool
    # Detection runs on a copy shrunk to this longest side (the official code uses 1000 px
    # for photos over 1500 px); boxes and landmarks are mapped back.
    detect_side: int
    # Higher is better quality; ``auto`` picks the highest rank that fits.
    rank: int
    # ParseNet input side: 512 is the official; 256 parses a shrunk face (a quarter of
    # the compute, logits brought back to 512 before the class map).
    parse_input: int = 512
    # Detect on the full-size photo up to this longest side, shrinking to ``detect_side``
    # only above it (the official rule: 1000 px above 1500 px). None: shrink above
    # ``detect_side``. Measured: same recall on the Solvay photo either way (README).
    detect_shrink_above: int | None = None


MODES: dict[str, MemoryMode] = {
    m.name: m
    for m in (
        MemoryMode(
            name="low",
            hint="GPEN-BFR-256, small detector, photo shrunk to 2048 px, JPEG: fits almost anywhere",
            model="GPEN-BFR-256",
            detector="mobilenet0.25",
            cuda_dtype="float16",
            cpu_dtype="float32",
            max_side=2048,
            threads=2,
            output_format="jpeg",
            paste=True,
            parsing=False,
            detect_side=800,
            rank=1,
        ),
        MemoryMode(
            name="faces-only",
            hint="GPEN-BFR-512 on each face, no paste-back: returns the restored crops (quickest for big group photos)",
            model="GPEN-BFR-512",
            detector="mobilenet0.25",
            cuda_dtype="float16",
            cpu_dtype="bfloat16",
            max_side=None,
            threads=None,
            output_format="png",
            paste=False,
            parsing=False,
            detect_side=1000,
            rank=2,
        ),
        MemoryMode(
            name="balanced",
            hint="GPEN-BFR-512 in float16 (GPU) / bfloat16 (recent CPUs): half the memory, same look",
            model="GPEN-BFR-512",
            detector="mobilenet0.25",
            cuda_dtype="float16",
            cpu_dtype="bfloat16",
            max_side=4096,
            threads=None,
            output_format="jpeg",
            paste=True,
            parsing=True,
            detect_side=1000,
            rank=3,
            parse_input=256,  # a quarter of the parser's compute; README, "How faces are pasted"
        ),
        MemoryMode(
            name="quality",
            hint="GPEN-BFR-512 in float32, ResNet-50 detector, GPEN's parsing mask (if present), lossless PNG",
            model="GPEN-BFR-512",
            detector="resnet50",
            cuda_dtype="float32",
            cpu_dtype="float32",
            max_side=None,
            threads=None,
            output_format="png",
            paste=True,
            parsing=True,
            detect_side=1000,
            rank=4,
            detect_shrink_above=1500,
        ),
    )
}

AUTO = "auto"
MODE_CHOICES: tuple[str, ...] = (AUTO, *MODES)


def get_mode(name: str) -> MemoryMode:
    """The mode called ``name`` (not ``auto``); InputError names the valid choices."""
    from gpen_core.errors import InputError

    try:
        return MODES[name]
    except KeyError:
        raise InputError(f"unknown memory mode {name!r}; choose one of: {', '.join(MODE_CHOICES)}") from None


def lighter_than(mode: MemoryMode) -> MemoryMode | None:
    """The next lighter mode that still pastes faces back (for OOM retries), or None."""
    pasting = sorted((m for m in MODES.values() if m.paste), key=lambda m: m.rank)
    lower = [m for m in pasting if m.rank < mode.rank]
    return lower[-1] if lower else None
