"""The hardware check: "how much memory do I need?", measured on this machine.

For each memory mode, a fresh :class:`~gpen_core.restorer.Restorer` (in a fresh worker
process by default) runs the standard workloads (:mod:`gpen_core.workloads`: an aligned
512 px face, a 12 MP photo with one face, a group photo) and records what the engine's
own PeakMeter saw: peak RAM and VRAM (allocated and reserved) above the process just
before its first request, seconds per face and total seconds. The first workload loads
the mode's models, as a first request would; the others reuse them.

Weights: the real files when they are present; otherwise the exact architectures
with random weights (``Restorer(synthetic_weights=True)``), which cost the same
memory and time but restore nothing — every row then says so. Without a detector
file the engine still runs the detector network (random weights) for its cost and
the workloads' fixed face boxes (GPEN's template landmarks) stand in for detections.

The result (:class:`Profile`) is saved as ``profile.json`` in the models folder,
one entry per device, keyed by a :func:`fingerprint` of the machine, the versions
and the weights present. :func:`measured_peak` / :func:`measured` (read by
:mod:`gpen_core.auto`) return a saved figure only while that fingerprint still
matches; after a new GPU, a torch upgrade or a download the check must run again.

A peak is one measurement, not a bound: repeated fresh-process runs of the same
GPEN-BFR-512 call on this project's CPU machine ranged 1.15-1.55 GB (bimodal, even
single-threaded); ``auto`` keeps 20 % of free memory spare for that.

Pure functions for the app's "Hardware check" tab: :func:`run_profile`,
:func:`format_table`, :func:`chart_rows`, :func:`recommendation`. The command line
is ``python -m gpen_core profile`` (:func:`add_cli`, :func:`run_cli`).
Nothing heavy at import: torch and the engine load inside :func:`run_profile`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .meter import format_bytes
from .modes import MODES, MemoryMode, get_mode
from .workloads import STANDARD, Workload

if TYPE_CHECKING:
    from .arch import GPENConfig
    from .auto import Free

Progress = Callable[[float, str], None]

PROFILE_FILE = "profile.json"
FORMAT = 1  # bump when the JSON layout changes; older files are then ignored
SYNTHETIC_NOTE = "synthetic weights: memory and speed only; no restoration"
DETECTOR_SYNTHETIC_NOTE = (
    "no detector weights: the detector ran with random weights for its memory and time, "
    "and fixed face boxes (GPEN's template landmarks) stood in for its detections"
)
GIVEN_BOXES_NOTE = "no detector: fixed face boxes (GPEN's template landmarks), detection not measured"


# ----------------------------------------------------------------------- types


@dataclass(frozen=True)
class WorkloadRun:
    """One workload through one mode. Bytes above the idle process; VRAM None without CUDA."""

    workload: str  # Workload.name
    faces: int  # faces the engine restored
    processed_size: tuple[int, int]  # width, height after the mode's pre-shrink
    peak_ram_bytes: int  # peak RSS during the call minus the idle process's RSS (Profile.idle_rss_bytes)
    peak_vram_bytes: int | None  # torch max_memory_allocated minus idle allocated
    peak_vram_reserved_bytes: int | None  # torch max_memory_reserved minus idle reserved
    ram_method: str  # "vmhwm" (exact) or "sampling" (see gpen_core.meter)
    total_s: float  # wall time of the call
    restore_s: float  # generator time over all faces
    load_s: float  # model loading inside the call (the first workload of a mode)
    seconds_per_face: float | None  # restore_s / faces; None without faces
    ran_mode: str  # the mode the engine actually ran (differs when it stepped down)
    detector: str  # "mobilenet0.25", "resnet50", "given boxes" or "none" (aligned)
    notes: tuple[str, ...] = ()

    @property
    def processed_pixels(self) -> int:
        return self.processed_size[0] * self.processed_size[1]


@dataclass(frozen=True)
class ModeProfile:
    """One mode on this machine: the worst workload's peaks and the steady per-face time."""

    mode: str
    model: str  # registry name, or the checkpoint path for model-config overrides
    weights: str  # "real" or "synthetic"
    dtype: str  # compute dtype that ran
    detector: str  # what found the faces: a RetinaFace backbone or "given boxes"
    peak_ram_bytes: int  # max over the workloads, above idle
    peak_vram_bytes: int | None
    peak_vram_reserved_bytes: int | None
    peak_bytes: int  # on the device's binding memory: reserved VRAM on CUDA, RAM on CPU
    covered_pixels: int  # the largest processed photo among the workloads: the peak covers up to this
    bytes_per_pixel: float | None  # measured growth of the peak with the photo's pixels (None: not measurable)
    seconds_per_face: float | None  # group photo's restore time per face (steady state, model loaded)
    total_s: float  # all workloads of this mode, loading included
    load_s: float
    idle_rss_bytes: int  # the measuring process before its first request (torch imported, inputs built): the zero
    idle_vram_bytes: int | None
    stepped_down_to: str | None  # the engine ran a lighter mode instead (did not fit); the figures are not this mode's
    # Why the mode could not be measured (killed by the OS / out of memory); then peak_bytes is
    # what was free when it failed: a lower bound of what it needs.
    failed: str | None
    runs: tuple[WorkloadRun, ...]
    notes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, m: dict[str, Any]) -> "ModeProfile":
        runs = tuple(
            WorkloadRun(**{**r, "processed_size": tuple(r["processed_size"]), "notes": tuple(r.get("notes", ()))})
            for r in m["runs"]
        )
        return cls(**{**m, "runs": runs, "notes": tuple(m.get("notes", ()))})


