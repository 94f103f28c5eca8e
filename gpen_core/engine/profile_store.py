"""Where hardware profiles live (one per device in the measurements store) and when they still hold: a saved
figure counts only while its :func:`fingerprint` matches this machine. Never runs the engine."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpen_core.platform import measurements
from gpen_core.platform.cpuinfo import cpu_model
from gpen_core.modes import MODES
from gpen_core.engine.profile_records import Profile, without_medians


def device_key(device: str) -> str:
    """'cpu' or 'cuda:N' ('cuda' means device 0), the key a profile is stored under."""
    if device.startswith("cuda"):
        return device if ":" in device else "cuda:0"
    return "cpu"


@lru_cache(maxsize=8)
def _machine_part(device: str) -> tuple[tuple[str, Any], ...]:
    """The parts of the fingerprint that cannot change while this process runs."""
    import psutil

    from gpen_core import __version__

    gpu = None
    if device.startswith("cuda"):
        from gpen_core.platform.zerogpu import on_zerogpu

        if on_zerogpu():  # CUDA may not be touched outside a spaces.GPU call: the Space's configured GPU
            gpu = os.environ.get("ZEROGPU_CUDA_DEVICE_NAME", "ZeroGPU")
        else:
            try:
                import torch

                gpu = torch.cuda.get_device_name(torch.device(device))  # "cuda" is the current device
            except (AssertionError, RuntimeError):  # torch without CUDA asserts; a broken driver raises
                gpu = "unavailable"  # no CUDA (any more): a CUDA profile cannot match this machine
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:  # torch from a source build has no metadata; the module knows
        torch_version = getattr(sys.modules.get("torch"), "__version__", None)
    return (
        ("cpu_model", cpu_model()),
        ("cores", psutil.cpu_count(logical=True)),
        ("ram_total_mib", int(psutil.virtual_memory().total // 2**20)),
        ("device", device),
        ("gpu_name", gpu),
        ("torch", torch_version),
        ("gpen_core", __version__),
    )


def _weights_present(models_dir: str | os.PathLike[str] | None) -> dict[str, int]:
    """Registry name → file size for every checkpoint present (stat only: no hashing, cheap per request)."""
    from gpen_core.weights import lookup as weights

    present: dict[str, int] = {}
    for name in weights.REGISTRY:
        p = weights.locate(name, models_dir=models_dir)
        if p is not None:
            with contextlib.suppress(OSError):
                present[name] = p.stat().st_size
    return present


def fingerprint(device: str, models_dir: str | os.PathLike[str] | None = None, synthetic: bool = False) -> dict[str, Any]:
    """What a profile is valid for: the machine, the versions, the weights present and whether random ones ran."""
    machine = dict(_machine_part(device_key(device)))
    return {**machine, "weights": _weights_present(models_dir), "synthetic": bool(synthetic)}


def save_profile(profile: Profile, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write ``profile`` into the measurements store under its device, atomically, keeping what an earlier run
    of the same fingerprint and workloads measured and this one did not."""
    key = device_key(profile.device)
    mine = profile.to_dict()
    if isinstance(mine.get("backends"), dict):
        b = mine["backends"]
        mine["backends"] = {**b, "rows": [without_medians(r) for r in b.get("rows") or ()],
                            "networks": [without_medians(r) for r in b.get("networks") or ()]}

    def put(store: measurements.Store) -> measurements.Store:
        old = store.profiles.get(key)
        if isinstance(old, dict) and old.get("fingerprint") == mine["fingerprint"] and old.get("workloads") == mine["workloads"]:
            mine["modes"] = {**old.get("modes", {}), **mine["modes"]}
            mine["modes"] = {m: mine["modes"][m] for m in MODES if m in mine["modes"]}
            _merge_backends(old.get("backends"), mine.get("backends"))
            mine["tasks"] = _merged(old.get("tasks"), mine.get("tasks"), "task", "mode")
        return replace(store, profiles={**store.profiles, key: mine})

    return measurements.update(put, models_dir)


