"""The memory modes: named, measured presets for the folk advice around GPEN, one literal table (``MODES``).
``auto`` is not a row: :mod:`gpen_core.engine.budget` resolves it per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpen_core.errors import InputError

Detector = Literal["mobilenet0.25", "resnet50"]
DTypePref = Literal["float32", "bfloat16", "float16"]
OutputFormat = Literal["jpeg", "png"]


@dataclass(frozen=True)
class MemoryMode:
    name: str
    hint: str  # one line for the radio button: what this mode trades
    model: str  # registry name of the generator; the checkpoint decides the architecture
    # RetinaFace backbone: mobilenet0.25 is ~1.7 MB and ~10x cheaper than resnet50 (~105 MB).
    detector: Detector
    cuda_dtype: DTypePref  # on CUDA: float16 halves VRAM with no visible change
    # Compute dtype on CPU: bfloat16 only where the CPU has native bf16 (AVX-512 BF16 / AMX);
    # float16 is never used on CPU (measured ~500x slower than float32 there).
    cpu_dtype: DTypePref
    # Longest side the input is shrunk to before anything else (None: never). Big photos
    # dominate RAM through full-frame buffers, not through the network.
    max_side: int | None
    threads: int | None  # torch intra-op threads (None: torch's default): fewer, smaller per-thread buffers
    output_format: OutputFormat  # of the downloadable result: JPEG keeps big results small, PNG is lossless
    paste: bool  # paste restored faces back into the photo (False: return only the restored crops)
    # Paste through GPEN's face-parsing mask (when its weights are present), as the official code does; else
    # GPEN's feathered rectangle. Off only where the mode cannot afford it (cost: docs/paste-mask.md).
    parsing: bool
    # Detection runs on a copy shrunk to this longest side (the official code uses 1000 px
    # for photos over 1500 px); boxes and landmarks are mapped back.
    detect_side: int
    rank: int  # higher is better quality; ``auto`` picks the highest rank that fits
    parse_input: int = 512  # ParseNet input side (official); 256 parses a shrunk face, a quarter of the compute
    # Detect on the full-size photo up to this longest side, ``detect_side`` only above it (the official
    # rule: 1000 px above 1500 px). None: shrink above ``detect_side`` (same recall: docs/detection.md).
    detect_shrink_above: int | None = None
    detect_resize: Literal["area", "linear"] = "area"  # "area": sharper small faces; "linear": the official
    # With upscaling: detect on the photo resized to the upscaled size (official: tiny faces are found
    # there), else detect at 1× and scale the boxes and landmarks.
    detect_upscaled: bool = False
    # Under ``auto``, may this mode run its networks on OpenVINO where measured faster? Its runtime stays
    # resident (`low` 448-455 → 530-531 MiB: docs/performance.md); ``--backend openvino`` still runs it there.
    auto_openvino: bool = True
    # Buffers of this size and up get a mapping of their own, handed back to the OS when freed
    # (gpen_core.platform.heap): out of the C heap, whose holes would make a lighter mode after a heavy one
    # peak higher (docs/performance.md, "A lighter mode after a heavier one").
    heap_blocks: int = 1 << 20


MODES: dict[str, MemoryMode] = {
    m.name: m
    for m in (
        MemoryMode(
            name="low", hint="GPEN-BFR-256, small detector, photo shrunk to 2048 px, JPEG: fits almost anywhere",
            model="GPEN-BFR-256", detector="mobilenet0.25", cuda_dtype="float16", cpu_dtype="float32",
            max_side=2048, threads=2, output_format="jpeg", paste=True, parsing=False, detect_side=800, rank=1,
            auto_openvino=False,
            # glibc's own ceiling (32 MiB): mapped on their own, its buffers cost 40 % more CPU (docs/performance.md).
            heap_blocks=32 << 20,
        ),
        MemoryMode(
            name="faces-only",
            hint="GPEN-BFR-512 on each face, no paste-back: returns the restored crops (quickest for big group photos)",
            model="GPEN-BFR-512", detector="mobilenet0.25", cuda_dtype="float16", cpu_dtype="bfloat16",
            max_side=None, threads=None, output_format="png", paste=False, parsing=False, detect_side=1000, rank=2,
        ),
        MemoryMode(
            name="balanced", hint="GPEN-BFR-512 in float16 (GPU) / bfloat16 (recent CPUs): half the memory, same look",
            model="GPEN-BFR-512", detector="mobilenet0.25", cuda_dtype="float16", cpu_dtype="bfloat16",
            max_side=4096, threads=None, output_format="jpeg", paste=True, parsing=True, detect_side=1000, rank=3,
            parse_input=256,  # a quarter of the parser's compute; docs/paste-mask.md
        ),
        MemoryMode(
            name="quality",
            hint="GPEN-BFR-512 in float32, ResNet-50 detector, GPEN's parsing mask (if present), lossless PNG",
            model="GPEN-BFR-512", detector="resnet50", cuda_dtype="float32", cpu_dtype="float32",
            max_side=None, threads=None, output_format="png", paste=True, parsing=True, detect_side=1000, rank=4,
            detect_shrink_above=1500, detect_resize="linear", detect_upscaled=True,
        ),
    )
}

TaskName = Literal["enhance", "colorize", "inpaint", "seg2face"]


@dataclass(frozen=True)
class Task:
    """One of GPEN's released tasks: which generator it runs and how the official code feeds it."""

    name: TaskName
    label: str  # what the user picks (app radio, CLI help)
    model: str | None  # registry name of its generator; None: the memory mode's (restoration)
    # The official FaceGAN ``is_norm``: True feeds the network [-1, 1] and reads [-1, 1] back;
    # False (Segmentation2Face) feeds [0, 1] and clips the output from [0, 1].
    is_norm: bool
    # The official code runs it on aligned inputs only and we have no photo flow for it.
    aligned_only: bool
    # Aligned input: True returns the network's output at the input's size (restoration,
    # colorization); False at the network's size (the official inpainting / seg2face).
    aligned_output_at_input_size: bool
    # Memory modes with a plan for its network. 1024 px networks do not fit ``low``'s promise
    # ("fits almost anywhere"): that mode refuses them, naming the mode that fits (docs/tasks.md).
    modes: tuple[str, ...]


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("enhance", "Restore faces", None, True, False, True, ("low", "faces-only", "balanced", "quality")),
        Task("colorize", "Colorize faces", "GPEN-Colorization-1024", True, False, True, ("faces-only", "balanced", "quality")),
        Task("inpaint", "Repair damaged faces", "GPEN-Inpainting-1024", True, False, False, ("faces-only", "balanced", "quality")),
        Task("seg2face", "Face from a label map", "GPEN-Seg2face-512", False, True, False, ("faces-only", "balanced", "quality")),
    )
}
TASK_CHOICES: tuple[str, ...] = tuple(TASKS)


