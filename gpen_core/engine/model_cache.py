"""The resident models of one Restorer, at most one of each kind: the previous one is freed first and loaded back
should the new one fail. Not thread-safe: the Restorer's lock serialises it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpen_core.compat.onednn import clear_primitive_cache
from gpen_core.engine import network_loads as loads
from gpen_core.engine.lifetime import Lifetime, Network, Stage
from gpen_core.engine.network_loads import BusyCheck, NetworkLoad
from gpen_core.engine.runtime_choice import RequestPlan, RuntimeDecision, decide_runtime, instead_of_cache
from gpen_core.errors import GPENError, InputError, WeightsError
from gpen_core.modes import MemoryMode, generator_name
from gpen_core.options import DETECTOR_WEIGHTS, RestoreOptions, default_upscaler
from gpen_core.platform.heap import loading_mapped
from gpen_core.platform.oom import release
from gpen_core.result import NetworkRuntime
from gpen_core.weights import lookup as weights
from gpen_core.weights.missing import DOWNLOADS_OFF_FOR_CALL, missing_error


class LazyParser:
    """A paste mask function that loads the parser at the first face it masks (one-shot: after the generator has
    gone); with no parser (``load`` returns None), GPEN's feathered rectangle."""

    def __init__(self, load: Callable[[], Any], notes: list[str] | None = None) -> None:
        self._load, self._fn, self._called = load, None, False
        # What loading it said (which paste mask ran): ``load`` appends here, the restore stage reads it.
        self.notes: list[str] = notes if notes is not None else []

    def __call__(self, restored: np.ndarray) -> np.ndarray:
        if not self._called:
            self._fn, self._called = self._load(), True
        if self._fn is None:
            from gpen_core.faces.masks import rectangle_mask

            return rectangle_mask(restored.shape[0])
        return self._fn(restored)

    @property
    def parsed(self) -> bool | None:
        """Whether the parsing mask ran; None when no face needed a mask."""
        return (self._fn is not None) if self._called else None


KINDS: tuple[Network, ...] = ("generator", "detector", "parser", "upscaler")


@dataclass
class Generator:
    """A loaded generator, what runs it and why; the restore stage takes its ``forward`` (:meth:`take`), so the
    model cache alone holds it."""

    forward: Any  # crop tensor -> restored tensor (torch or OpenVINO)
    size: int  # its face size in pixels
    dtype: Any  # torch dtype that runs
    name: str  # registry name or path
    runtime: str = "torch"  # "torch" or "openvino" (RestoreResult.backend)
    reason: str = ""  # why that runtime (RestoreResult.backend_reason)
    note: str | None = None  # what its load said (runtime, precision, a conversion), one sentence

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def take(self) -> Any:
        forward, self.forward = self.forward, None
        return forward


@dataclass
class Held:
    """One resident network, the key it was loaded for, and how to load it again (a rollback)."""

    key: tuple[Any, ...]  # what identifies it, its runtime and dtype last
    obj: Any  # the network; None in a record of one let go
    name: str
    build: Callable[[], Any]


