"""The hardware check's records (a workload run, a mode, the whole profile), JSON in and out. Without weights the
exact architectures run random ones: the same memory and time, no restoration, and every row says so."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpen_core.platform.meter import format_bytes
from gpen_core.modes import MemoryMode, get_mode

SYNTHETIC_NOTE = "synthetic weights: memory and speed only; no restoration"
DETECTOR_SYNTHETIC_NOTE = (
    "no detector weights: the detector ran with random weights for its memory and time, "
    "and fixed face boxes (GPEN's template landmarks) stood in for its detections"
)
GIVEN_BOXES_NOTE = "no detector: fixed face boxes (GPEN's template landmarks), detection not measured"


@dataclass(frozen=True)
class WorkloadRun:
    """One workload through one mode. Bytes above the idle process; VRAM None without CUDA."""

    workload: str  # Workload.name
    faces: int  # faces the engine restored
    processed_size: tuple[int, int]  # width, height after the mode's pre-shrink
    peak_ram_bytes: int  # peak RSS during the call minus the idle process's RSS (Profile.idle_rss_bytes)
    peak_vram_bytes: int | None  # torch max_memory_allocated minus idle allocated
    peak_vram_reserved_bytes: int | None  # torch max_memory_reserved minus idle reserved
    ram_method: str  # "vmhwm" (exact) or "sampling" (see gpen_core.platform.meter)
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
        return _from_json(cls, {**m, "runs": [_from_json(WorkloadRun, r) for r in m["runs"]]})


def median_s(times: Sequence[float]) -> float | None:
    """The median of timed calls as a row keeps it (4 decimals); None without calls."""
    import statistics

    return round(statistics.median(times), 4) if times else None


def without_medians(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a BackendSpeed's or NetworkSpeed's dict) less the medians its runs give exactly."""
    out = dict(row)
    for side in ("torch", "openvino"):
        if out.get(f"{side}_s") is not None and median_s(out.get(f"{side}_times") or ()) == out[f"{side}_s"]:
            del out[f"{side}_s"]
    return out


@dataclass(frozen=True, kw_only=True)
class _Pair:
    """A torch against OpenVINO row: the timed calls and what came of them."""

    torch_s: float | None = None  # median seconds per face (the generator) or per call; None when the row failed
    openvino_s: float | None = None
    torch_times: tuple[float, ...] = ()
    openvino_times: tuple[float, ...] = ()
    precision: str = ""  # OpenVINO's inference precision ("f32" / "bf16"); "" when not said
    convert_s: float | None = None  # first-use conversion to OpenVINO IR (None: it came from the cache)
    recorded: bool = False  # written to the speed file `auto` reads
    note: str | None = None  # a precision change, why not recorded or not measured, or the error
    error: str | None = None

    @property
    def faster(self) -> str | None:
        """"openvino" or "torch" by the medians; None when either is missing."""
        if self.torch_s is None or self.openvino_s is None:
            return None
        return "openvino" if self.openvino_s < self.torch_s else "torch"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """A stored row, its lists as tuples and the medians :func:`without_medians` left out put back."""
        medians = {f"{side}_s": d.get(f"{side}_s", median_s(d.get(f"{side}_times") or ()))
                   for side in ("torch", "openvino")}
        return _from_json(cls, {**d, **medians})


@dataclass(frozen=True)
class BackendSpeed(_Pair):
    """torch against OpenVINO for one (face size, dtype) the CPU modes use: seconds per face."""

    size: int  # face size of the generator
    dtype: str  # the torch compute dtype the modes run ("float32", "bfloat16")
    modes: tuple[str, ...]  # the measured modes that run this generator in this dtype
    model: str  # registry name of the generator
    weights: str  # "real", "synthetic" (random weights, released architecture) or "override"
    runs: int  # timed calls per backend (after one untimed warm-up each), interleaved
    measured_at: str  # local time, ISO 8601
    load_s: float | None = None  # OpenVINO reading + compiling (or importing its cached blob)
    threads: int | None = None  # torch threads during the calls (OpenVINO: its own default, as the engine)


@dataclass(frozen=True)
class NetworkSpeed(_Pair):
    """torch against OpenVINO for another network ``auto`` picks a backend for: seconds per call (ParseNet: one
    face's mask at its input size; RetinaFace: one detection on a photo whose longest side is ``size``)."""

    network: str  # the speed file's network: "parsenet", "retinaface-resnet50", "retinaface-mobilenet0.25"
    size: int  # input size in px (the detector: the photo's longest side)
    dtype: str  # the torch compute dtype ("float32", "bfloat16")
    weights: str  # "real" or "synthetic" (random weights, released network: same time)
    runs: int  # timed calls per backend (after one untimed warm-up each), interleaved