def get_task(name: str) -> Task:
    """The task called ``name``; InputError names the valid choices."""
    try:
        return TASKS[name]
    except KeyError:
        raise InputError(f"unknown task {name!r}; choose one of: {', '.join(TASK_CHOICES)}") from None


def preshrink_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """The (width, height) a mode's pre-shrink gives a photo: the longest side brought down to ``max_side`` (rounded,
    at least 1 px), never enlarged. The one rule behind the shrink and every estimate made before it."""
    if not max_side or max(width, height) <= max_side:
        return width, height
    k = max_side / max(width, height)
    return max(1, round(width * k)), max(1, round(height * k))


def generator_name(mode: MemoryMode, task: str = "enhance", model: str | None = None) -> str:
    """The generator a request runs: the caller's ``model``, else the task's, else the mode's."""
    return model or TASKS[task].model or mode.model


AUTO = "auto"

# The identity check's line (docs/identity.md): over this face-descriptor distance dlib calls two faces different
# people. Here, below every room, so every figure shown beside a distance is this one with this meaning.
IDENTITY_THRESHOLD = 0.6
IDENTITY_THRESHOLD_MEANING = "dlib's own same-person threshold on LFW photos, not a promise about restorations"
# "0.6 (dlib's own …)": the threshold as a sentence names it.
IDENTITY_THRESHOLD_TEXT = f"{IDENTITY_THRESHOLD:g} ({IDENTITY_THRESHOLD_MEANING})"
MODE_CHOICES: tuple[str, ...] = (AUTO, *MODES)
# Pillow refuses any image over 2 × PIL.Image.MAX_IMAGE_PIXELS in its own words: a raised pixel limit stays below it.
PILLOW_MAX_PIXELS = 178_956_970


