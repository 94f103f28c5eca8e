"""The GPEN generator on OpenVINO (convert once, cache, run: :func:`load` needs no torch once cached) and ``auto``'s
measured choice of runtime. Standard library only at module import."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.errors import ResourceError
from gpen_core.options import BACKENDS
from gpen_core.platform import measurements
from gpen_core.platform.cpuinfo import cpu_model
from gpen_core.progress import Progress
from gpen_core.runtimes.openvino.choice import BackendChoice
# Re-exported: callers use ov_backend.* for the base's names too.
from gpen_core.runtimes.openvino.base import (  # noqa: F401
    CacheKey, CompiledNet, Precision, cache_key, cache_root, capabilities, choose_precision, convert_traced, cpu_key,
    drop_mapped_pages, is_cached, openvino_version, save_conversion, unavailable_reason,
)

if TYPE_CHECKING:
    from gpen_core.modes import MemoryMode
    import torch

# The exported graph's revision, in meta.json: an IR of an older revision is converted again, never reused.
GRAPH_REVISION = 3


def convert(checkpoint: str | os.PathLike[str], *, models_dir: str | os.PathLike[str] | None = None,
            progress: Progress | None = None, sha256: str | None = None) -> float:
    """Convert a GPEN checkpoint to OpenVINO IR in the cache (needs torch); its seconds."""
    from gpen_core.networks.checkpoint import load_generator
    from gpen_core.runtimes.openvino.export import exportable

    t0 = time.perf_counter()
    say = progress or (lambda f, m: None)
    path = Path(checkpoint)
    say(0.0, f"OpenVINO: converting {path.name} (first use on this machine; cached afterwards)")
    model = exportable(load_generator(path))
    size = model.config.size
    say(0.1, f"OpenVINO: tracing the {size} px generator")
    ov_model = to_openvino(model, size)
    del model
    meta = {"checkpoint": str(path), "size": size, "graph": GRAPH_REVISION}
    return save_conversion(ov_model, cache_key(path, "f32", sha256), models_dir, meta, t0, say)


def to_openvino(model: torch.nn.Module, size: int) -> Any:
    """``model`` (an :func:`~gpen_core.runtimes.openvino.export.exportable` GPEN) as an ``openvino.Model`` with a
    static 1×3×S×S input."""
    import torch

    return convert_traced(model, torch.zeros(1, 3, size, size))


# RAM a first-use conversion adds to the process, per face size (docs/performance.md, "CPU runtime"; 1024 px:
# docs/tasks.md); other sizes estimated from the file size at the higher ratio measured (256 px: 10.5x the file).
CONVERT_RAM_MEASURED: dict[int, int] = {256: 757 * 2**20, 512: 1656 * 2**20, 1024: 2349 * 2**20}
_CONVERT_RAM_PER_FILE_BYTE = 10.5


def conversion_ram(size: int, checkpoint: Path) -> tuple[int, bool]:
    """(bytes a first-use conversion of ``checkpoint`` needs, whether that figure was measured)."""
    if size in CONVERT_RAM_MEASURED:
        return CONVERT_RAM_MEASURED[size], True
    return int(checkpoint.stat().st_size * _CONVERT_RAM_PER_FILE_BYTE), False


def graph_is_current(key: CacheKey, models_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the cached IR for ``key`` exists and was exported by this :data:`GRAPH_REVISION`."""
    if not is_cached(key, models_dir):
        return False
    try:
        meta = json.loads((key.ir_dir(cache_root(models_dir)) / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("graph") == GRAPH_REVISION


class OVForward(CompiledNet):
    """A compiled GPEN with PreparedForward's call: ``x`` N×3×S×S float in [-1, 1] RGB, a numpy array or a CPU
    tensor; ``y`` float32 of the same kind. One face at a time (batching measured no faster)."""

    def __init__(self, compiled: Any, meta: dict[str, Any], key: CacheKey, *, load_s: float,
                 convert_s: float | None) -> None:
        super().__init__(compiled, meta, key, load_s=load_s, convert_s=convert_s)
        self.size = int(meta["size"])

    def __call__(self, x: Any) -> Any:
        import numpy as np

        s = self.size
        shape = tuple(x.shape)
        if len(shape) != 4 or shape[1] != 3 or shape[2] != s or shape[3] != s:
            raise ValueError(f"expected an N×3×{s}×{s} input for this {s} px GPEN, got {shape}")
        is_torch = not isinstance(x, np.ndarray)
        arr = x.detach().to("cpu").float().numpy() if is_torch else np.asarray(x, dtype=np.float32)
        outs = [self.infer([np.ascontiguousarray(arr[i : i + 1])]) for i in range(shape[0])]
        out = outs[0] if len(outs) == 1 else np.concatenate(outs)
        if is_torch:
            import torch

            return torch.from_numpy(out)
        return out


def load(checkpoint: str | os.PathLike[str], precision: Precision = "f32", *,
         models_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None, sha256: str | None = None,
         threads: int | None = None) -> OVForward:
    """The compiled generator for ``checkpoint``: from the cache (of this :data:`GRAPH_REVISION`), or converted now;
    raises as :meth:`~gpen_core.runtimes.openvino.base.CompiledNet.open` does."""
    path = Path(checkpoint)
    key = cache_key(path, precision, sha256)

    def convert_now() -> float:
        seconds = convert(path, models_dir=models_dir, progress=progress, sha256=key.weights_sha256)
        if progress:
            progress(1.0, "OpenVINO: compiling for this CPU")
        return seconds

    return OVForward.open(key, models_dir, threads, convert_now, graph_is_current)


def cpu_id() -> str:
    """The key this CPU's speed records are kept under: its kind and a hash of its model name."""
    return f"{cpu_key()}-{hashlib.sha256(cpu_model().encode()).hexdigest()[:8]}"


def speed_records(models_dir: str | os.PathLike[str] | None = None) -> dict[str, measurements.SpeedRecord]:
    """This CPU's speed records, keyed by :func:`speed_key`; empty when the store is missing or unreadable."""
    return dict(measurements.read(models_dir).speeds.get(cpu_id(), {}))


def speed_key(network: str, size: int, dtype: str) -> str:
    return f"{size}-{dtype}" if network == "gpen" else f"{network}-{size}-{dtype}"


def record_speed(size: int, dtype: str, torch_s: float, openvino_s: float, *,
                 models_dir: str | os.PathLike[str] | None = None, source: str = "", network: str = "gpen") -> Path:
    """Remember for this CPU both backends' measured seconds per call (read by ``auto``); the store's path.
    ``network``: "gpen", "parsenet", "retinaface-resnet50" … (``size``: its input side)."""
    from dataclasses import replace

    rec = measurements.SpeedRecord(round(float(torch_s), 4), round(float(openvino_s), 4), openvino_version(),
                                   cpu_model(), time.strftime("%Y-%m-%dT%H:%M:%S"), source)
    me, key = cpu_id(), speed_key(network, size, dtype)

    def add(store: measurements.Store) -> measurements.Store:
        return replace(store, speeds={**store.speeds, me: {**store.speeds.get(me, {}), key: rec}})

    return measurements.update(add, models_dir)


def choose_backend(requested: str, size: int, dtype: str, *, models_dir: str | os.PathLike[str] | None = None,
                   device: str = "cpu", network: str = "gpen") -> BackendChoice:
    """torch or OpenVINO for a request, and why: as asked (``openvino`` raises ResourceError where it cannot run), or
    under ``auto`` this CPU's measurement, else the repository's for CPUs of its kind, else torch."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; expected one of {', '.join(BACKENDS)}")
    if requested == "torch":
        return BackendChoice("torch", "asked for")
    if requested == "openvino":
        if not device.startswith("cpu"):
            raise ResourceError(f"the OpenVINO backend runs on the CPU only, and this request runs on {device}; use --backend torch")
        if why := unavailable_reason():
            raise ResourceError(why)
        return BackendChoice("openvino", "asked for")
    if not device.startswith("cpu"):
        return BackendChoice("torch", "GPU: torch")
    if openvino_version() is None:
        return BackendChoice("torch", "OpenVINO is not installed")
    rec = speed_records(models_dir).get(speed_key(network, size, dtype))
    if rec is None or rec.openvino != openvino_version():
        from gpen_core.runtimes.openvino.defaults import default_choice

        assumed = default_choice(speed_key(network, size, dtype))
        if assumed is not None:
            return assumed
        what = f"{size} px {dtype}" if network == "gpen" else f"{network} at {size} px {dtype}"
        return BackendChoice("torch", f"no OpenVINO measurement for {what} on this CPU or CPUs of its kind yet")
    t, o = rec.torch_s, rec.openvino_s
    if o < t:
        return BackendChoice("openvino", f"measured faster here: {o:.2f} s vs torch {t:.2f} s per face")
    return BackendChoice("torch", f"measured faster here: {t:.2f} s vs OpenVINO {o:.2f} s per face")


def choose_mode_backend(mode: MemoryMode, requested: str, size: int, dtype: str, *,
                        models_dir: str | os.PathLike[str] | None = None, device: str = "cpu",
                        network: str = "gpen") -> BackendChoice:
    """:func:`choose_backend` for one of ``mode``'s networks: under ``auto``, a mode without ``auto_openvino`` keeps
    to torch."""
    choice = choose_backend(requested, size, dtype, models_dir=models_dir, device=device, network=network)
    if choice.runtime == "openvino" and requested == "auto" and not mode.auto_openvino:
        return BackendChoice("torch", (f"the {mode.name} mode keeps to PyTorch under auto, although OpenVINO was {choice.reason}; "
                                       "OpenVINO's runtime adds 60-80 MiB resident (measured) and this mode puts memory first; "
                                       "--backend openvino runs it there"))
    return choice