@dataclass(frozen=True)
class Profile:
    """The whole hardware check: machine facts, the fingerprint it is valid for, one row per mode."""

    format: int
    created: str  # local time, ISO 8601
    device: str  # "cpu" or "cuda:0"
    synthetic: bool  # any mode ran random weights
    fingerprint: dict[str, Any]
    machine: dict[str, Any]  # CPU model and flags, cores, RAM, GPU, versions (gpen_core.info)
    free_at_start: dict[str, int | None]  # {"ram_bytes", "vram_bytes"} when the check began
    # Each mode ran in a fresh process (the default): its peak is what a first request costs,
    # free of what earlier modes left in the allocator. False: all in this process.
    isolated: bool
    workloads: tuple[dict[str, Any], ...]  # the Workload definitions, as run
    modes: dict[str, ModeProfile]
    notes: tuple[str, ...] = ()
    command: str = ""  # what produced it (the CLI fills this in)

    @property
    def binding(self) -> str:
        return "VRAM" if self.device.startswith("cuda") else "RAM"

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        """Inverse of :meth:`to_dict`; ValueError when a field is missing or the format differs."""
        if d.get("format") != FORMAT:
            raise ValueError(f"profile format {d.get('format')!r}, expected {FORMAT}")
        try:
            modes = {k: ModeProfile.from_dict(m) for k, m in d["modes"].items()}
            return cls(
                **{
                    **d,
                    "workloads": tuple(d["workloads"]),
                    "modes": modes,
                    "notes": tuple(d.get("notes", ())),
                }
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a hardware profile: {exc}") from exc


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


# ----------------------------------------------------------------- fingerprint


def _device_key(device: str) -> str:
    """'cpu' or 'cuda:N' ('cuda' means device 0), the key a profile is stored under."""
    if device.startswith("cuda"):
        return device if ":" in device else "cuda:0"
    return "cpu"


@lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=8)
def _machine_part(device: str) -> tuple[tuple[str, Any], ...]:
    """The parts of the fingerprint that cannot change while this process runs."""
    import psutil

    from . import __version__

    gpu = None
    if device.startswith("cuda"):
        try:
            import torch

            gpu = torch.cuda.get_device_name(int(device.split(":")[1]))
        except Exception:  # no CUDA (any more): a CUDA profile cannot match this machine
            gpu = "unavailable"
    torch_version = None
    try:
        from importlib import metadata

        torch_version = metadata.version("torch")
    except Exception:  # torch from a source build has no metadata; the module knows
        torch_version = getattr(sys.modules.get("torch"), "__version__", None)
    return (
        ("cpu_model", _cpu_model()),
        ("cores", psutil.cpu_count(logical=True)),
        ("ram_total_mib", int(psutil.virtual_memory().total // 2**20)),
        ("device", device),
        ("gpu_name", gpu),
        ("torch", torch_version),
        ("gpen_core", __version__),
    )


def _weights_present(models_dir: str | os.PathLike[str] | None) -> dict[str, int]:
    """Registry name → file size for every checkpoint present (stat only: no hashing, cheap per request)."""
    from . import weights

    present: dict[str, int] = {}
    for name in weights.REGISTRY:
        p = weights.locate(name, models_dir=models_dir)
        if p is not None:
            try:
                present[name] = p.stat().st_size
            except OSError:
                continue
    return present


def fingerprint(device: str, models_dir: str | os.PathLike[str] | None = None, synthetic: bool = False) -> dict[str, Any]:
    """What a profile is valid for: CPU model, cores, total RAM, GPU, torch and gpen_core
    versions, the weights present (name → size) and whether random weights were used."""
    fp = dict(_machine_part(_device_key(device)))
    fp["weights"] = _weights_present(models_dir)
    fp["synthetic"] = bool(synthetic)
    return fp


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Fingerprints equal except for ``synthetic``: random weights cost what real ones cost,
    so a synthetic profile serves ``auto`` as well as a real one (until real weights appear,
    which changes ``weights``)."""
    strip = lambda fp: {k: v for k, v in fp.items() if k != "synthetic"}  # noqa: E731
    return strip(a) == strip(b)


# ------------------------------------------------------------------ save, load


def profile_path(models_dir: str | os.PathLike[str] | None = None) -> Path:
    """``profile.json`` in the models folder (``$GPEN_HOME`` or ``~/.cache/gpen`` by default)."""
    from .weights import _folder

    return _folder(models_dir) / PROFILE_FILE


def _read_store(path: Path) -> dict[str, Any]:
    """{device key: profile dict}; {} when absent, unreadable, or another format (a stale file is not an error)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("profiles"), dict):
        return {}
    return data["profiles"]


def save_profile(profile: Profile, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write ``profile`` into the models folder's ``profile.json`` under its device, atomically.

    Modes measured earlier for the same fingerprint and workloads are kept when this
    run measured only some modes (``--modes``); anything else for the device is replaced.
    """
    path = profile_path(models_dir)
    store = _read_store(path)
    key = _device_key(profile.device)
    mine = profile.to_dict()
    old = store.get(key)
    if isinstance(old, dict) and old.get("fingerprint") == mine["fingerprint"] and old.get("workloads") == mine["workloads"]:
        mine["modes"] = {**old.get("modes", {}), **mine["modes"]}
        mine["modes"] = {m: mine["modes"][m] for m in MODES if m in mine["modes"]}
    store[key] = mine
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": FORMAT, "profiles": store}, indent=2), encoding="utf-8")
    os.replace(tmp, path)  # readers never see half a file
    _cached_store.cache_clear()
    return path


@lru_cache(maxsize=8)
def _cached_store(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    return _read_store(Path(path))


def load_profile(device: str, models_dir: str | os.PathLike[str] | None = None, *, any_machine: bool = False) -> Profile | None:
    """The saved profile for ``device`` when its fingerprint matches this machine now, else None.

    ``any_machine=True`` returns it whatever the fingerprint (for showing an old result).
    """
    path = profile_path(models_dir)
    try:
        st = path.stat()
    except OSError:
        return None
    store = _cached_store(str(path), st.st_mtime_ns, st.st_size)
    raw = store.get(_device_key(device))
    if not isinstance(raw, dict):
        return None
    if not any_machine and not same_machine(raw.get("fingerprint", {}), fingerprint(device, models_dir)):
        return None
    try:
        return Profile.from_dict(raw)
    except ValueError:
        return None


def load_json(path: str | os.PathLike[str], device: str | None = None) -> Profile:
    """A profile from a file: a single profile (``profile --json``) or a saved ``profile.json``
    (then the entry for ``device``, or the only/first one). ValueError when it holds none."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("profiles"), dict):
        profiles = data["profiles"]
        if not profiles:
            raise ValueError(f"{path} holds no profile")
        key = _device_key(device) if device else next(iter(profiles))
        if key not in profiles:
            raise ValueError(f"{path} has no profile for {key}; it has {', '.join(profiles)}")
        data = profiles[key]
    return Profile.from_dict(data)


@dataclass(frozen=True)
class Measured:
    """What ``auto`` needs from a saved profile for one mode."""

    peak_bytes: int  # above the idle process, binding memory, for photos up to covered_pixels
    covered_pixels: int
    bytes_per_pixel: float | None  # measured growth beyond that; None: use the built-in figure
    source: str


def measured(mode: str, device: str, models_dir: Path | None = None) -> Measured | None:
    """The saved measurement of ``mode`` on ``device`` when valid for this machine, else None."""
    prof = load_profile(device, models_dir)
    if prof is None or mode not in prof.modes:
        return None
    m = prof.modes[mode]
    if m.stepped_down_to is not None:  # the engine did not run this mode: nothing was measured for it
        return None
    # A mode that failed for memory keeps what was free then as its peak, a lower bound:
    # auto does not pick it until more than that is free.
    src = f"measured on this machine ({prof.created}{', synthetic weights' if prof.synthetic else ''})"
    return Measured(m.peak_bytes, m.covered_pixels, m.bytes_per_pixel, src)


def measured_peak(mode: str, device: str, models_dir: Path | None = None) -> tuple[int, str] | None:
    """(peak bytes above the idle process for ``mode``'s standard workload on ``device``'s binding
    memory — VRAM on CUDA, RAM on CPU —, where the figure comes from) from the saved profile when
    it is valid for this machine (same fingerprint), else None."""
    m = measured(mode, device, models_dir)
    return None if m is None else (m.peak_bytes, m.source)


# ------------------------------------------------------------------- measuring

# Lines the worker process writes for its parent start with this; anything else a library
# prints on stdout is ignored.
_MARK = "\x1egpen-profile "


def _machine_facts(models_dir: str | os.PathLike[str] | None) -> dict[str, Any]:
    from .info import collect_info

    info = collect_info(models_dir=models_dir)
    return {
        "cpu_model": info.cpu_model,
        "cpu_flags": list(info.cpu_flags),
        "cores_logical": info.cores_logical,
        "cores_physical": info.cores_physical,
        "ram_total_bytes": info.ram_total_bytes,
        "ram_available_bytes": info.ram_available_bytes,
        "gpu_name": info.cuda_name,
        "vram_total_bytes": info.cuda_vram_bytes,
        "cuda_runtime": info.cuda_runtime,
        "torch": info.torch,
        "torch_threads": info.torch_threads,
        "gpen_core": info.gpen_core,
        "python": info.python,
        "platform": info.platform,
    }


def _idle(device: str) -> tuple[int, int | None, int | None]:
    """(RSS, allocated VRAM, reserved VRAM) of the process now."""
    from .meter import current_rss

    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        return current_rss(), int(torch.cuda.memory_allocated()), int(torch.cuda.memory_reserved())
    return current_rss(), None, None


def _write_overrides(configs: dict[str, "GPENConfig"], folder: Path) -> dict[str, str]:
    """Random checkpoints for the model-config overrides (tests: tiny GPENs); name → path."""
    import torch

    from .synthetic import random_state_dict

    paths = {}
    for name, cfg in configs.items():
        p = folder / f"synthetic-{name}.pth"
        torch.save(random_state_dict(cfg, seed=0), p)
        paths[name] = str(p)
    return paths


def _slope(runs: Sequence[WorkloadRun], device: str) -> float | None:
    """Bytes per processed pixel between the smallest and the largest photo workload, when it grows."""
    photos = [r for r in runs if r.detector != "none" and r.faces > 0]
    if len(photos) < 2:
        return None
    lo = min(photos, key=lambda r: r.processed_pixels)
    hi = max(photos, key=lambda r: r.processed_pixels)
    dp = hi.processed_pixels - lo.processed_pixels
    if dp < 1_000_000:  # too close in size for the difference to mean anything
        return None
    if device.startswith("cuda"):
        a, b = lo.peak_vram_reserved_bytes, hi.peak_vram_reserved_bytes
        if a is None or b is None:
            return None
    else:
        a, b = lo.peak_ram_bytes, hi.peak_ram_bytes
    s = (b - a) / dp
    # More faces in the smaller photo can outweigh its fewer pixels: no growth measured then.
    return round(s, 2) if s > 0 else None


def _plan_mode(
    mode: MemoryMode,
    override_paths: dict[str, str],
    configs: dict[str, "GPENConfig"],
    synthetic: bool | None,
    models_dir: str | os.PathLike[str] | None,
    portraits: Sequence[Path],
    device: str,
    workloads: Sequence[Workload],
) -> dict[str, Any]:
    """The JSON-able spec :func:`_measure_mode` runs for one mode (weights, face source, inputs).

    Raises WeightsError when ``synthetic=False`` and the mode's generator is missing.
    """
    from . import weights
    from .restorer import DETECTOR_WEIGHTS

    notes: list[str] = []
    if mode.model in override_paths:
        model_opt, kind = override_paths[mode.model], "synthetic"
        notes.append(f"{mode.model} replaced by a model-config override ({configs[mode.model]})")
    elif synthetic is True:
        model_opt, kind = None, "synthetic"
    else:
        located = weights.locate(mode.model, models_dir=models_dir)
        if located is None and synthetic is False:
            weights.resolve(mode.model, models_dir=models_dir, allow_download=False)  # raises, naming the fix
        model_opt, kind = (str(located), "real") if located is not None else (None, "synthetic")
    if kind == "synthetic":
        notes.append(SYNTHETIC_NOTE)
    det_present = weights.locate(DETECTOR_WEIGHTS[mode.detector], models_dir=models_dir) is not None
    # A real detector must find real faces: composite a portrait from examples/. Otherwise
    # the engine gets fixed boxes (and, with synthetic weights, still runs the detector
    # network for its cost).
    if det_present and not portraits and synthetic is not False:
        notes.append(
            f"no portrait in examples/ to composite: the {mode.detector} detector ran for its cost, "
            "fixed face boxes stood in for its detections"
        )
    torch = sys.modules.get("torch")
    return {
        "mode": mode.name,
        "model_opt": model_opt,
        "kind": kind,
        "use_detector": det_present and bool(portraits),
        "portraits": [str(p) for p in portraits],
        "notes": notes,
        "models_dir": None if models_dir is None else str(models_dir),
        "device": device,
        "synthetic_restorer": synthetic is not False,
        "workloads": [asdict(w) for w in workloads],
        # The engine runs with this process's thread count; the measurement should too.
        "threads": torch.get_num_threads() if torch is not None else None,
    }


def _measure_mode(spec: dict[str, Any], report: Progress) -> ModeProfile:
    """Run one mode's workloads through a new Restorer in this process, and summarise.

    Zero is this process just before the first request: torch imported, the inputs built
    (a caller's photo is already in memory when it asks). The first workload loads the
    models, as a first request does; the rest reuse them.
    """
    import torch

    from .restorer import Restorer, RestoreOptions
    from .workloads import build

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    mode = get_mode(spec["mode"])
    wls = [Workload(**w) for w in spec["workloads"]]
    portraits = [Path(p) for p in spec["portraits"]] if spec["use_detector"] else []
    images = [build(w, portraits=portraits) for w in wls]
    restorer = Restorer(models_dir=spec["models_dir"], device=spec["device"], synthetic_weights=spec["synthetic_restorer"])
    dev = restorer.device
    if dev.startswith("cuda"):
        torch.zeros(1, device=dev)  # the CUDA context is the process's, not the mode's
    idle_rss, idle_alloc, idle_res = _idle(dev)
    runs: list[WorkloadRun] = []
    dtype = ""
    try:
        for i, (w, wi) in enumerate(zip(wls, images)):

            def inner(f: float, d: str, i: int = i, w: Workload = w) -> None:
                report((i + f) / len(wls), f"{mode.name}: {w.label}: {d}")

            given = None if (w.aligned or spec["use_detector"]) else list(wi.detections)
            opts = RestoreOptions(mode=mode.name, model=spec["model_opt"], aligned=w.aligned)
            res = restorer(wi.image, opts, inner, detections=given)
            runs.append(_run_record(w, res, spec["use_detector"], idle_rss, idle_alloc, idle_res))
            dtype = res.dtype
    finally:
        restorer.unload()
    return _summarise(mode, runs, dev, spec["kind"], dtype, idle_rss, idle_alloc, list(spec["notes"]))


def _child_main() -> None:
    """Entry point of the worker process: spec JSON on stdin, marked lines on stdout."""
    spec = json.loads(sys.stdin.read())
    out = sys.stdout

    def send(kind: str, payload: Any) -> None:
        out.write(f"{_MARK}{kind} {json.dumps(payload)}\n")
        out.flush()

    try:
        result = _measure_mode(spec, lambda f, d: send("P", [f, d]))
    except Exception as exc:
        from .restorer import _is_oom

        send("E", {"type": type(exc).__name__, "message": str(exc), "oom": _is_oom(exc) or type(exc).__name__ == "ResourceError"})
        raise SystemExit(1) from None
    send("R", _jsonable(asdict(result)))


class _ModeFailed(Exception):
    """One mode ran out of memory while being measured (the check goes on with the others)."""


def _measure_in_child(spec: dict[str, Any], report: Progress) -> ModeProfile:
    """:func:`_measure_mode` in a fresh Python process; the parent survives the child's OOM kill."""
    import subprocess

    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])  # so the child imports this same gpen_core
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-c", "from gpen_core.profile import _child_main; _child_main()"]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(spec))
            proc.stdin.close()
            for line in proc.stdout:
                if not line.startswith(_MARK):
                    continue
                kind, _, payload = line[len(_MARK) :].partition(" ")
                data = json.loads(payload)
                if kind == "P":
                    report(float(data[0]), str(data[1]))
                elif kind == "R":
                    result = data
                elif kind == "E":
                    error = data
            rc = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: do not leave a worker behind
                proc.kill()
                proc.wait()
        if result is not None:
            return ModeProfile.from_dict(result)
        if error is not None:
            if error.get("oom"):
                raise _ModeFailed(f"out of memory: {error['message']}")
            _reraise(error, spec["mode"])
        if rc < 0:
            raise _ModeFailed(f"the measuring process was killed by signal {-rc} (most likely the kernel's out-of-memory killer)")
        err.seek(0)
        tail = err.read()[-2000:]
        raise RuntimeError(f"measuring {spec['mode']} failed: its worker process exited with status {rc}:\n{tail}")


