"""The resident models of one Restorer: at most one generator, one detector, one parser and one upscaler.

:class:`ModelCache` loads what a request needs through one method, :meth:`ModelCache.load`: the
runtime of every network (torch or OpenVINO, and its dtype) is one pure decision
(:func:`gpen_core.engine.runtime_choice.decide_runtime`) from facts gathered for each network
(:mod:`gpen_core.engine.network_loads`, which also says how to build it), and the load frees
the previous model of its kind first and rolls back to it when the new one fails.
The cache is split by what it holds: the resident networks and their rollback
(:mod:`gpen_core.engine.resident`), whether a request's weights are here
(:mod:`gpen_core.engine.weights_check`), and what stays loaded between stages and requests, its
lifetime policy (:mod:`gpen_core.engine.lifetime`); this class decides and asks for each network.
Weights are looked up in ``models_dir`` (downloaded only with ``allow_download``);
``synthetic_weights`` builds registry generators with random weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpen_core.compat.onednn import clear_primitive_cache
from gpen_core.engine import network_loads as loads
from gpen_core.engine import weights_check
from gpen_core.engine.lifetime import Lifetime, Stage
from gpen_core.engine.network_loads import (
    PARSER_WEIGHTS, BusyCheck, NetworkLoad, load_openvino_generator, load_torch_generator, registry_size,
)
from gpen_core.engine.runtime_choice import RequestPlan, RuntimeDecision, decide_runtime, instead_of_cache
from gpen_core.errors import GPENError
from gpen_core.engine.resident import Held, Resident
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.options import RestoreOptions
from gpen_core.platform.oom import release
from gpen_core.result import NetworkRuntime


class ModelCache:
    """Generator, detector, parser and upscaler cache; not thread-safe (the Restorer's lock serialises it)."""

    def __init__(
        self, models_dir: str | os.PathLike[str] | None = None, *, allow_download: bool = False, synthetic_weights: bool = False,
        lifetime: Lifetime = Lifetime.RESIDENT, busy: BusyCheck | None = None, openvino_threads: int | None = None,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.allow_download = allow_download
        self.synthetic_weights = synthetic_weights
        # What stays loaded between stages and requests (engine.lifetime).
        self.lifetime = lifetime
        self.busy = busy
        # OpenVINO inference threads of the detector and parser; None (requests): OpenVINO's own count. The
        # hardware check times them on the thread count it gives torch beside them.
        self.openvino_threads = openvino_threads
        # The running request's memory plan (set by :meth:`planned`): a conversion inside the request
        # must stay within it. None between requests: converting ahead has no plan to keep to.
        self.plan: RequestPlan | None = None
        # What ran each network of the current request, in the order loaded (RestoreResult.runtimes).
        self.runtimes: dict[str, NetworkRuntime] = {}
        # The generator runtime of the last request ("torch" / "openvino") and why it was picked.
        self.backend, self.backend_reason = "torch", ""
        self.resident = Resident()
        # Whether the last release_unused let go of a network that ran on OpenVINO (whose libraries stay).
        self.released_openvino = False

    @contextmanager
    def planned(self, plan: RequestPlan | None) -> Iterator[None]:
        """Networks loaded inside the block belong to a request with ``plan`` (see :attr:`plan`)."""
        outer, self.plan = self.plan, plan
        try:
            yield
        finally:
            self.plan = outer

    def stage_ended(self, stage: Stage, device: str) -> None:
        """A request's ``stage`` is over: drop what the lifetime policy lets go then."""
        for kind in self.lifetime.drops_after(stage):
            self.drop(kind, device)

    def loaded(self) -> dict[str, str | None]:
        """Names of the resident models (for the UI and tests)."""
        return self.resident.names()

    def release_unused(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> tuple[str, ...]:
        """Drop the resident networks ``mode`` does not use for ``opts`` (another generator, detector
        or parser size, or the same network in another runtime or dtype; no parser, no upscaler),
        before the request, so that a lighter mode after a heavier one costs what the lighter one
        costs. Returns the names released."""
        unused = []
        generator, detector = self.resident.get("generator"), self.resident.get("detector")
        parser, upscaler = self.resident.get("parser"), self.resident.get("upscaler")
        if generator is not None and (generator.name != generator_name(mode, opts.task, opts.model)
                                      or self._moves(generator, lambda: self.generator_decision(mode, opts, device))):
            unused.append("generator")
        network = opts.detector or mode.detector
        if detector is not None and (detector.key[0] != network or self._moves(
                detector, lambda: decide_runtime(loads.detector_load(self, network, device, opts, mode).facts))):
            unused.append("detector")
        if parser is not None and (not mode.parsing or parser.key[2] != mode.parse_input):
            unused.append("parser")
        if upscaler is not None and opts.upscale <= 1:
            unused.append("upscaler")
        del generator, detector, parser, upscaler
        names = []
        self.released_openvino = False
        for kind in unused:
            record = self.resident.set_aside(kind, device)
            names.append(record.name)
            self.released_openvino |= record.key[-2] == "openvino"
        if names and clear_primitive_cache():
            # oneDNN's cache held the dropped networks' kernels; emptied, its memory is heap to trim.
            release(device)
        return tuple(names)

    @staticmethod
    def _moves(held: Held, decide: Callable[[], RuntimeDecision]) -> bool:
        """Whether this request would run ``held``'s network in another runtime or dtype (then
        :meth:`load` swaps it anyway, inside the request). A decision that cannot be taken (its
        weights missing) moves nothing: the load says what is wrong."""
        try:
            decision = decide()
        except GPENError:
            return False
        return held.key[-2:] != (decision.runtime, decision.dtype)

    def weights_present(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> bool:
        """Whether ``mode`` can run without a download (for ``auto``; :func:`.weights_check.weights_present`)."""
        return weights_check.weights_present(self, mode, opts, boxes_given)

    def require(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> None:
        """One WeightsError naming every missing registry file this request loads (:func:`.weights_check.require`)."""
        weights_check.require(self, mode, opts, boxes_given)

    def load(self, want: NetworkLoad, device: str, notes: list[str] | None = None) -> tuple[Any, RuntimeDecision, bool]:
        """(the network, its runtime decision, whether it was loaded now) for ``want``: any network,
        in the runtime :func:`decide_runtime` picks. A resident one loaded for the same key is reused;
        else the previous model of its kind is freed first, and restored should the new one fail to
        load (the failure propagates). The decision's note, if any, goes to ``notes``."""
        decision = decide_runtime(want.facts)
        key = (*want.key, decision.runtime, decision.dtype)
        current = self.resident.get(want.network)
        fresh = current is None or current.key != key
        del current
        if fresh:
            decision = self._swap_in(want, decision, device)
        loaded = self.resident.get(want.network)
        assert loaded is not None  # a failed load raised
        self.runtimes[want.network] = NetworkRuntime(want.network, loaded.name, decision.runtime, decision.reason)
        if notes is not None and decision.note:
            notes.append(decision.note)
        return loaded.obj, decision, fresh

    def _swap_in(self, want: NetworkLoad, decision: RuntimeDecision, device: str) -> RuntimeDecision:
        """Load ``want`` as ``decision`` says; when the OpenVINO cache cannot serve it after all
        (unwritable, or an entry found damaged and set aside), load it on torch and return that decision."""
        from gpen_core.runtimes.openvino.base import CacheProblem

        try:
            self.resident.swap(want.network, Held((*want.key, decision.runtime, decision.dtype), None, want.name,
                                                  lambda: want.build(decision)), device)
            return decision
        except CacheProblem as problem:
            if decision.runtime != "openvino":
                raise
            torch_decision = instead_of_cache(want.facts, problem)
        self.resident.swap(want.network, Held((*want.key, torch_decision.runtime, torch_decision.dtype), None, want.name,
                                              lambda: want.build(torch_decision)), device)
        return torch_decision

    def generator(self, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any = None):
        """(forward, size, torch dtype, name, note) for this request (:meth:`load`).

        ``opts.backend`` picks the runtime (see :mod:`gpen_core.runtimes.openvino.generator`); what ran and why
        is left in :attr:`backend` / :attr:`backend_reason`. ``progress(fraction, message)``
        hears about a first-use OpenVINO conversion.
        """
        import torch

        want, plan, notes, precision_note = loads.generator_load(self, mode, opts, device, progress)
        (forward, size), decision, fresh = self.load(want, device, notes)
        self.backend, self.backend_reason = decision.runtime, decision.reason
        if decision.runtime == "openvino":
            notes.extend([precision_note] if precision_note else [])
            if fresh and forward.convert_s is not None:
                notes.append(f"converted the generator to OpenVINO on first use in {forward.convert_s:.1f} s (cached in the models folder)")
            dtype = torch.bfloat16 if decision.dtype == "bfloat16" else torch.float32
            return forward, size, dtype, want.name, ("; ".join(notes) or None)
        return forward, size, plan.dtype_torch, want.name, ("; ".join(notes) or None)

    def generator_decision(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> RuntimeDecision:
        """The runtime decision :meth:`generator` would take for this request, without loading anything."""
        return decide_runtime(loads.generator_load(self, mode, opts, device, None)[0].facts)

    def generator_runtime(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> str:
        """"torch" or "openvino": :meth:`generator_decision`'s runtime."""
        return self.generator_decision(mode, opts, device).runtime

    def detector(self, network: str, device: str, opts: RestoreOptions | None = None, notes: list[str] | None = None,
                 mode: MemoryMode | None = None):
        """The cached :class:`~gpen_core.faces.detect.FaceDetector` for ``network`` on ``device`` (:meth:`load`).

        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one at
        1000 px, :func:`gpen_core.runtimes.openvino.generator.choose_mode_backend`: a ``mode``
        without :attr:`~gpen_core.modes.MemoryMode.auto_openvino` keeps it on torch); no opts:
        torch. ``notes`` hears which backend ran when it is OpenVINO."""
        detector, decision, fresh = self.load(loads.detector_load(self, network, device, opts, mode), device, notes)
        if notes is not None and fresh and detector.convert_s is not None:
            notes.append(f"converted the {network} detector to OpenVINO on first use in {detector.convert_s:.1f} s "
                         "(cached in the models folder)")
        if decision.runtime == "openvino" and notes is not None:
            notes.append(f"face detector: {network} on OpenVINO float32 ({decision.reason.replace(' per face', ' per detection')})")
        return detector

    def parser(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None, progress: Any = None):
        """GPEN's face-parsing mask when the mode affords it and its weights are present, else None
        (GPEN's feathered rectangle). Either way a note says which paste mask was used.
        ``opts.backend`` picks torch or OpenVINO for it (``auto``: the measured faster one for
        this input size and dtype, :func:`gpen_core.runtimes.openvino.generator.choose_backend`); no opts: torch.
        ``progress(fraction, message)`` hears about a first-use OpenVINO conversion."""
        if not mode.parsing:
            self.drop("parser", device)
            notes.append(f"paste mask: GPEN's feathered rectangle ({mode.name} skips the face-parsing mask to save time)")
            return None
        path = loads.parser_path(self)
        if path is None and not self.synthetic_weights:
            notes.append(
                "paste mask: GPEN's feathered rectangle, because no face-parsing weights are in the models folder "
                "(GPEN's ParseNet-latest.pth or facexlib's parsing_parsenet.pth; "
                "`python -m gpen_core download ParseNet-latest`)"
            )
            return None
        masker, _, fresh = self.load(loads.parser_load(self, mode, device, opts, path, progress), device, notes)
        if fresh and masker.convert_s is not None:
            notes.append(f"converted the parser to OpenVINO on first use in {masker.convert_s:.1f} s (cached in the models folder)")
        notes.append(f"paste mask: GPEN's face-parsing mask ({masker.description})")
        return masker

    def parsing_fn(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None) -> Any:
        """The paste mask function for ``mode`` as the lifetime policy loads it: now (resident), or
        at the first face it masks (one-shot: :class:`~gpen_core.engine.lazy_parser.LazyParser`). None:
        GPEN's feathered rectangle."""
        from gpen_core.engine.lazy_parser import LazyParser

        if self.lifetime.lazy_parser:
            later: list[str] = []  # said at the first mask: the restore stage reads LazyParser.notes
            return LazyParser(lambda: self.parser(mode, device, later, opts), later)
        return self.parser(mode, device, notes, opts)

    def upscaler(self, opts: RestoreOptions, device: str):
        """(RRDBNet, name) for ``opts.upscale`` > 1 (:meth:`load`; torch only); with ``upscale`` 1 it
        drops a resident one and returns None.

        ``opts.upscaler``: a registry name or a checkpoint path (default
        ``realesrnet_x{upscale}``). InputError when its scale is not the one asked.
        """
        from gpen_core.errors import InputError

        if opts.upscale <= 1:
            self.drop("upscaler", device)
            return None
        net, _, _ = self.load(loads.upscaler_load(self, opts, device), device)
        held = self.resident.get("upscaler")
        name = held.name if held is not None else ""
        del held
        if net.scale != opts.upscale:
            raise InputError(
                f"the upscaler {name} enlarges ×{net.scale}, but ×{opts.upscale} was asked. "
                f"Choose upscale {net.scale}, or the ×{opts.upscale} upscaler (realesrnet_x{opts.upscale})."
            )
        return net, name

    def drop(self, kind: str, device: str) -> None:
        """Drop one resident model (``generator``, ``detector``, ``parser`` or ``upscaler``) and hand its memory back."""
        self.resident.drop(kind, device)

    def free(self, device: str) -> None:
        """Drop every resident model and hand the memory back (nothing to roll back to afterwards)."""
        self.resident.free(device)


# Re-exported: older callers import these from here (their home is engine.network_loads).
__all__ = [
    "PARSER_WEIGHTS", "BusyCheck", "ModelCache", "NetworkLoad", "load_openvino_generator", "load_torch_generator",
    "registry_size",
]