@dataclass(frozen=True)
class BackendCheck:
    """The CPU backend comparison of one hardware check (gpen_core.hwcheck.backends)."""

    skipped: str | None  # why it did not run: --no-backends, no OpenVINO, a GPU check, a failure
    rows: tuple[BackendSpeed, ...] = ()
    uses: dict[str, tuple[int, str]] = field(default_factory=dict)  # mode → (face size, dtype) on this CPU
    openvino: str | None = None  # OpenVINO's version (package metadata)
    speed_file: str | None = None  # where the measurements were recorded for `auto`
    # The parser's and detectors' rows (seconds per call, not per face); absent in profiles saved before them.
    networks: tuple[NetworkSpeed, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BackendCheck":
        return cls(**{**d, "rows": tuple(BackendSpeed.from_dict(r) for r in d.get("rows", ())),
                      "networks": tuple(NetworkSpeed.from_dict(r) for r in d.get("networks", ())),
                      "uses": {k: (int(v[0]), str(v[1])) for k, v in d.get("uses", {}).items()}})


@dataclass(frozen=True)
class TaskRow:
    """One of GPEN's other tasks in one mode: its workload's peaks and time, measured like a mode (a fresh
    process, a first request). A mode without a plan for the task is not run: ``refused`` holds the answer."""

    task: str  # gpen_core.modes.TASKS key
    mode: str
    model: str  # the task's generator (registry name)
    workload: str  # the workload's label
    weights: str  # "real" or "synthetic"
    dtype: str = ""  # compute dtype that ran
    backend: str = ""  # generator runtime that ran ("torch" / "openvino")
    peak_ram_bytes: int = 0  # above the idle process
    peak_vram_bytes: int | None = None
    peak_vram_reserved_bytes: int | None = None
    peak_bytes: int = 0  # on the binding memory (reserved VRAM on CUDA, RAM on CPU), as ModeProfile's
    covered_pixels: int = 0  # the processed photo's pixels: the peak covers photos up to this
    seconds_per_face: float | None = None  # the network's time per face (model loaded)
    total_s: float = 0.0  # the whole request, loading included
    load_s: float = 0.0
    ran_mode: str = ""  # the mode the engine ran (differs when it stepped down: then not this mode's figure)
    refused: str | None = None  # the engine's answer when the mode has no plan for the task
    failed: str | None = None  # out of memory / killed: peak_bytes is then what was free, a lower bound
    notes: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether the row is a measurement of this (task, mode) that ``auto`` can use."""
        return self.refused is None and self.failed is None and self.ran_mode == self.mode

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskRow":
        return _from_json(cls, d)


@dataclass(frozen=True)
class Profile:
    """The whole hardware check: machine facts, the fingerprint it is valid for, one row per mode."""

    created: str  # local time, ISO 8601
    device: str  # "cpu" or "cuda:0"
    synthetic: bool  # any mode ran random weights
    fingerprint: dict[str, Any]
    machine: dict[str, Any]  # CPU model and flags, cores, RAM, GPU, versions (gpen_core.hwcheck.info)
    free_at_start: dict[str, int | None]  # {"ram_bytes", "vram_bytes"} when the check began
    # Each mode ran in a fresh process (the default): its peak is what a first request costs,
    # free of what earlier modes left in the allocator. False: all in this process.
    isolated: bool
    workloads: tuple[dict[str, Any], ...]  # the hardware check's workload definitions, as run
    modes: dict[str, ModeProfile]
    notes: tuple[str, ...] = ()
    command: str = ""  # what produced it (the CLI fills this in)
    backends: BackendCheck | None = None  # torch vs OpenVINO on the CPU (None: not part of this check)
    tasks: tuple[TaskRow, ...] = ()  # GPEN's other tasks per mode (absent in profiles saved before them)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        """Inverse of :meth:`to_dict`; ValueError when a field is missing or unknown."""
        try:
            modes = {k: ModeProfile.from_dict(m) for k, m in d["modes"].items()}
            return _from_json(cls, {**d, "modes": modes,
                                    "backends": BackendCheck.from_dict(d["backends"]) if d.get("backends") else None,
                                    "tasks": [TaskRow.from_dict(t) for t in d.get("tasks") or ()]})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a hardware profile: {exc}") from exc


def jsonable(x: Any) -> Any:
    """``x`` as JSON gives it back: tuples as lists, keys and paths as strings; TypeError for anything else JSON
    cannot hold (never saved as its string)."""
    def path(o: Any) -> str:
        if isinstance(o, Path):
            return str(o)
        raise TypeError(f"{type(o).__name__} is not JSON: {o!r}")

    return json.loads(json.dumps(x, default=path))


def _from_json(cls: Any, d: dict[str, Any]) -> Any:
    """A record of ``cls`` from its stored dict, JSON's lists back as tuples."""
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def slope(runs: Sequence[WorkloadRun], device: str) -> float | None:
    """Bytes per processed pixel between the smallest and the largest photo workload, when it grows."""
    photos = [r for r in runs if r.detector != "none" and r.faces > 0]
    if len(photos) < 2:
        return None
    lo = min(photos, key=lambda r: r.processed_pixels)
    hi = max(photos, key=lambda r: r.processed_pixels)
    dp = hi.processed_pixels - lo.processed_pixels
    if dp < 1_000_000:  # too close in size for the difference to mean anything
        return None
    read = {(r.peak_vram_reserved_bytes is None, r.peak_vram_bytes is None) for r in (lo, hi)}
    if device.startswith("cuda") and len(read) > 1:  # one run's VRAM not read: its peak is on another memory
        return None
    a, b = (binding_peak(device, r.peak_ram_bytes, r.peak_vram_bytes, r.peak_vram_reserved_bytes) for r in (lo, hi))
    s = (b - a) / dp
    # More faces in the smaller photo can outweigh its fewer pixels: no growth measured then.
    return round(s, 2) if s > 0 else None


def failed_mode(spec: dict[str, Any], why: str, free_binding: int | None) -> ModeProfile:
    mode = get_mode(spec["mode"])
    lower = int(free_binding or 0)
    return ModeProfile(
        mode=mode.name, model=mode.model, weights=spec["kind"], dtype="", detector="", peak_ram_bytes=lower,
        peak_vram_bytes=None, peak_vram_reserved_bytes=None, peak_bytes=lower, covered_pixels=0, bytes_per_pixel=None,
        seconds_per_face=None, total_s=0.0, load_s=0.0, idle_rss_bytes=0, idle_vram_bytes=None, stepped_down_to=None,
        failed=why, runs=(),
        notes=(*spec["notes"], f"{mode.name} could not be measured ({why}): it needs more than the "
                               f"{format_bytes(lower)} that was free"),
    )


def binding_peak(device: str, ram: int, vram: int | None, vram_reserved: int | None) -> int:
    """A measured peak on the memory that limits what fits on ``device``: on CUDA the reserved VRAM (what another
    process cannot have; allocated where reserved was not read), RAM on the CPU or where no VRAM was read."""
    vram_peak = vram_reserved if vram_reserved is not None else vram
    return int(vram_peak if device.startswith("cuda") and vram_peak is not None else ram)


def summarise(mode: MemoryMode, runs: list[WorkloadRun], device: str, kind: str, dtype: str,
              idle: tuple[int, int | None], notes: list[str]) -> ModeProfile:
    """One mode's profile from its workload runs, above ``idle``: the process's (RSS, allocated VRAM) before them."""
    idle_rss, idle_vram = idle
    ram = max(r.peak_ram_bytes for r in runs)
    vram = max((r.peak_vram_bytes for r in runs if r.peak_vram_bytes is not None), default=None)
    vres = max((r.peak_vram_reserved_bytes for r in runs if r.peak_vram_reserved_bytes is not None), default=None)
    stepped = next((r.ran_mode for r in runs if r.ran_mode != mode.name), None)  # its runs' notes say so
    photos = [r for r in runs if r.detector != "none"]
    steady = [r for r in runs if r.faces > 1] or [r for r in runs if r.faces]
    spf = max(steady, key=lambda r: r.faces).seconds_per_face if steady else None
    detectors = {r.detector for r in photos}
    if any("synthetic weights" in d for d in detectors):
        notes.append(DETECTOR_SYNTHETIC_NOTE)
    elif "given boxes" in detectors:
        notes.append(GIVEN_BOXES_NOTE)
    return ModeProfile(
        mode=mode.name, model=mode.model, weights=kind, dtype=dtype,
        detector=", ".join(sorted(detectors)) if detectors else "none", peak_ram_bytes=ram, peak_vram_bytes=vram,
        peak_vram_reserved_bytes=vres, peak_bytes=binding_peak(device, ram, vram, vres),
        covered_pixels=max(r.processed_pixels for r in runs), bytes_per_pixel=slope(runs, device), seconds_per_face=spf,
        total_s=round(sum(r.total_s for r in runs), 3), load_s=round(sum(r.load_s for r in runs), 3),
        idle_rss_bytes=idle_rss, idle_vram_bytes=idle_vram, stepped_down_to=stepped, failed=None, runs=tuple(runs),
        notes=tuple(dict.fromkeys(notes)),
    )