class ModelCache:
    """Generator, detector, parser and upscaler cache."""

    def __init__(self, models_dir: str | os.PathLike[str] | None = None, *, allow_download: bool = False,
                 synthetic_weights: bool = False, lifetime: Lifetime = Lifetime.RESIDENT, busy: BusyCheck | None = None,
                 openvino_threads: int | None = None) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.allow_download = allow_download
        self.synthetic_weights = synthetic_weights
        self.lifetime = lifetime
        self.busy = busy
        # OpenVINO threads of the detector and parser; None (requests): OpenVINO's own count.
        self.openvino_threads = openvino_threads
        # The running request's memory plan (set by :meth:`planned`): a conversion inside it must fit.
        self.plan: RequestPlan | None = None
        # What ran each network of the current request, in the order loaded (RestoreResult.runtimes).
        self.runtimes: dict[str, NetworkRuntime] = {}
        self._held: dict[str, Held | None] = dict.fromkeys(KINDS)
        # What release_unused let go, by kind, until that kind loads again: a load that fails rolls back to it.
        self._set_aside: dict[str, Held] = {}
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
        """Names of the resident models, by kind (None: nothing of that kind)."""
        return {kind: held.name if held else None for kind, held in self._held.items()}

    def release_unused(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> tuple[str, ...]:
        """Drop the resident networks ``mode`` does not use for ``opts`` (another network, runtime or dtype);
        returns their names."""
        unused = []
        generator, detector, parser, upscaler = self._held.values()
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
        for kind in unused:
            self._set_aside[kind] = replace(self._held[kind], obj=None)  # type: ignore[type-var]
            self.drop(kind, device)
        names = tuple(self._set_aside[kind].name for kind in unused)
        self.released_openvino = any(self._set_aside[kind].key[-2] == "openvino" for kind in unused)
        if names and clear_primitive_cache():
            # oneDNN's cache held the dropped networks' kernels; emptied, its memory is heap to trim.
            release(device)
        return names

    @staticmethod
    def _moves(held: Held, decide: Callable[[], RuntimeDecision]) -> bool:
        """Whether this request would run ``held``'s network in another runtime or dtype (not when its weights
        are missing: the load says so)."""
        try:
            decision = decide()
        except GPENError:
            return False
        return held.key[-2:] != (decision.runtime, decision.dtype)

    def weights_present(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> bool:
        """Whether ``mode`` can run without a download (``auto`` passes over a mode that cannot)."""
        if self.synthetic_weights:
            return True
        if opts.model is None and not self._usable(generator_name(mode, opts.task)):
            return False
        return opts.aligned or boxes_given or self._usable(DETECTOR_WEIGHTS[opts.detector or mode.detector])

    def require(self, mode: MemoryMode, opts: RestoreOptions, boxes_given: bool) -> None:
        """Raise one WeightsError naming every registry file this request loads that is not here (unless
        downloads are allowed), so all are fixed at once; a single missing file is left to ``weights.resolve``."""
        if self.allow_download or self.synthetic_weights:
            return
        names = [generator_name(mode, opts.task, opts.model)]
        if not (opts.aligned or boxes_given):
            names.append(DETECTOR_WEIGHTS[opts.detector or mode.detector])
        if opts.upscale > 1 and mode.paste:
            names.append(opts.upscaler_name)
        absent = [n for n in names if weights.registry_name(n) and weights.locate(n, models_dir=self.models_dir) is None]
        if len(absent) > 1:
            folder = self.models_dir if self.models_dir is not None else weights.models_dir()
            raise missing_error(absent, folder, DOWNLOADS_OFF_FOR_CALL)

    def _usable(self, name: str) -> bool:
        """Present and verified (hashed once per process while unchanged): auto passes over a corrupt file."""
        path = weights.locate(name, models_dir=self.models_dir)
        spec = weights.REGISTRY.get(name)
        if path is None or spec is None:
            return path is not None
        try:
            weights.verify(path, spec, self.models_dir)
        except WeightsError:
            return False
        return True

    def load(self, want: NetworkLoad, device: str, notes: list[str] | None = None) -> tuple[Any, RuntimeDecision, bool]:
        """(the network, its runtime decision, whether it was loaded now) for ``want``: the resident one when its
        key matches, else loaded in its place; the decision's note goes to ``notes``."""
        decision = decide_runtime(want.facts)
        key = (*want.key, decision.runtime, decision.dtype)
        fresh = getattr(self._held[want.network], "key", None) != key  # nothing resident, or another network
        if fresh:
            decision = self._swap_in(want, decision, device)
        loaded = self._held[want.network]
        assert loaded is not None  # a failed load raised
        self.runtimes[want.network] = NetworkRuntime(want.network, loaded.name, decision.runtime, decision.reason)
        if notes is not None and decision.note:
            notes.append(decision.note)
        return loaded.obj, decision, fresh

    def _swap_in(self, want: NetworkLoad, decision: RuntimeDecision, device: str) -> RuntimeDecision:
        """Load ``want`` as ``decision`` says, or on torch when the OpenVINO cache cannot serve it after all."""
        from gpen_core.runtimes.openvino.base import CacheProblem

        def swap(d: RuntimeDecision) -> RuntimeDecision:
            self._swap(want.network, Held((*want.key, d.runtime, d.dtype), None, want.name, lambda: want.build(d)),
                       device)
            return d

        try:
            return swap(decision)
        except CacheProblem as problem:
            if decision.runtime != "openvino":
                raise
            instead = instead_of_cache(want.facts, problem)
        return swap(instead)

    def _swap(self, kind: str, new: Held, device: str) -> None:
        """Free the resident ``kind`` and load ``new`` in its place; on failure load the previous one again
        (should that fail too, nothing stays loaded) and re-raise the first failure, the second beside it."""
        previous = self._held[kind]
        self._held[kind] = None
        back = self._set_aside.pop(kind, None) if previous is None else replace(previous, obj=None)
        del previous
        release(device)
        with loading_mapped():  # the load's transient copies go back to the OS as each is freed
            try:
                new.obj = new.build()
                self._held[kind] = new
                # A load's freed transient copies stay in glibc's heap; handed back, they do not sit under the
                # next stage's peak (the ResNet-50 detector: 259 MiB resident after its load, 101 MiB after this).
                release(device)
            except Exception as exc:  # clean up and re-raise: the caller decides what the failure means
                release(device)
                if back is not None:
                    try:
                        back.obj = back.build()
                        self._held[kind] = back
                    except (GPENError, MemoryError, RuntimeError, OSError) as again:
                        shown = Path(back.name).stem if "/" in back.name or os.sep in back.name else back.name
                        exc.add_note(f"the previous {kind} {shown} could not be reloaded either: {again}")
                raise

    def generator(self, mode: MemoryMode, opts: RestoreOptions, device: str, progress: Any = None) -> Generator:
        """``mode``'s generator for this request, loaded now or resident."""
        import torch

        want, plan, notes, precision_note = loads.generator_load(self, mode, opts, device, progress)
        (forward, size), decision, fresh = self.load(want, device, notes)
        dtype = plan.dtype_torch
        if decision.runtime == "openvino":
            notes.extend([precision_note] if precision_note else [])
            _converted(notes, "the generator", forward.convert_s if fresh else None)
            dtype = torch.bfloat16 if decision.dtype == "bfloat16" else torch.float32
        return Generator(forward, size, dtype, want.name, decision.runtime, decision.reason, "; ".join(notes) or None)

    def generator_decision(self, mode: MemoryMode, opts: RestoreOptions, device: str) -> RuntimeDecision:
        """The runtime decision :meth:`generator` would take for this request, without loading anything."""
        return decide_runtime(loads.generator_load(self, mode, opts, device, None)[0].facts)

    def detector(self, network: str, device: str, opts: RestoreOptions | None = None, notes: list[str] | None = None,
                 mode: MemoryMode | None = None):
        """The FaceDetector ``network`` in the runtime ``opts.backend`` asks (no opts: torch)."""
        detector, decision, fresh = self.load(loads.detector_load(self, network, device, opts, mode), device, notes)
        if notes is not None:
            _converted(notes, f"the {network} detector", detector.convert_s if fresh else None)
            if decision.runtime == "openvino":
                notes.append(f"face detector: {network} on OpenVINO float32 "
                             f"({decision.reason.replace(' per face', ' per detection')})")
        return detector

    def parser(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None, progress: Any = None):
        """GPEN's face-parsing mask when the mode affords it and its weights are present, else None (GPEN's
        feathered rectangle); a note says which."""
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
        _converted(notes, "the parser", masker.convert_s if fresh else None)
        notes.append(f"paste mask: GPEN's face-parsing mask ({masker.description})")
        return masker

    def parsing_fn(self, mode: MemoryMode, device: str, notes: list[str], opts: RestoreOptions | None = None) -> Any:
        """The paste mask function for ``mode``, loaded now or (one-shot) at the first face it masks; None: GPEN's
        feathered rectangle."""
        if self.lifetime.lazy_parser:
            later: list[str] = []  # said at the first mask: the restore stage reads LazyParser.notes
            return LazyParser(lambda: self.parser(mode, device, later, opts), later)
        return self.parser(mode, device, notes, opts)

    def upscaler(self, opts: RestoreOptions, device: str):
        """(RRDBNet, name) for ``opts.upscale`` > 1; at 1 it drops a resident one and returns None. InputError when
        the upscaler's scale is not the one asked."""
        if opts.upscale <= 1:
            self.drop("upscaler", device)
            return None
        want = loads.upscaler_load(self, opts, device)
        net = self.load(want, device)[0]
        if net.scale != opts.upscale:
            raise InputError(
                f"the upscaler {want.name} enlarges ×{net.scale}, but ×{opts.upscale} was asked. "
                f"Choose upscale {net.scale}, or the ×{opts.upscale} upscaler ({default_upscaler(opts.upscale)})."
            )
        return net, want.name

    def drop(self, kind: str, device: str) -> None:
        """Drop one resident model (generator, detector, parser or upscaler) and hand its memory back."""
        if self._held[kind] is not None:
            self._held[kind] = None
            release(device)

    def free(self, device: str) -> None:
        """Drop every resident model and hand the memory back (nothing to roll back to afterwards)."""
        self._held = dict.fromkeys(KINDS)
        self._set_aside.clear()
        release(device)


def _converted(notes: list[str], what: str, convert_s: float | None) -> None:
    """Say that ``what`` was converted to OpenVINO by this load (``convert_s`` None: it was not)."""
    if convert_s is not None:
        notes.append(f"converted {what} to OpenVINO on first use in {convert_s:.1f} s (cached in the models folder)")