def _reraise(error: dict[str, Any], mode: str) -> None:
    from . import errors

    cls = getattr(errors, error.get("type", ""), None)
    if isinstance(cls, type) and issubclass(cls, errors.GPENError):
        raise cls(error["message"])
    raise RuntimeError(f"measuring {mode} failed in its worker process: {error.get('type')}: {error.get('message')}")


def _failed_mode(spec: dict[str, Any], why: str, free_binding: int | None) -> ModeProfile:
    mode = get_mode(spec["mode"])
    lower = int(free_binding or 0)
    return ModeProfile(
        mode=mode.name,
        model=mode.model,
        weights=spec["kind"],
        dtype="",
        detector="",
        peak_ram_bytes=lower,
        peak_vram_bytes=None,
        peak_vram_reserved_bytes=None,
        peak_bytes=lower,
        covered_pixels=0,
        bytes_per_pixel=None,
        seconds_per_face=None,
        total_s=0.0,
        load_s=0.0,
        idle_rss_bytes=0,
        idle_vram_bytes=None,
        stepped_down_to=None,
        failed=why,
        runs=(),
        notes=(*spec["notes"], f"{mode.name} could not be measured ({why}): it needs more than the {format_bytes(lower)} that was free"),
    )


def run_profile(
    modes: Iterable[str] | None = None,
    models_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    synthetic: bool | None = None,
    *,
    device: str | None = None,
    workloads: Sequence[Workload] = STANDARD,
    model_configs: dict[str, "GPENConfig"] | None = None,
    isolate: bool = True,
    save: bool = True,
    command: str = "",
) -> Profile:
    """Measure every mode in ``modes`` (default: all, lightest first) on this machine.

    ``synthetic``: True forces random weights for every generator; False requires the
    real ones (WeightsError names the missing file); None uses each mode's real
    generator when present and random weights otherwise. Detectors are real when their
    file is present (with a portrait from ``examples/`` composited for them to find);
    otherwise the workloads' fixed boxes are given. ``device``: "cpu", "cuda" or None
    (the engine's default). ``progress(fraction, description)`` is called as it goes.

    ``isolate`` (default) measures each mode in a fresh Python process: the figure is
    what a first request costs, independent of what earlier modes left in the allocator
    (in one process, a mode measured after others came out up to 4 % lower than in a
    fresh one), and a mode that exhausts memory kills only its worker: it is recorded as
    needing more than was free and the check goes on. ``isolate=False`` runs everything
    here (faster to start; for tests).

    ``workloads`` and ``model_configs`` (registry name → GPENConfig, built with random
    weights) exist for tests and experiments; the standard check uses neither. ``save``
    writes the result to ``profile.json`` in the models folder.

    Raises InputError for an unknown mode, WeightsError as described, RuntimeError when a
    worker fails for another reason.
    """
    from . import auto
    from .restorer import Restorer, _is_oom
    from .workloads import example_faces

    t_start = time.perf_counter()
    report = progress or (lambda f, d: None)
    names = list(MODES) if modes is None else list(dict.fromkeys(modes))
    wanted: list[MemoryMode] = sorted((get_mode(n) for n in names), key=lambda m: m.rank)
    if not wanted:
        from .errors import InputError

        raise InputError("no modes to measure; choose from: " + ", ".join(MODES))
    configs = dict(model_configs or {})
    # One portrait, always the same file: a photo with several faces would multiply the count.
    portraits = example_faces()[:1]

    report(0.0, "reading the machine")
    machine = _machine_facts(models_dir)
    dev = Restorer(device=device).device
    free0 = auto.free_memory(dev)
    free_binding = free0.vram_bytes if dev.startswith("cuda") else free0.ram_bytes
    results: dict[str, ModeProfile] = {}
    with tempfile.TemporaryDirectory(prefix="gpen-profile-") as tmp:
        override_paths = _write_overrides(configs, Path(tmp)) if configs else {}
        specs = [_plan_mode(m, override_paths, configs, synthetic, models_dir, portraits, dev, workloads) for m in wanted]
        for i, spec in enumerate(specs):

            def step(f: float, d: str, i: int = i) -> None:
                report(min(1.0, (i + f) / len(specs)), d)

            step(0.0, f"{spec['mode']}: starting")
            try:
                if isolate:
                    results[spec["mode"]] = _measure_in_child(spec, step)
                else:
                    results[spec["mode"]] = _measure_mode(spec, step)
            except _ModeFailed as exc:
                results[spec["mode"]] = _failed_mode(spec, str(exc), free_binding)
            except Exception as exc:
                if isolate or not (_is_oom(exc) or type(exc).__name__ == "ResourceError"):
                    raise
                results[spec["mode"]] = _failed_mode(spec, f"out of memory: {exc}", free_binding)

    any_synthetic = any(s["kind"] == "synthetic" for s in specs)
    notes: list[str] = []
    for note in (SYNTHETIC_NOTE, DETECTOR_SYNTHETIC_NOTE, GIVEN_BOXES_NOTE):
        if results and all(note in m.notes for m in results.values()):
            notes.append(note)
    if configs:
        notes.append("model-config overrides: not the released architectures (a test or an experiment)")
    if tuple(workloads) != STANDARD:
        notes.append("non-standard workloads")
    notes.append(
        "peaks are above the measuring process just before its first request (torch imported, inputs in memory); "
        + ("each mode ran in a fresh process" if isolate else "all modes ran in this process, one after another")
    )
    notes.append(f"the whole check took {time.perf_counter() - t_start:.1f} s")
    prof = Profile(
        format=FORMAT,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        device=_device_key(dev),
        synthetic=any_synthetic,
        fingerprint=fingerprint(dev, models_dir, any_synthetic),
        machine=machine,
        free_at_start={"ram_bytes": free0.ram_bytes, "vram_bytes": free0.vram_bytes},
        isolated=isolate,
        workloads=tuple(asdict(w) for w in workloads),
        modes=results,
        notes=tuple(notes),
        command=command,
    )
    if save:
        save_profile(prof, models_dir)
    report(1.0, "done")
    return prof