def get_mode(name: str) -> MemoryMode:
    """The mode called ``name`` (not ``auto``); InputError names the valid choices."""
    try:
        return MODES[name]
    except KeyError:
        raise InputError(f"unknown memory mode {name!r}; choose one of: {', '.join(MODE_CHOICES)}") from None


def lighter_than(mode: MemoryMode, task: str = "enhance") -> MemoryMode | None:
    """The next lighter mode that still pastes faces back and has a plan for ``task`` (for OOM retries), or None."""
    lighter = [m for m in MODES.values() if m.paste and m.name in TASKS[task].modes and m.rank < mode.rank]
    return max(lighter, key=lambda m: m.rank, default=None)


# The official yangxy/GPEN pipeline (face_enhancement.py, face_detect/retinaface_detection.py),
# what each mode is measured against in :func:`official_departures`.
OFFICIAL_DETECTOR: Detector = "resnet50"
OFFICIAL_DETECT_SIDE, OFFICIAL_SHRINK_ABOVE = 1000, 1500


def official_departures(mode: MemoryMode, *, detector: str | None = None, detection: bool = True,
                        dtype: str | None = None, upscale: int = 1, parsing: bool | None = None,
                        pasted: bool = True) -> str:
    """One line: how a request in ``mode`` departs from the official GPEN pipeline ("" when it does not), from the
    mode table and what the request really used (``detection=False``: nothing detected; ``pasted=False``: nothing
    pasted back)."""
    parts: list[str] = []
    det = detector or mode.detector
    above = mode.detect_shrink_above
    if detection:
        if det != OFFICIAL_DETECTOR:
            parts.append(f"{det} detector (official ResNet-50)")
        if mode.detect_side != OFFICIAL_DETECT_SIDE or above != OFFICIAL_SHRINK_ABOVE:
            side = mode.detect_side
            ours = f"full size up to {above} px, {side} px above" if above else f"a {side} px copy"
            official = f"full size up to {OFFICIAL_SHRINK_ABOVE} px, {OFFICIAL_DETECT_SIDE} px above"
            parts.append(f"detection on {ours} (official: {official})")
        if mode.detect_resize != "linear":
            parts.append("detection copy shrunk with INTER_AREA (official INTER_LINEAR)")
        if upscale > 1 and mode.paste and not mode.detect_upscaled:
            parts.append("detection at 1× with boxes scaled to the upscaled photo (official: on the upscaled photo)")
    if mode.max_side:
        parts.append(f"photos over {mode.max_side} px shrunk first (official: never)")
    if dtype and dtype != "float32":
        parts.append(f"generator in {dtype} (official float32)")
    if pasted and not mode.paste:
        parts.append("faces not pasted back (official pastes them)")
    elif pasted and (parsing is False or not mode.parsing):
        parts.append("feathered-rectangle paste mask (official: ParseNet mask)")
    elif pasted and mode.parse_input != 512:
        parts.append(f"ParseNet at {mode.parse_input} px (official 512 px)")
    return ("vs official GPEN: " + ", ".join(parts)) if parts else ""

