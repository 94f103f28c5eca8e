"""Which runtime runs a network: one pure decision for the generator, detector, parser and upscaler.

The model cache gathers the facts (:class:`RuntimeFacts`: the measured choice, whether the
network is converted for OpenVINO already, the RAM a conversion needs and the RAM free, another
thread converting it, whether the lifetime policy lets a conversion pay for itself) and
:func:`decide_runtime` turns them into a :class:`RuntimeDecision`; nothing here reads a file or
the clock, so every rule is testable with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Network = Literal["generator", "detector", "parser", "upscaler"]
Runtime = Literal["torch", "openvino"]

# The command that converts ahead, named in the note of a request that did not convert.
CONVERT_AHEAD = "python -m gpen_core download"


@dataclass(frozen=True)
class RuntimeFacts:
    """What one network's runtime decision rests on (gathered by the model cache)."""

    network: Network
    what: str  # the network in a sentence: "the generator GPEN-BFR-512", "the resnet50 detector"
    requested: str  # the request's backend: "auto", "torch" or "openvino"
    # The measured choice for this network, size and dtype on this CPU, before any first-use
    # concern: (runtime, why), from gpen_core.runtimes.openvino.generator.choose_mode_backend.
    measured: tuple[Runtime, str]
    torch_dtype: str  # the dtype it runs in on torch ("float32", "bfloat16", "float16")
    openvino_dtype: str  # the dtype it runs in on OpenVINO
    # Converted for OpenVINO already (the cached graph is current). A network that cannot be
    # traded for torch (the hardware check's random weights) counts as converted: it runs as chosen.
    converted: bool
    convert_ram: int  # bytes a first-use conversion adds to the process
    free_ram: int  # bytes of RAM free now
    convert_ram_estimated: bool = False  # ``convert_ram`` is an estimate from the file size, not measured
    converting: str = ""  # the file named in the free-RAM sentence (default ``what``)
    busy: str | None = None  # another thread is converting it right now: the sentence saying so
    # Whether the work ahead repays a conversion inside this request (the lifetime policy:
    # resident networks serve many requests or frames; one-shot serves one).
    conversion_pays: bool = True


@dataclass(frozen=True)
class RuntimeDecision:
    """The runtime and dtype one network runs in, and why. ``note``: a sentence for the result
    when the decision departs from what was measured or asked (the network ran on torch)."""

    runtime: Runtime
    dtype: str
    reason: str
    note: str | None = None


def decide_runtime(f: RuntimeFacts) -> RuntimeDecision:
    """torch or OpenVINO (and the dtype) for one network.

    The measured choice stands unless it is OpenVINO for a network not converted yet; then,
    under ``auto`` only (an explicit ``openvino`` converts as asked), the request runs torch
    this time when the conversion does not fit the free RAM, or when it cannot pay for itself
    (a one-shot request: the note says how to convert ahead), or when another thread is
    converting it right now (this request would repeat the work)."""
    runtime, why = f.measured
    if runtime == "torch":
        return RuntimeDecision("torch", f.torch_dtype, why)
    if f.converted or f.requested != "auto":
        return RuntimeDecision("openvino", f.openvino_dtype, why)
    instead = _no_room(f) or _does_not_pay(f) or f.busy
    if instead:
        return RuntimeDecision("torch", f.torch_dtype, instead, instead)
    return RuntimeDecision("openvino", f.openvino_dtype, why)


def _no_room(f: RuntimeFacts) -> str | None:
    """The sentence when the first-use conversion needs more RAM than is free."""
    from gpen_core.runtimes.openvino.base import first_use_fallback

    return first_use_fallback("auto", "openvino", False, f.convert_ram, f.free_ram, f.converting or f.what,
                              estimated=f.convert_ram_estimated)


def _does_not_pay(f: RuntimeFacts) -> str | None:
    """The sentence when a one-shot request would convert for itself alone."""
    if f.conversion_pays:
        return None
    return (f"OpenVINO was measured faster here for {f.what}, but it is not converted yet, and converting it inside "
            "this single request would cost more time and memory than the request gains, so it ran on torch; "
            f"`{CONVERT_AHEAD}` converts it once ahead (the app, a folder of photos or a video also convert it), "
            "and later runs use OpenVINO")
