"""Convert ahead: the OpenVINO conversions ``auto`` will want, done before a user waits for them. Meanwhile a
request that needs a network being converted runs it on torch and says why (:func:`busy_note`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpen_core.modes import MODES, MemoryMode
from gpen_core.progress import Progress

_LOCK = threading.Lock()
_CONVERTING: dict[str, threading.Thread] = {}  # token → the thread converting it
_LABELS: dict[str, str] = {}  # token → what the user is told is being converted
# Held by the app's preparation from its start until its child has planned: whatever a request
# would convert now is what the child is about to plan, so the request runs on torch meanwhile.
ANY = "*"


def token(kind: str, name: str) -> str:
    """What a conversion is known by while it runs: "generator:GPEN-BFR-512", "parser:256", "detector:resnet50"."""
    return f"{kind}:{name}"


def busy_note(tok: str, what: str) -> str | None:
    """The note for a request that finds ``tok`` being converted by another thread, else None."""
    me = threading.current_thread()
    with _LOCK:
        owner = _CONVERTING.get(tok) or _CONVERTING.get(ANY)
        others = [t for t, th in _CONVERTING.items() if t != tok and th is not me and th.is_alive()]
    if owner is not None and owner is not me and owner.is_alive():
        return (f"{what} is being converted to OpenVINO in the background (once, after the app started), "
                "so this request ran it on torch; later requests use OpenVINO")
    if others:
        # The background preparation converts it next; converting it inside this request would
        # make the user wait for it (and, in-process, for the other one first: CONVERSION_LOCK).
        return (f"{what} is not converted to OpenVINO yet and the background preparation is converting "
                f"{_LABELS.get(others[0], others[0])} right now, so this request ran it on torch; later requests use OpenVINO")
    return None


def converting(tok: str) -> bool:
    """Whether another thread (the app's background preparation) is converting ``tok`` now, or holds
    everything until its child has planned."""
    me = threading.current_thread()
    with _LOCK:
        owners = [th for t, th in _CONVERTING.items() if t in (tok, ANY)]
    return any(th is not me and th.is_alive() for th in owners)


@dataclass(frozen=True)
class ConversionOutcome:
    """What preparing one network for OpenVINO came to."""

    outcome: Literal["converted", "cached", "skipped", "failed"]
    # skipped: why it stays on torch (the load's notes, as a request would show them);
    # failed: the error. Empty for converted and cached.
    detail: str = ""

    @classmethod
    def of(cls, backend: str, convert_s: float | None, notes: Sequence[str]) -> ConversionOutcome:
        """From a load's runtime, its conversion's seconds (None: from the cache) and its notes."""
        if backend != "openvino":
            return cls("skipped", "; ".join(notes) or "torch was measured faster")
        return cls("converted" if convert_s is not None else "cached")


@dataclass
class PrepareReport:
    """What :func:`convert_ahead` did: one line per network it converted, found cached, or left on torch."""

    converted: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(self, label: str, prepared: ConversionOutcome) -> None:
        """File ``label`` in the list named by its outcome, with the detail of a skipped or failed one."""
        shown = {"skipped": f"{label} ({prepared.detail})", "failed": f"{label}: {prepared.detail}"}
        getattr(self, prepared.outcome).append(shown.get(prepared.outcome, label))

    def lines(self) -> list[str]:
        return ([f"converted {c}" for c in self.converted] + [f"already converted: {c}" for c in self.cached]
                + [f"left on torch: {s}" for s in self.skipped] + [f"could not convert {f}" for f in self.failed])


def convert_ahead(modes: Sequence[MemoryMode] | None = None, *, models_dir: str | os.PathLike[str] | None = None,
                  progress: Progress | None = None, on_plan: Callable[[list[tuple[str, str]]], None] = lambda todo: None,
                  on_start: Callable[[str, str], None] = lambda tok, label: None) -> PrepareReport:
    """Convert, for ``modes`` (default: all), each network ``auto`` runs on OpenVINO here whose weights are present,
    as a request's first use would. ``on_plan`` hears the plan's (token, label) pairs, ``on_start`` each start."""
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.errors import GPENError
    from gpen_core.options import RestoreOptions
    from gpen_core.runtimes.openvino.base import openvino_version

    say = progress or (lambda f, m: None)
    report = PrepareReport()
    if openvino_version() is None:
        report.skipped.append("everything: OpenVINO is not installed")
        return report
    todo = _plan(list(modes or MODES.values()), models_dir)
    on_plan([(tok, label) for tok, label, _ in todo])
    for i, (tok, label, run) in enumerate(todo):
        say(i / max(1, len(todo)), f"OpenVINO: preparing {label} ({i + 1} of {len(todo)})")
        on_start(tok, label)
        cache = ModelCache(models_dir)  # a fresh cache: each load is a first load, as in a new process
        with _LOCK:
            _CONVERTING[tok], _LABELS[tok] = threading.current_thread(), label
        try:
            prepared = run(cache, RestoreOptions(backend="auto"))
        except (GPENError, OSError, RuntimeError, ValueError) as exc:
            prepared = ConversionOutcome("failed", str(exc))
        finally:
            with _LOCK:
                _CONVERTING.pop(tok, None)
                _LABELS.pop(tok, None)
            cache.free("cpu")
        report.add(label, prepared)
    say(1.0, "OpenVINO: ready")
    return report


def _plan(modes: list[MemoryMode], models_dir: str | os.PathLike[str] | None):
    """[(token, label, run(cache, opts) -> ConversionOutcome)] for the distinct networks of ``modes`` that
    ``auto`` runs on OpenVINO here and whose weights are present (nothing else is loaded)."""
    from gpen_core.engine.network_loads import PARSER_WEIGHTS, registry_size
    from gpen_core.faces.parse import choose_parse_dtype
    from gpen_core.networks.plan import choose_plan
    from gpen_core.options import DETECTOR_WEIGHTS
    from gpen_core.runtimes.openvino.generator import choose_mode_backend
    from gpen_core.weights import lookup as weights

    def on_openvino(mode: MemoryMode, size: int, dtype: str, network: str = "gpen") -> bool:
        return choose_mode_backend(mode, "auto", size, dtype, models_dir=models_dir, network=network).runtime == "openvino"

    def present(*names: str) -> bool:
        return any(weights.locate(n, models_dir=models_dir) is not None for n in names)

    seen: set[tuple[str, ...]] = set()
    out = []
    for mode in modes:
        dtype = choose_plan("cpu", mode.cpu_dtype)[0].dtype
        gkey = ("gen", mode.model, dtype)
        if gkey not in seen and present(mode.model) and on_openvino(mode, registry_size(mode.model), dtype):
            seen.add(gkey)

            def gen(cache, opts, mode=mode) -> ConversionOutcome:
                g = cache.generator(mode, opts, "cpu")
                notes = [g.note] if g.note else []
                return ConversionOutcome.of(g.runtime, getattr(g.forward, "convert_s", None), notes)

            out.append((token("generator", mode.model), f"{mode.model} ({dtype})", gen))
        pdtype = choose_parse_dtype("cpu", mode.cpu_dtype)
        pkey = ("parse", str(mode.parse_input), pdtype)
        if (mode.parsing and pkey not in seen and present(*PARSER_WEIGHTS)
                and on_openvino(mode, mode.parse_input, pdtype, "parsenet")):
            seen.add(pkey)

            def parse(cache, opts, mode=mode) -> ConversionOutcome:
                notes: list[str] = []
                masker = cache.parser(mode, "cpu", notes, opts)
                return ConversionOutcome.of(getattr(masker, "backend", "torch"), getattr(masker, "convert_s", None), notes)

            out.append((token("parser", str(mode.parse_input)), f"the {mode.parse_input} px parser ({pdtype})", parse))
        dkey = ("det", mode.detector)
        if (dkey not in seen and present(DETECTOR_WEIGHTS[mode.detector])
                and on_openvino(mode, 1000, "float32", f"retinaface-{mode.detector}")):
            seen.add(dkey)

            def det(cache, opts, mode=mode) -> ConversionOutcome:
                notes: list[str] = []
                detector = cache.detector(mode.detector, "cpu", opts, notes)
                return ConversionOutcome.of(detector.backend, detector.convert_s, notes)

            out.append((token("detector", mode.detector), f"the {mode.detector} detector", det))
    return out


@dataclass(frozen=True)
class Planned:
    """What the child will prepare, in order: (token, label) pairs."""

    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Started:
    """The child began preparing ``token`` (those planned before it are done)."""

    token: str
    label: str


def prepare_in_child(models_dir: str | os.PathLike[str] | None,
                     modes: Sequence[MemoryMode] | None = None) -> PrepareReport:
    """:func:`convert_ahead` in the preparation's child process, telling the parent as it goes (``worker.send``)."""
    from gpen_core.platform import worker

    return convert_ahead(modes, models_dir=models_dir or None, progress=worker.report,
                         on_plan=lambda todo: worker.send(Planned(tuple((str(t), str(lab)) for t, lab in todo))),
                         on_start=lambda tok, label: worker.send(Started(tok, label)))


class BackgroundPreparation:
    """:func:`convert_ahead` in a niced child process (a niced thread would leave the runtime's worker threads niced
    for the app's life), watched by a daemon thread; a child that dies is started again once, and when that run
    fails too the report says so and requests convert on first use."""

    # A conversion runs at this niceness: the first restores, on torch meanwhile, get the cores first.
    NICENESS = 10
    # Before the one restart of a child that died (the OOM killer leaves memory short for a moment).
    RETRY_AFTER_S = 5.0
    # The child's work: a module-level function of models_dir (tests put a scripted stand-in here).
    TARGET: Callable[..., PrepareReport] | None = None

    def __init__(self, models_dir: str | os.PathLike[str] | None = None) -> None:
        self.models_dir = models_dir
        self.status = "not started"
        self.done = threading.Event()
        self.report: PrepareReport | None = None
        self.attempts = 0
        self.child_pid: int | None = None
        self._thread: threading.Thread | None = None
        self._pending: list[tuple[str, str]] = []  # (token, label) held for the child, in its order

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpen-openvino-prepare", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._hold([(ANY, "the networks this CPU runs on OpenVINO")])
            self.report = self._attempt()
            if self.report is None:  # the child died: once more, after a pause, still holding what it planned
                self.status = (f"OpenVINO: the preparation process stopped; starting it again in {self.RETRY_AFTER_S:.0f} s "
                               "— restores meanwhile run on torch and say so")
                time.sleep(self.RETRY_AFTER_S)
                self.report = self._attempt() or PrepareReport(failed=[f"OpenVINO's networks ({self._died})"])
            done = self.report.converted + self.report.cached
            self.status = ("OpenVINO ready for " + ", ".join(done)) if done else "OpenVINO: nothing to convert here"
            if self.report.failed and not done:
                self.status = "OpenVINO: " + "; ".join(self.report.failed)
        finally:
            self._hold([])
            self.done.set()

    def _hold(self, tokens: list[tuple[str, str]]) -> None:
        """Hold ``tokens`` for the child (requests run those networks on torch), releasing what was held before."""
        me = threading.current_thread()
        with _LOCK:
            for tok, _ in self._pending:
                _CONVERTING.pop(tok, None)
                _LABELS.pop(tok, None)
            for tok, label in tokens:
                _CONVERTING[tok], _LABELS[tok] = me, label
        self._pending = list(tokens)

    def _on_event(self, event: object) -> None:
        from gpen_core.platform.worker import ProgressEvent

        if isinstance(event, Planned):
            self._hold(list(event.items))
        elif isinstance(event, Started):  # the ones planned before it are done
            order = [t for t, _ in self._pending]
            if event.token in order:
                self._hold(self._pending[order.index(event.token):])
        elif isinstance(event, ProgressEvent):
            self.status = f"{event.message} — restores meanwhile run on torch and say so"

    def _attempt(self) -> PrepareReport | None:
        """One child run's report (saying why when it raised or did not start); None when it died: worth a restart."""
        from gpen_core.platform.worker import Child, Done

        self.attempts += 1
        target = type(self).TARGET or prepare_in_child
        try:
            child = Child(target, (os.fspath(self.models_dir) if self.models_dir else None,), niceness=self.NICENESS)
        except OSError as exc:
            return PrepareReport(failed=[f"OpenVINO's networks (the preparation process did not start: {exc})"])
        self.child_pid = child.pid
        out = child.wait(self._on_event)
        if isinstance(out, Done):
            return out.value
        if out.how == "raised":
            return PrepareReport(failed=[f"OpenVINO's networks (the preparation failed: {out.error_type}: {out.message})"])
        self._died = f"the preparation process {out.message}, twice"
        return None