def _run_record(w: Workload, res: Any, real_detector: bool, idle_rss: int, idle_alloc: int | None, idle_res: int | None) -> WorkloadRun:
    p = res.peaks
    notes = list(res.notes)
    if real_detector and not w.aligned and len(res.faces) != w.faces:
        notes.append(f"the {res.detector} detector found {len(res.faces)} of the {w.faces} faces placed")
    vram_a = None if p.vram_allocated_bytes is None or idle_alloc is None else max(0, p.vram_allocated_bytes - idle_alloc)
    vram_r = None if p.vram_reserved_bytes is None or idle_res is None else max(0, p.vram_reserved_bytes - idle_res)
    n = len(res.faces)
    return WorkloadRun(
        workload=w.name,
        faces=n,
        processed_size=tuple(res.processed_size),  # type: ignore[arg-type]
        peak_ram_bytes=max(0, p.rss_bytes - idle_rss),
        peak_vram_bytes=vram_a,
        peak_vram_reserved_bytes=vram_r,
        ram_method=p.method,
        total_s=round(res.timings.total_s, 4),
        restore_s=round(res.timings.restore_s, 4),
        load_s=round(res.timings.load_s, 4),
        seconds_per_face=round(res.timings.restore_s / n, 4) if n else None,
        ran_mode=res.mode.name,
        detector=res.detector,
        notes=tuple(notes),
    )


