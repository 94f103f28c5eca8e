"""What a mode needs in VRAM on a GPU: an estimate from the networks' own sizes, until measured
(docs/gpu.md, "Built-in VRAM estimates"). Weights are counted on the ``meta`` device (nothing
allocated); the photo's full-frame buffers stay in RAM. Every figure here is an estimate, shown as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpen_core.modes import MemoryMode

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


def estimate(mode: MemoryMode) -> VramEstimate:
    """VRAM one request in ``mode`` needs on a GPU (generator in ``mode.cuda_dtype``; the
    detector and parser in float32), above what the process held before."""
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
