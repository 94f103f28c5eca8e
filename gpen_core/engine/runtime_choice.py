"""Which runtime runs a network: :func:`decide_runtime`, one pure decision from the facts the model cache gathers
(nothing here reads a file or the clock)."""

from __future__ import annotations

from dataclasses import dataclass

from gpen_core.engine.lifetime import Network
from gpen_core.runtimes.openvino.choice import BackendChoice, Runtime


def convert_ahead_advice(own: bool, when: str = "") -> str:
    """How a network gets converted outside a request, ``when`` said after "once ahead": the one sentence every
    note and error gives (``own``: a checkpoint of the user's own, which `download` cannot convert)."""
    if own:  # `download` and the app convert the registry's files only
        return ("asking for OpenVINO once (`--backend openvino`) converts it (`python -m gpen_core download` "
                "and the app convert only the registry's files)")
    return f"`python -m gpen_core download` converts it once ahead{when} (the app also converts it in the background)"


@dataclass(frozen=True)
class RequestPlan:
    """The running request's memory plan: ``planned`` bytes of RAM above ``start_rss`` (the process as it started)."""

    mode: str
    planned: int
    start_rss: int


@dataclass(frozen=True)
class RuntimeFacts:
    """What one network's runtime decision rests on (gathered by the model cache)."""

    network: Network
    what: str  # the network in a sentence: "the generator GPEN-BFR-512", "the resnet50 detector"
    requested: str  # the request's backend: "auto", "torch" or "openvino"
    measured: BackendChoice  # the measured choice for it on this CPU, before any first-use concern
    torch_dtype: str  # the dtype it runs in on torch ("float32", "bfloat16", "float16")
    openvino_dtype: str  # the dtype it runs in on OpenVINO
    # Its OpenVINO graph is cached and current; the hardware check's random weights count as converted (run as chosen).
    converted: bool
    convert_ram: int  # bytes a first-use conversion adds to the process
    free_ram: int = 0  # bytes of RAM free now (read for a first use of OpenVINO only)
    convert_ram_estimated: bool = False  # ``convert_ram`` is an estimate from the file size, not measured
    converting: str = ""  # the file named in the free-RAM sentence (default ``what``)
    busy: str | None = None  # another thread is converting it right now: the sentence saying so
    # Why the OpenVINO cache cannot be written, and the fix: a network not converted yet runs on torch.
    unwritable: str | None = None
    conversion_pays: bool = True  # the lifetime policy's: does the work ahead repay a conversion now?
    plan: RequestPlan | None = None  # None outside a request (converting ahead, the hardware check): no plan
    plan_used: int = 0  # bytes the process holds above the plan's start now
    own_checkpoint: bool = False  # a file of the user's own, which `download` cannot convert ahead


@dataclass(frozen=True)
class RuntimeDecision:
    """The runtime and dtype one network runs in, and why; ``note``: the result's sentence when it departs from
    what was measured or asked."""

    runtime: Runtime
    dtype: str
    reason: str
    note: str | None = None


def decide_runtime(f: RuntimeFacts) -> RuntimeDecision:
    """torch or OpenVINO (and the dtype) for one network: the measured choice, but torch this time when ``auto``
    would convert it now and the conversion does not fit, does not pay, is another thread's, or breaks the plan."""
    why = f.measured.why
    if f.measured.runtime == "torch":
        return RuntimeDecision("torch", f.torch_dtype, why)
    if not f.converted and f.unwritable:
        instead = f"{f.unwritable}; so {f.what} ran on torch"
        return RuntimeDecision("torch", f.torch_dtype, instead, instead)
    if f.converted or f.requested != "auto":
        return RuntimeDecision("openvino", f.openvino_dtype, why)
    from gpen_core.runtimes.openvino.base import first_use_fallback

    no_room = first_use_fallback(f.convert_ram, f.free_ram, f.converting or f.what, estimated=f.convert_ram_estimated, where=_where(f))
    instead = no_room or _does_not_pay(f) or f.busy or _over_plan(f)
    if instead:
        return RuntimeDecision("torch", f.torch_dtype, instead, instead)
    return RuntimeDecision("openvino", f.openvino_dtype, why)


def _where(f: RuntimeFacts) -> str:
    """Whose measurement made OpenVINO the choice: this machine's, or (with a caveat) another CPU's of its kind."""
    return "here" if not f.measured.caveat else "on another CPU of this kind (not yet on this machine)"


def _faster(f: RuntimeFacts) -> str:
    return f"OpenVINO was measured faster {_where(f)} for {f.what}"


def _does_not_pay(f: RuntimeFacts) -> str | None:
    """The sentence when a one-shot request would convert for itself alone."""
    if f.conversion_pays:
        return None
    return (f"{_faster(f)}, but it is not converted yet, and converting it inside "
            f"this single request would cost more time and memory than the request gains, so it ran on torch; "
            f"{convert_ahead_advice(f.own_checkpoint)}, and later runs use OpenVINO")


def _over_plan(f: RuntimeFacts) -> str | None:
    """The sentence when converting inside this request would take it above its mode's memory plan."""
    p = f.plan
    if p is None or f.convert_ram <= p.planned - f.plan_used:
        return None
    from gpen_core.platform.meter import format_bytes

    figure = f"~{format_bytes(f.convert_ram)}" + (" (estimated from the file size)" if f.convert_ram_estimated else "")
    left = f"{format_bytes(max(0, p.planned - f.plan_used))} of it left"
    return (f"{_faster(f)}, but it is not converted yet, and converting it inside "
            f"this request would add {figure} to a request that {p.mode}'s memory plan holds to "
            f"~{format_bytes(p.planned)} ({left}), so it ran on torch; "
            f"{convert_ahead_advice(f.own_checkpoint, ', outside any request')}, and later requests use OpenVINO")


def instead_of_cache(f: RuntimeFacts, problem: Exception) -> RuntimeDecision:
    """torch for this request when the OpenVINO cache could not serve the network after all."""
    note = f"{problem}; this request ran {f.what} on torch"
    return RuntimeDecision("torch", f.torch_dtype, note, note)
