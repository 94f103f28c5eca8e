"""This machine's measurements in one versioned file, ``measurements.json`` in the models folder, with one reader
(:func:`read`) and one writer (:func:`update`, locked across processes)::

    {"version": 2, "profiles": {"cpu": {...}, "cuda:0": {...}},
     "speeds": {"<CPU id>": {"512-float32": {"torch_s": 1.7, "openvino_s": 1.2, ...}}}, "advice": {...} or null}

A file unreadable or of an unknown version is ignored with a ``note``, never a crash. Older files (version 1,
``profile.json``, ``openvino/speed-*.json``, ``advice.json``) are read until the first write carries them over.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpen_core.platform import durable
from gpen_core.platform.paths import folder as models_folder, made

VERSION = 2
FILE = "measurements.json"
_V1 = 1  # the same sections without the advice, each profile with its own "format": 1
# The files before this one: the profile, one speed file per CPU model, the advice table.
LEGACY_PROFILE = "profile.json"
LEGACY_SPEEDS = "openvino/speed-*.json"
LEGACY_ADVICE = "advice.json"


@dataclass(frozen=True)
class SpeedRecord:
    """One network at one (size, dtype) on one CPU: the median seconds per call of both runtimes."""

    torch_s: float
    openvino_s: float
    openvino: str | None  # OpenVINO's version then: a new one is measured again
    cpu: str  # the CPU model
    measured_at: str  # local time, ISO 8601
    source: str = ""  # what measured it (the hardware check, a benchmark), with what weights


@dataclass(frozen=True)
class Store:
    """What the file holds: profiles by device key, speed records by CPU id then record key, the advice table."""

    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # the engine's Profile.to_dict(), validated there
    speeds: dict[str, dict[str, SpeedRecord]] = field(default_factory=dict)
    advice: dict[str, Any] | None = None  # the hwcheck's AdviceReport.to_dict(), validated there; None: not measured
    note: str = ""  # why what was on disk was not (all) read; "" when it was, or there was nothing

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "profiles": self.profiles,
                "speeds": {cpu: {k: asdict(r) for k, r in recs.items()} for cpu, recs in self.speeds.items()},
                "advice": self.advice}


def path(folder: str | os.PathLike[str] | None = None) -> Path:
    """``measurements.json`` in the models folder (``$GPEN_HOME`` or ``~/.cache/gpen`` by default)."""
    return models_folder(folder) / FILE


def _speeds(raw: Any) -> dict[str, dict[str, SpeedRecord]]:
    out: dict[str, dict[str, SpeedRecord]] = {}
    for cpu, recs in raw.items() if isinstance(raw, dict) else ():
        for key, rec in recs.items() if isinstance(recs, dict) else ():
            # One damaged record (JSON that is not an object, a field missing or not a number) costs only itself.
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.setdefault(str(cpu), {})[str(key)] = SpeedRecord(
                    float(rec["torch_s"]), float(rec["openvino_s"]), rec.get("openvino"), str(rec.get("cpu", "")),
                    str(rec.get("measured_at", "")), str(rec.get("source", "")))
    return out


def _profiles(raw: Any, version: int) -> dict[str, dict[str, Any]]:
    """The profiles as this version stores them: version 1's carried their own ``"format": 1`` (others ignored)."""
    out: dict[str, dict[str, Any]] = {}
    for key, prof in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(prof, dict):
            continue
        if version == _V1:
            if prof.get("format") != 1:
                continue
            prof = {k: v for k, v in prof.items() if k != "format"}
        out[str(key)] = prof
    return out


def _object(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds; None when it is damaged or not an object."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse(text: str, where: str | os.PathLike[str]) -> Store:
    """The store a file's text holds (this version, or version 1); empty with a note when damaged or of another."""
    data = _object(text)
    if data is None:
        return Store(note=f"{where} could not be read (damaged); it is ignored: run the hardware check to measure again")
    version = data.get("version")
    if version not in (VERSION, _V1):
        return Store(note=f"{where} was written in another format (version {version!r}, this is {VERSION}); "
                          "it is ignored: run the hardware check to measure again")
    advice = data.get("advice")
    return Store(_profiles(data.get("profiles"), version), _speeds(data.get("speeds")),
                 advice if isinstance(advice, dict) else None)


def parse_document(text: str, where: str | os.PathLike[str]) -> Store:
    """What a file given by hand holds (``profile --from``): a store (:func:`parse`), an older ``profile.json``,
    or one profile (``profile --json``, under its own ``device``); empty with a note when none of these."""
    data = _object(text) or {}
    if "version" in data:
        return parse(text, where)
    if "profiles" in data:  # profile.json, before this file
        return Store(_profiles(data["profiles"], _V1))
    if isinstance(data.get("device"), str):
        one = _profiles({data["device"]: data}, _V1 if "format" in data else VERSION)
        if one:
            return Store(one)
        return Store(note=f"{where} holds a profile of another format ({data.get('format')!r}); run the hardware check again")
    return Store(note=f"{where} holds no hardware profile")


def _json_object(f: Path) -> dict[str, Any] | None:
    """The JSON object in ``f``; None when it is missing, damaged or not an object (no measurement)."""
    try:
        return _object(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _legacy(root: Path) -> Store:
    """The files before this one, read as they were (the profiles had version 1's layout)."""
    profile = _json_object(root / LEGACY_PROFILE) or {}
    speeds = {f.stem[len("speed-"):]: _json_object(f) for f in sorted(root.glob(LEGACY_SPEEDS))}
    return Store(_profiles(profile.get("profiles"), _V1), _speeds(speeds), _json_object(root / LEGACY_ADVICE))


@lru_cache(maxsize=16)
def _cached(where: str, mtime_ns: int, size: int) -> Store:
    try:
        text = Path(where).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return Store(note=f"{where} could not be read; it is ignored: run the hardware check to measure again")
    return parse(text, where)


def read(folder: str | os.PathLike[str] | None = None) -> Store:
    """The store in ``folder`` (the models folder by default); empty, with a note, when unreadable or of another version."""
    f = path(folder)
    try:
        st = f.stat()
    except OSError:
        return _legacy(f.parent)
    store = _cached(str(f), st.st_mtime_ns, st.st_size)
    if store.advice is None:
        advice = _json_object(f.parent / LEGACY_ADVICE)  # read until a write carries it over
        if advice is not None:
            return replace(store, advice=advice)
    return store


@contextlib.contextmanager
def _locked(f: Path) -> Iterator[None]:
    """One writer at a time across processes (the hardware check's children write speeds while it runs)."""
    try:
        import fcntl
    except ImportError:  # Windows: writes are still atomic, a concurrent one may be lost
        yield
        return
    with open(f.with_name(f".{f.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update(change: Callable[[Store], Store], folder: str | os.PathLike[str] | None = None) -> Path:
    """Write ``change(store now)`` atomically; the file's path. An ignored file (damaged, another version) is
    replaced by what ``change`` makes of an empty store."""
    f = path(folder)
    made(f.parent)
    with _locked(f):
        new = replace(change(read(folder)), note="")
        # Minutes of hardware check: flushed before it counts as kept.
        durable.write_text(f, json.dumps(new.to_dict(), indent=1), sync=True, sweep=True)
    return f
