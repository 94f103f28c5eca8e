"""The typed result of one restore call, read by the UI, the CLI, benchmarks and tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gpen_core.modes import IDENTITY_THRESHOLD, MemoryMode

RamMethod = Literal["vmhwm", "sampling"]


@dataclass(frozen=True)
class Peaks:
    """Memory measured around one call. Bytes; VRAM fields are None without CUDA."""

    rss_bytes: int  # peak resident set size of the process during the call
    baseline_rss_bytes: int  # resident set size just before the call
    method: RamMethod  # "vmhwm": kernel high-water mark reset per call; "sampling": psutil every few ms
    vram_allocated_bytes: int | None = None  # torch.cuda.max_memory_allocated during the call
    vram_reserved_bytes: int | None = None  # torch.cuda.max_memory_reserved during the call
    baseline_vram_bytes: int | None = None  # torch.cuda.memory_allocated before the call
    vram_device: str | None = None  # the CUDA device the VRAM figures are for ("cuda:1"); None: not measured
    shared: str | None = None  # None: the call had the process to itself; else why its peaks include other work

    @property
    def rss_delta_bytes(self) -> int:
        return max(0, self.rss_bytes - self.baseline_rss_bytes)


@dataclass(frozen=True)
class Attempt:
    """One try of a request in one mode, with its own peaks (the out-of-memory ladder makes one per mode)."""

    mode: str  # the mode this attempt ran in
    peaks: Peaks  # measured around this attempt alone
    outcome: Literal["ok", "out of memory"]


@dataclass(frozen=True)
class Timings:
    """Seconds per stage of one call; ``total_s`` is wall time of the whole call."""

    total_s: float
    decode_s: float = 0.0
    detect_s: float = 0.0
    align_s: float = 0.0
    restore_s: float = 0.0
    paste_s: float = 0.0
    encode_s: float = 0.0
    load_s: float = 0.0  # model (re)loading inside this call, 0 when cached
    upscale_s: float = 0.0  # background upscaling (RealESRNet, all tiles); 0 when not asked
    identity_s: float = 0.0  # the identity check of every face (gpen_core.faces.identity); 0 when off

    def stages(self) -> dict[str, float]:
        """Seconds by stage name, in the order a request runs them."""
        order = ("load", "decode", "detect", "align", "upscale", "restore", "paste", "identity", "encode")
        return {name: getattr(self, f"{name}_s") for name in order}


@dataclass(frozen=True)
class UpscaleInfo:
    """How the background was upscaled (``RestoreResult.upscale``; None when it was not)."""

    factor: int  # 2 or 4: the output is exactly factor × the processed input
    upscaler: str  # registry name or file name of the RealESRNet checkpoint
    tile: int  # tile side in input px (the whole image when tiles == 1)
    pad: int  # context px around each tile
    tiles: int
    seconds: float
    dtype: str  # compute dtype of the upscaler ("float32", "bfloat16")


IdentityAction = Literal["restored", "kept original", "blended"]


@dataclass(frozen=True)
class IdentityCheck:
    """How far one restored face moved from the input face: dlib's descriptor distance between
    the same aligned crop before and after the generator (gpen_core.faces.identity)."""

    distance: float  # Euclidean distance of the two 128-D descriptors; 0 = unchanged
    action: IdentityAction  # what was pasted: the restored face, the original, or a blend toward it
    limit: float | None  # the user's limit over which ``action`` applied; None: measured only
    seconds: float  # this face's check: two chips and two descriptors
    # The two 128-D descriptors (input crop, restored crop), float64, for a clip to compare across frames.
    descriptors: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def over_threshold(self) -> bool:
        """Over IDENTITY_THRESHOLD: dlib would call them different people."""
        return self.distance > IDENTITY_THRESHOLD


@dataclass(frozen=True)
class Face:
    """One face. Boxes and landmarks are in input-image pixels (x, y)."""

    box: tuple[float, float, float, float]  # x0, y0, x1, y1
    score: float
    landmarks: np.ndarray  # 5×2 float32: left eye, right eye, nose, left/right mouth corner
    crop: np.ndarray  # aligned input crop, RGB uint8 S×S×3
    # What the result holds for this face, RGB uint8 S×S×3: the restored crop after the alpha blend,
    # or the input crop (or a blend toward it) where the identity check's limit applied.
    restored: np.ndarray
    identity: IdentityCheck | None = None  # None: the identity check did not run


@dataclass(frozen=True)
class RejectedFace:
    """A detection the plausibility screen refused (:mod:`gpen_core.faces.screen`): not restored, not pasted."""

    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in the pixels of ``RestoreResult.before`` (as ``Face.box``)
    score: float  # the detector's score
    reason: str  # why it is not a face, e.g. "its landmarks do not form a face"


@dataclass(frozen=True)
class NetworkRuntime:
    """What ran one network of a request, and why (``RestoreResult.runtimes``)."""

    network: Literal["generator", "detector", "parser", "upscaler"]
    name: str  # the weights it ran: registry name or file name ("GPEN-BFR-512", "resnet50")
    runtime: Literal["torch", "openvino"]
    reason: str  # why that runtime: "asked for", "measured faster here: …", a first-use fallback


@dataclass(frozen=True)
class FrameOutput:
    """One video frame restored, not encoded: ``image`` RGB uint8 H×W×3 with its faces pasted back (a new array),
    ``faces`` in the order pasted, ``timings`` this frame's stages (the clip's peaks are the caller's meter's)."""

    image: np.ndarray
    faces: tuple[Face, ...]
    notes: tuple[str, ...]
    timings: Timings


@dataclass(frozen=True)
class RestoreResult:
    """Everything one call produced and what it cost. ``image`` is RGB uint8 H×W×3: the photo with faces pasted
    back, or the input unchanged when no face was found or the mode does not paste."""

    image: np.ndarray
    faces: tuple[Face, ...]
    timings: Timings
    peaks: Peaks
    mode: MemoryMode  # the mode that actually ran
    requested_mode: str  # what the caller asked for ("auto" included)
    mode_reason: str  # why ``mode`` ran (auto's choice, a fallback); "" when as requested
    checkpoint: str  # registry name or path of the generator
    detector: str  # "mobilenet0.25", "resnet50", or "none" (aligned input)
    device: str  # "cpu" or "cuda:0"
    dtype: str  # compute dtype that ran: "float32", "bfloat16", "float16"
    output_format: str  # "jpeg" or "png": format of ``encoded``
    encoded: bytes = field(repr=False, default=b"")  # ``image`` (or the face grid) in output_format
    notes: tuple[str, ...] = ()  # everything changed from the request, said plainly
    input_size: tuple[int, int] = (0, 0)  # width, height of the decoded input
    processed_size: tuple[int, int] = (0, 0)  # width, height after any pre-shrink
    # Every attempt in order, the last the one that made this result (its peaks are ``peaks``); more than one when
    # the engine ran out of memory and stepped down.
    attempts: tuple[Attempt, ...] = ()
    # The decoded input as restored (RGB uint8, after any pre-shrink): callers show it as "before" instead of
    # decoding the file again outside the meter. None: not kept.
    before: np.ndarray | None = field(default=None, repr=False)
    upscale: UpscaleInfo | None = None  # background upscaling; None when the photo kept its size
    # The generator's runtime: "torch", or "openvino" (gpen_core.runtimes.openvino.generator), and why it was picked.
    backend: str = "torch"
    backend_reason: str = ""
    rejected: tuple[RejectedFace, ...] = ()  # detections the plausibility screen refused, in ``before``'s pixels
    task: str = "enhance"  # which of GPEN's tasks (gpen_core.modes.TASKS) made it
    runtimes: tuple[NetworkRuntime, ...] = ()  # every network the request ran, in the order loaded
    released: tuple[str, ...] = ()  # resident networks released before this request (its mode does not use them)