def _summarise(
    mode: MemoryMode,
    runs: list[WorkloadRun],
    device: str,
    kind: str,
    dtype: str,
    idle_rss: int,
    idle_vram: int | None,
    notes: list[str],
) -> ModeProfile:
    ram = max(r.peak_ram_bytes for r in runs)
    vram = max((r.peak_vram_bytes for r in runs if r.peak_vram_bytes is not None), default=None)
    vres = max((r.peak_vram_reserved_bytes for r in runs if r.peak_vram_reserved_bytes is not None), default=None)
    # Reserved, not allocated, is what another process cannot have: the binding figure on CUDA.
    binding = (vres if vres is not None else vram) if device.startswith("cuda") else ram
    stepped = next((r.ran_mode for r in runs if r.ran_mode != mode.name), None)
    if stepped:
        notes.append(f"the engine ran {stepped} instead of {mode.name} (it did not fit): {mode.name} was not measured")
    photos = [r for r in runs if r.detector != "none"]
    steady = [r for r in runs if r.faces > 1] or [r for r in runs if r.faces]
    spf = max(steady, key=lambda r: r.faces).seconds_per_face if steady else None
    detectors = {r.detector for r in photos}
    if any("synthetic weights" in d for d in detectors):
        notes.append(DETECTOR_SYNTHETIC_NOTE)
    elif "given boxes" in detectors:
        notes.append(GIVEN_BOXES_NOTE)
    return ModeProfile(
        mode=mode.name,
        model=mode.model,
        weights=kind,
        dtype=dtype,
        detector=", ".join(sorted(detectors)) if detectors else "none",
        peak_ram_bytes=ram,
        peak_vram_bytes=vram,
        peak_vram_reserved_bytes=vres,
        peak_bytes=int(binding if binding is not None else ram),
        covered_pixels=max(r.processed_pixels for r in runs),
        bytes_per_pixel=_slope(runs, device),
        seconds_per_face=spf,
        total_s=round(sum(r.total_s for r in runs), 3),
        load_s=round(sum(r.load_s for r in runs), 3),
        idle_rss_bytes=idle_rss,
        idle_vram_bytes=idle_vram,
        stepped_down_to=stepped,
        failed=None,
        runs=tuple(runs),
        notes=tuple(dict.fromkeys(notes)),
    )


