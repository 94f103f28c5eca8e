"""This machine's measurements, in one typed, versioned file: ``measurements.json`` in the models folder.

Two things are measured here and read on every request: the hardware check's profile (peaks
and times per mode, per device: :mod:`gpen_core.engine.profile_store` reads it for ``auto``)
and the speed of torch against OpenVINO per network (per CPU model:
:mod:`gpen_core.runtimes.openvino.generator` reads it to choose a runtime). Both live in
one file with one reader (:func:`read`) and one writer (:func:`update`)::

    {"version": 1,
     "profiles": {"cpu": {...a Profile...}, "cuda:0": {...}},
     "speeds": {"<CPU id>": {"512-float32": {"torch_s": 1.7, "openvino_s": 1.2, ...}}}}

A file of another version, or one that cannot be read, is ignored, never a crash: the
:class:`Store` read from it is empty and its ``note`` says why and to measure again. Files
of the format before this one (``profile.json`` and ``openvino/speed-*.json``) are read
while no ``measurements.json`` exists, and the first write carries them over.
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

VERSION = 1
FILE = "measurements.json"
# The format before this one: the profile and one speed file per CPU model.
LEGACY_PROFILE = "profile.json"
LEGACY_SPEEDS = "openvino/speed-*.json"


@dataclass(frozen=True)
class SpeedRecord:
    """One network at one (size, dtype) on one CPU: the median seconds per call of both runtimes."""

    torch_s: float
    openvino_s: float
    openvino: str | None  # OpenVINO's version then: a new one is measured again
    cpu: str  # the CPU model
    measured_at: str  # local time, ISO 8601
    source: str = ""  # what measured it (the hardware check, a benchmark), with what weights

    @classmethod
    def from_dict(cls, d: Any) -> SpeedRecord:
        """ValueError when ``d`` is not a record."""
        if not isinstance(d, dict):
            raise ValueError("not a speed record")
        try:
            return cls(float(d["torch_s"]), float(d["openvino_s"]), d.get("openvino"), str(d.get("cpu", "")),
                       str(d.get("measured_at", "")), str(d.get("source", "")))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a speed record: {exc}") from None


@dataclass(frozen=True)
class Store:
    """What the file holds: profiles by device key, speed records by CPU id then record key."""

    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # the engine's Profile.to_dict(), validated there
    speeds: dict[str, dict[str, SpeedRecord]] = field(default_factory=dict)
    note: str = ""  # why what was on disk was not (all) read; "" when it was, or there was nothing

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "profiles": self.profiles,
                "speeds": {cpu: {k: asdict(r) for k, r in recs.items()} for cpu, recs in self.speeds.items()}}


def path(folder: str | os.PathLike[str] | None = None) -> Path:
    """``measurements.json`` in the models folder (``$GPEN_HOME`` or ``~/.cache/gpen`` by default)."""
    from gpen_core.platform.paths import folder as models_folder

    return models_folder(folder) / FILE


def _speeds(raw: Any) -> dict[str, dict[str, SpeedRecord]]:
    out: dict[str, dict[str, SpeedRecord]] = {}
    for cpu, recs in (raw or {}).items() if isinstance(raw, dict) else ():
        for key, rec in (recs or {}).items() if isinstance(recs, dict) else ():
            with contextlib.suppress(ValueError):  # one damaged record costs only itself
                out.setdefault(str(cpu), {})[str(key)] = SpeedRecord.from_dict(rec)
    return out


def _parse(text: str, where: Path) -> Store:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Store(note=f"{where} could not be read (damaged); it is ignored: run the hardware check to measure again")
    if data.get("version") != VERSION:
        return Store(note=f"{where} was written in another format (version {data.get('version')!r}, this is {VERSION}); "
                          "it is ignored: run the hardware check to measure again")
    profiles = data.get("profiles")
    return Store({str(k): v for k, v in profiles.items() if isinstance(v, dict)} if isinstance(profiles, dict) else {},
                 _speeds(data.get("speeds")))


def _legacy(root: Path) -> Store:
    """The format before this one, read as it was: a missing or damaged file is no measurement."""
    profiles: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((root / LEGACY_PROFILE).read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("profiles"), dict):
            profiles = {str(k): v for k, v in data["profiles"].items() if isinstance(v, dict)}
    speeds: dict[str, Any] = {}
    for f in sorted(root.glob(LEGACY_SPEEDS)):
        with contextlib.suppress(OSError, ValueError):
            speeds[f.stem[len("speed-"):]] = json.loads(f.read_text())
    return Store(profiles, _speeds(speeds))


@lru_cache(maxsize=16)
def _cached(where: str, mtime_ns: int, size: int) -> Store:
    try:
        text = Path(where).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return Store(note=f"{where} could not be read; it is ignored: run the hardware check to measure again")
    return _parse(text, Path(where))


def read(folder: str | os.PathLike[str] | None = None) -> Store:
    """The store in ``folder`` (the models folder by default); empty, with a note, when unreadable or of another version."""
    f = path(folder)
    try:
        st = f.stat()
    except OSError:
        return _legacy(f.parent)
    return _cached(str(f), st.st_mtime_ns, st.st_size)


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
    """Write ``change(store now)`` atomically (a reader never sees half a file); the file's path.
    A file that was ignored (damaged, another version) is replaced by what ``change`` makes of an empty store."""
    f = path(folder)
    with _locked(f):
        new = replace(change(read(folder)), note="")
        tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(new.to_dict(), indent=1), encoding="utf-8")
        os.replace(tmp, f)
    return f