def _merge_backends(old: Any, new: Any) -> None:
    """Keep the earlier backend rows this run did not measure (``--modes``, ``--no-backends``), in ``new``."""
    if not (isinstance(old, dict) and isinstance(new, dict) and (old.get("rows") or old.get("networks"))):
        return
    new["rows"] = _merged(old.get("rows"), new.get("rows"), "size", "dtype")
    new["networks"] = _merged(old.get("networks"), new.get("networks"), "network", "size", "dtype")
    new["uses"] = {**(old.get("uses") or {}), **(new.get("uses") or {})}
    new["speed_file"] = new.get("speed_file") or old.get("speed_file")


def _merged(old: Any, new: Any, *keys: str) -> list[dict[str, Any]]:
    """The ``old`` rows (a list, or None) with those ``new`` measured again replaced, identified by ``keys``."""
    return list({tuple(r[k] for k in keys): r for r in (*(old or ()), *(new or ()))}.values())


def load_profile(device: str, models_dir: str | os.PathLike[str] | None = None, *, any_machine: bool = False) -> Profile | None:
    """The saved profile for ``device`` when its fingerprint matches this machine now (``any_machine``:
    whatever the fingerprint, to show an old result), else None."""
    raw = measurements.read(models_dir).profiles.get(device_key(device))
    if not isinstance(raw, dict):
        return None
    # The same machine but for ``synthetic``: random weights cost what real ones cost (real ones appearing
    # changes ``weights``).
    strip = lambda fp: {k: v for k, v in fp.items() if k != "synthetic"}  # noqa: E731
    if not any_machine and strip(raw.get("fingerprint", {})) != strip(fingerprint(device, models_dir)):
        return None
    try:
        return Profile.from_dict(raw)
    except ValueError:
        return None


def load_json(path: str | os.PathLike[str], device: str | None = None) -> Profile:
    """A profile from a file: a single profile (``profile --json``), a saved measurements store or an older
    ``profile.json`` (the entry for ``device``, or the first). ValueError when it holds none."""
    where = Path(path)
    store = measurements.parse_document(where.read_text(encoding="utf-8"), where)
    profiles = store.profiles
    if not profiles:
        raise ValueError(store.note or f"{path} holds no profile")
    key = device_key(device) if device else next(iter(profiles))
    if key not in profiles:
        raise ValueError(f"{path} has no profile for {key}; it has {', '.join(profiles)}")
    return Profile.from_dict(profiles[key])


@dataclass(frozen=True)
class Measured:
    """What ``auto`` needs from a saved profile for one mode."""

    peak_bytes: int  # above the idle process, binding memory, for photos up to covered_pixels
    covered_pixels: int
    bytes_per_pixel: float | None  # measured growth beyond that; None: use the built-in figure
    source: str


def measured(mode: str, device: str, models_dir: Path | None = None, *, task: str = "enhance",
             profile: Profile | None = None) -> Measured | None:
    """The saved measurement (or ``profile``'s) of ``mode`` on ``device``, for GPEN's ``task``, when valid for this
    machine and the engine ran this mode (one that failed for memory keeps what was free then: a lower bound)."""
    prof = profile if profile is not None else load_profile(device, models_dir)
    if prof is None:
        return None
    if task == "enhance":
        m = prof.modes.get(mode)
        if m is None or m.stepped_down_to is not None:
            return None
        src = f"measured on this machine ({prof.created}{', synthetic weights' if prof.synthetic else ''})"
        return Measured(m.peak_bytes, m.covered_pixels, m.bytes_per_pixel, src)
    row = next((t for t in prof.tasks if t.task == task and t.mode == mode), None)
    if row is None or row.refused is not None or (row.failed is None and row.ran_mode != mode):
        return None
    src = (f"measured on this machine for the {task} task ({prof.created}"
           f"{', synthetic weights' if row.weights == 'synthetic' else ''})")
    return Measured(row.peak_bytes, row.covered_pixels, None, src)