# --------------------------------------------------------------- presentation


def _free_now(profile: Profile, free: "Free | None") -> "Free":
    from .auto import free_memory

    if free is not None:
        return free
    return free_memory(profile.device if profile.device.startswith("cuda") else "cpu")


def _have(profile: Profile, free: "Free") -> int | None:
    return free.vram_bytes if profile.device.startswith("cuda") else free.ram_bytes


def _fits(m: ModeProfile, profile: Profile, free: "Free") -> tuple[bool, int, int | None]:
    """(fits, bytes short, bytes free) for ``m`` against ``free`` with auto's safety margin."""
    from .auto import SAFETY_MARGIN

    have = _have(profile, free)
    if have is None or m.stepped_down_to or m.failed:
        return False, m.peak_bytes, have
    usable = int(have * SAFETY_MARGIN)
    # Nothing runs in no memory, even a mode whose measured peak above idle was ~0.
    return usable > 0 and m.peak_bytes <= usable, max(0, m.peak_bytes - usable), have


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def machine_line(profile: Profile) -> str:
    """One line of machine facts: CPU (flags), cores, RAM, GPU, torch."""
    m = profile.machine
    flags = ", ".join(m.get("cpu_flags") or []) or "no AVX-512/bf16"
    bf16 = any("bf16" in f for f in (m.get("cpu_flags") or []))
    gpu = f"{m['gpu_name']} ({format_bytes(m.get('vram_total_bytes'))})" if m.get("gpu_name") else "no CUDA GPU"
    return (
        f"{m.get('cpu_model', '?')} [{flags}; native bf16: {'yes' if bf16 else 'no'}], "
        f"{m.get('cores_physical') or '?'} cores / {m.get('cores_logical') or '?'} threads, "
        f"RAM {format_bytes(m.get('ram_available_bytes'))} free of {format_bytes(m.get('ram_total_bytes'))}, "
        f"{gpu}, torch {m.get('torch')}, gpen_core {m.get('gpen_core')}; measured on {profile.device}"
    )


def format_table(profile: Profile, free: "Free | None" = None, *, fits: bool = True) -> str:
    """The markdown table people pass around: mode × peak RAM × peak VRAM × s/face × fits?

    Peaks are above the idle process, worst of the standard workloads (a 12 MP photo
    included). ``fits`` compares each mode's peak on the binding memory with what is
    free (``free`` or now) less auto's safety margin; ``fits=False`` leaves that
    column out (for the README, where the reader's machine decides).
    """
    free = _free_now(profile, free) if fits else None
    head = ["mode", "model", "dtype", "peak RAM", "peak VRAM (alloc / reserved)", "s / face", "total s", "weights"]
    if fits:
        head.append("fits?")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in MODES:
        m = profile.modes.get(name)
        if m is None:
            continue
        vram = "n/a" if m.peak_vram_bytes is None else f"{format_bytes(m.peak_vram_bytes)} / {format_bytes(m.peak_vram_reserved_bytes)}"
        w = SYNTHETIC_NOTE if m.weights == "synthetic" else "real"
        row = [f"`{m.mode}`", m.model, m.dtype, format_bytes(m.peak_ram_bytes), vram, _secs(m.seconds_per_face), f"{m.total_s:.1f}", w]
        if m.stepped_down_to:
            row[3] = row[4] = f"not measured (ran {m.stepped_down_to})"
        elif m.failed:
            row[3 if profile.binding == "RAM" else 4] = f"more than {format_bytes(m.peak_bytes)} (out of memory)"
        if free is not None:
            ok, short, have = _fits(m, profile, free)
            row.append("yes" if ok else (f"no ({format_bytes(short)} short)" if have is not None else "no"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def chart_rows(profile: Profile) -> list[dict[str, Any]]:
    """One dict per measured mode for a bar chart: ``mode``, ``peak RAM MB``, ``peak VRAM MB``
    (reserved; None without CUDA). Megabytes are decimal, as in the tables."""
    rows = []
    for name in MODES:
        m = profile.modes.get(name)
        if m is None:
            continue
        v = m.peak_vram_reserved_bytes if m.peak_vram_reserved_bytes is not None else m.peak_vram_bytes
        rows.append({"mode": name, "peak RAM MB": round(m.peak_ram_bytes / 1e6, 1), "peak VRAM MB": None if v is None else round(v / 1e6, 1)})
    return rows


def recommendation(profile: Profile, free: "Free | None" = None) -> str:
    """Which mode to use on this machine and what the next better one lacks, in one or two sentences.

    Same rule as ``auto``: the highest-ranked mode that pastes faces back and whose
    measured peak fits the free memory (``free`` or now) less the safety margin.
    """
    free = _free_now(profile, free)
    where = profile.binding
    have = _have(profile, free)
    pasting = sorted((profile.modes[n] for n in profile.modes if MODES[n].paste), key=lambda m: -MODES[m.mode].rank)
    if not pasting:
        return "no pasting mode was measured: run the check with low, balanced or quality"
    fitting = [m for m in pasting if _fits(m, profile, free)[0]]
    synth = " (measured with synthetic weights: the memory figures hold, the output would not be restored)" if profile.synthetic else ""
    if not fitting:
        low = pasting[-1]
        _, short, _ = _fits(low, profile, free)
        return (
            f"even `{low.mode}` needs {format_bytes(short)} more {where} than you have free ({format_bytes(have)}): "
            f"close other programs, use smaller photos, or use a machine with more memory{synth}"
        )
    best = fitting[0]
    better = [m for m in pasting if MODES[m.mode].rank > MODES[best.mode].rank]
    s = f"use `{best.mode}` (peak {format_bytes(best.peak_bytes)} {where}, {format_bytes(have)} free"
    s += f", ~{best.seconds_per_face:.{1 if best.seconds_per_face >= 1 else 2}f} s per face)" if best.seconds_per_face is not None else ")"
    if better:
        nxt = better[-1]  # the next one up
        _, short, _ = _fits(nxt, profile, free)
        s += f"; `{nxt.mode}` needs {format_bytes(short)} more {where} than you have free"
    else:
        s += "; every mode fits"
    return s + synth


def format_report(profile: Profile, free: "Free | None" = None) -> str:
    """Machine facts, the table, notes and the recommendation: what the CLI prints."""
    lines = [f"Hardware check ({profile.created}): {machine_line(profile)}", "", format_table(profile, free), ""]
    lines += [f"note: {n}" for n in profile.notes]
    where: dict[str, list[str]] = {}  # each distinct note once, with the modes it concerns
    for m in profile.modes.values():
        for n in (*m.notes, *(n for r in m.runs for n in r.notes)):
            if n not in profile.notes and m.mode not in where.setdefault(n, []):
                where[n].append(m.mode)
    lines += [f"note ({', '.join(ms)}): {n}" for n, ms in where.items()]
    lines += ["", "Recommendation: " + recommendation(profile, free)]
    return "\n".join(lines)


# ------------------------------------------------------------------------ CLI


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``python -m gpen_core profile`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "profile",
        help="hardware check: measure each mode's peak memory and speed on this machine",
        description="Run the standard workloads (an aligned face, a 12 MP photo, a group photo) through every "
        "memory mode, print what each needs, and save profile.json in the models folder for `auto`.",
    )
    p.add_argument("--modes", nargs="+", choices=tuple(MODES), metavar="MODE", help=f"modes to measure (default: all; {', '.join(MODES)})")
    p.add_argument("--json", metavar="PATH", help="also write this profile as JSON to PATH")
    p.add_argument("--models-dir", help="models folder (default: $GPEN_HOME or ~/.cache/gpen); profile.json is saved there")
    p.add_argument("--synthetic", action="store_true", help="random weights for every generator even when real ones are present")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--saved", action="store_true", help="print the saved profile instead of measuring (exit 1 if none is valid)")
    p.add_argument("--no-save", action="store_true", help="do not write profile.json")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="measure every mode in this process (starts faster; an out-of-memory mode then kills the check)",
    )
    return p


def _progress_line(stream: Any = sys.stderr) -> Progress:
    t0 = time.perf_counter()
    state = {"last": "", "ended": False}

    def report(f: float, desc: str) -> None:
        if state["ended"]:
            return
        line = f"[{100 * f:5.1f}%] {time.perf_counter() - t0:6.1f}s  {desc}"[:110]
        if line != state["last"]:
            stream.write("\r" + line.ljust(110))
            stream.flush()
            state["last"] = line
        if f >= 1.0 and desc == "done":
            stream.write("\n")
            state["ended"] = True

    return report


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args`` (recorded in the profile and printed under tables)."""
    parts = ["python -m gpen_core profile"]
    if args.modes:
        parts.append("--modes " + " ".join(args.modes))
    if args.synthetic:
        parts.append("--synthetic")
    if args.device:
        parts.append(f"--device {args.device}")
    if args.in_process:
        parts.append("--in-process")
    if args.models_dir:
        parts.append(f"--models-dir {args.models_dir}")
    return " ".join(parts)


def run_cli(args: argparse.Namespace) -> int:
    """Run the ``profile`` subcommand: 0 done, 1 ``--saved`` found nothing valid."""
    if args.saved:
        from .restorer import Restorer

        dev = Restorer(device=args.device).device
        prof = load_profile(dev, args.models_dir)
        if prof is None:
            print(f"no valid saved profile for {_device_key(dev)} in {profile_path(args.models_dir)}: run `python -m gpen_core profile`", file=sys.stderr)
            return 1
    else:
        command = command_line(args)
        prof = run_profile(
            modes=args.modes,
            models_dir=args.models_dir,
            progress=_progress_line(),
            synthetic=True if args.synthetic else None,
            device=args.device,
            isolate=not args.in_process,
            save=not args.no_save,
            command=command,
        )
    print(format_report(prof))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(prof.to_dict(), indent=2), encoding="utf-8")
        print(f"\nwrote {out}", file=sys.stderr)
    if not args.saved and not args.no_save:
        print(f"saved {profile_path(args.models_dir)} (read by `auto`)", file=sys.stderr)
    return 0


__all__ = [
    "Measured",
    "ModeProfile",
    "Profile",
    "WorkloadRun",
    "add_cli",
    "chart_rows",
    "fingerprint",
    "format_report",
    "format_table",
    "load_json",
    "load_profile",
    "measured",
    "measured_peak",
    "recommendation",
    "run_cli",
    "run_profile",
    "save_profile",
]
