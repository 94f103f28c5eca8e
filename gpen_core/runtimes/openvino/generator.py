"""OpenVINO backend for the GPEN generator on the CPU: convert once, cache, run.

What it does:

- :func:`convert` turns a GPEN checkpoint into OpenVINO IR with
  ``openvino.convert_model`` from our own :class:`~gpen_core.networks.arch.GPEN` module, after
  export-only changes (:func:`exportable`): static shapes, plain batch-1 convolutions,
  constant (pre-packed) weights for the low-resolution modulated convs, demodulation as
  a mat-vec, no noise concatenation before stride-1 convs, the full-size level in strips of
  rows (one strip's buffers live at a time). Same function; tests hold the
  float32 result to 1e-4 of the official references. An IR from an older export
  (:data:`GRAPH_REVISION` in its meta.json) is converted again.
- The IR and OpenVINO's compiled blob live in the models folder,
  ``<models>/openvino/<checkpoint stem>-<sha256[:16]>/ov<version>/`` (IR, float32
  weights) and ``.../compiled-<precision>-<cpu key>/`` (the compiled model for this
  precision and these CPU features), so a new OpenVINO release, another precision
  or another CPU never reuses a stale blob.
- :func:`load` returns an :class:`OVForward`: the same call contract as
  :class:`gpen_core.networks.prepared.PreparedForward` (N×3×S×S float in [-1, 1] → float32), for
  numpy arrays or torch tensors. Loading from the cache imports neither torch nor
  the checkpoint; only a first-use conversion needs torch, and it reports its
  progress and its time.

Precision: ``"f32"`` everywhere; ``"bf16"`` only where OpenVINO's CPU plugin lists
BF16 among its optimisation capabilities (AVX-512 BF16 / AMX). Elsewhere the CPU
plugin would silently run float32, so :func:`choose_precision` says so instead.

Nothing is imported at module import beyond the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpen_core.errors import GPENError, ResourceError
from gpen_core.platform.measurements import SpeedRecord
from gpen_core.progress import Progress
from gpen_core.runtimes.openvino.choice import BackendChoice
from gpen_core.runtimes.openvino.export import GRAPH_REVISION, exportable  # noqa: F401  (exportable re-exported)
from gpen_core.runtimes.openvino.base import (CONVERSION_LOCK, compile_cached,   # noqa: F401  (re-exported: callers use ov_backend.*)
    INSTALL_HINT,
    CacheKey,
    Precision,
    sha256_file,
    cache_key,
    cache_root,
    capabilities,
    choose_precision,
    compile_entry,
    require_writable,
    cpu_flags,
    cpu_key,
    drop_mapped_pages,
    first_use_fallback,
    get_core,
    save_ir,
    is_cached,
    openvino_version,
    unavailable_reason,
)

if TYPE_CHECKING:
    from gpen_core.modes import MemoryMode
    import numpy as np
    import torch

Backend = Literal["auto", "torch", "openvino"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "openvino")

# --------------------------------------------------------------------------- export


def convert(
    checkpoint: str | os.PathLike[str],
    *,
    models_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    sha256: str | None = None,
) -> tuple[Path, float]:
    """Convert a GPEN checkpoint to OpenVINO IR in the cache; returns (model.xml, seconds).

    Needs torch (it traces our module). The IR is written to a temporary folder and
    renamed into place, so a crash never leaves half a model in the cache.
    ``progress(fraction, message)`` is called at each stage.
    """
    import torch

    from gpen_core.networks.checkpoint import load_generator

    t0 = time.perf_counter()
    say = progress or (lambda f, m: None)
    path = Path(checkpoint)
    key = cache_key(path, "f32", sha256)
    require_writable(cache_root(models_dir))  # before minutes of tracing, not after
    final = key.ir_dir(cache_root(models_dir))
    say(0.0, f"OpenVINO: converting {path.name} (first use on this machine; cached afterwards)")
    model = exportable(load_generator(path))
    size = model.config.size
    say(0.1, f"OpenVINO: tracing the {size} px generator")
    ov_model = to_openvino(model, size)
    del model
    say(0.8, "OpenVINO: saving the converted model")
    meta = {"checkpoint": str(path), "weights_sha256": key.weights_sha256, "size": size, "openvino": key.openvino,
            "torch": torch.__version__, "graph": GRAPH_REVISION}
    seconds = save_ir(ov_model, final, meta, t0)
    say(1.0, f"OpenVINO: converted in {seconds:.1f} s")
    return final / "model.xml", seconds


def to_openvino(model: torch.nn.Module, size: int) -> Any:
    """``model`` (an :func:`exportable` GPEN) as an ``openvino.Model`` with a static 1×3×S×S input.

    Traced once, without torch's trace check, then converted (:func:`~gpen_core.runtimes.openvino.base.convert_traced`,
    which every network's conversion uses; measured at 512 px: the check costs ~4x the conversion's
    CPU time). Between the trace and the conversion the freed activations go back to the OS
    (``malloc_trim``): the strips' tensors (under glibc's raised mmap threshold) are served from the
    heap, which the tracer's small allocations would otherwise pin under the conversion's own peak
    (docs/performance.md, "OpenVINO: the full-size level in strips").
    """
    import torch

    from gpen_core.runtimes.openvino.base import convert_traced

    return convert_traced(model, torch.zeros(1, 3, size, size), (1, 3, size, size))


# RAM a first-use conversion adds to the process (peak RSS above the process before it), per
# face size: measured 2026-12-03 on the AMX Xeon with random weights of the released checkpoints
# (peak RSS around `load()` of an uncached checkpoint, in a fresh process); 1024 px (GPEN's
# colorization / inpainting architecture) measured 2026-12-04 the same way on the AMD EPYC Zen 4
# (`python benchmarks/ov_1024.py`, now `bench_forward.py --sizes 1024`: peak RSS 2349 MiB, 112 s on 2 shared cores). Other sizes:
# estimated from the file size at the 256 px ratio (the higher one measured: 10.5x the file).
CONVERT_RAM_MEASURED: dict[int, int] = {256: 757 * 2**20, 512: 1656 * 2**20, 1024: 2349 * 2**20}
_CONVERT_RAM_PER_FILE_BYTE = 10.5


def conversion_ram(size: int, checkpoint: Path) -> tuple[int, bool]:
    """(bytes a first-use conversion of ``checkpoint`` needs, whether that figure was measured)."""
    if size in CONVERT_RAM_MEASURED:
        return CONVERT_RAM_MEASURED[size], True
    return int(checkpoint.stat().st_size * _CONVERT_RAM_PER_FILE_BYTE), False


def conversion_fallback(
    requested: str, backend: str, checkpoint: Path, size: int, precision: Precision, free_ram: int,
    models_dir: str | os.PathLike[str] | None = None,
) -> str | None:
    """Why ``auto`` should run torch this time instead of OpenVINO, or None.

    Only for ``auto`` (an explicit ``openvino`` is taken as asked): when this checkpoint is not
    converted yet and the conversion needs more RAM than is free, the request runs on torch
    and the sentence says so; a later request with more memory free converts it.
    """
    if requested != "auto" or backend != "openvino" or str(checkpoint).startswith("synthetic:"):
        return None
    need, measured = conversion_ram(size, checkpoint)
    cached = graph_is_current(cache_key(checkpoint, precision), models_dir)
    return first_use_fallback(requested, backend, cached, need, free_ram, checkpoint.name, estimated=not measured)


def graph_is_current(key: CacheKey, models_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the cached IR for ``key`` exists and was exported by this :data:`GRAPH_REVISION`.

    An older one computes the same function more slowly; :func:`load` converts it again.
    """
    if not is_cached(key, models_dir):
        return False
    try:
        meta = json.loads((key.ir_dir(cache_root(models_dir)) / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("graph") == GRAPH_REVISION


# --------------------------------------------------------------------------- running


class OVForward:
    """A compiled GPEN: ``forward(x) -> y`` like :class:`gpen_core.networks.prepared.PreparedForward`.

    ``x``: N×3×S×S float in [-1, 1] RGB, a numpy array or a CPU torch tensor; ``y``:
    float32 of the same kind. A batch runs one face at a time (the IR has batch 1;
    batching measured no faster). Calls are serialised (one infer request).

    Memory: after each face the compiled model's intermediate buffers are handed back
    (``release_memory`` and ``malloc_trim``). The CPU plugin otherwise keeps them for the
    next call: ~440 MiB for the 512 px generator in float32, resident for the rest of the
    process and under every later stage's peak (the parser's, the PNG encoder's). The next
    face allocates them again: ~0.2 s of CPU per face (page faults; measured at 1 thread on
    a contended 2-core Xeon, a 2.5-2.7 s forward), what torch pays for its activations too.
    """

    def __init__(
        self,
        compiled: Any,
        size: int,
        precision: Precision,
        key: CacheKey,
        *,
        load_s: float,
        convert_s: float | None,
        dropped_bytes: int = 0,
    ) -> None:
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._lock = threading.Lock()
        self.size, self.precision, self.key = size, precision, key
        self.load_s = load_s  # reading + compiling (or importing the cached blob)
        self.convert_s = convert_s  # None when the IR came from the cache
        self.dropped_bytes = dropped_bytes  # mapped weight-file bytes taken out of RSS after compiling (see load)
        self.backend = "openvino"

    @property
    def dtype_name(self) -> str:
        return "bfloat16" if self.precision == "bf16" else "float32"

    def describe(self) -> str:
        """One line for notes and logs."""
        how = f"converted on first use in {self.convert_s:.1f} s" if self.convert_s is not None else "from the cache"
        return f"OpenVINO {self.key.openvino} {self.precision} ({how}, loaded in {self.load_s:.1f} s)"

    def __call__(self, x: Any) -> Any:
        import numpy as np

        s = self.size
        shape = tuple(x.shape)
        if len(shape) != 4 or shape[1] != 3 or shape[2] != s or shape[3] != s:
            raise ValueError(f"expected an N×3×{s}×{s} input for this {s} px GPEN, got {shape}")
        is_torch = not isinstance(x, np.ndarray)
        arr = x.detach().to("cpu").float().numpy() if is_torch else np.asarray(x, dtype=np.float32)
        outs = [self.one(arr[i : i + 1]) for i in range(shape[0])]
        out = outs[0] if len(outs) == 1 else np.concatenate(outs)
        if is_torch:
            import torch

            return torch.from_numpy(out)
        return out

    def one(self, x: np.ndarray) -> np.ndarray:
        """One face: 1×3×S×S float32 → a new 1×3×S×S float32 array; the intermediate buffers are released."""
        import numpy as np

        from gpen_core.platform.oom import malloc_trim

        with self._lock:
            self._request.infer([np.ascontiguousarray(x, dtype=np.float32)])
            out = self._request.get_output_tensor(0).data.copy()  # the request reuses its buffer
            self._compiled.release_memory()  # see the class doc: ~440 MiB not kept between faces
        malloc_trim()  # the plugin's smaller buffers come back from glibc's heap too (~120 MiB measured)
        return out


def load(
    checkpoint: str | os.PathLike[str],
    precision: Precision = "f32",
    *,
    models_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    sha256: str | None = None,
    threads: int | None = None,
) -> OVForward:
    """The compiled generator for ``checkpoint``: from the cache, or converted now (progress reported).

    ``threads``: OpenVINO inference threads (default: OpenVINO's choice, the physical
    cores). Raises :class:`ResourceError` when OpenVINO cannot run here and
    :class:`GPENError` when ``precision`` is not supported by this CPU.
    """
    why = unavailable_reason()
    if why:
        raise ResourceError(why)
    if precision not in ("f32", "bf16"):
        raise ValueError(f"precision must be 'f32' or 'bf16', got {precision!r}")
    if precision == "bf16" and "BF16" not in capabilities():
        raise GPENError(
            "OpenVINO bf16 needs a CPU with AVX-512 BF16 or AMX; this one has neither. Use precision 'f32' "
            "(choose_precision picks it for you)."
        )
    path = Path(checkpoint)
    key = cache_key(path, precision, sha256)
    root = cache_root(models_dir)
    convert_s = None
    if not graph_is_current(key, models_dir):  # missing, or exported by an older revision
        with CONVERSION_LOCK:
            if not graph_is_current(key, models_dir):  # another thread may have converted it meanwhile
                _, convert_s = convert(path, models_dir=models_dir, progress=progress, sha256=key.weights_sha256)
    ir = key.ir_dir(root)
    meta = json.loads((ir / "meta.json").read_text())
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if progress and convert_s is not None:
        progress(1.0, "OpenVINO: compiling for this CPU")
    t = time.perf_counter()
    compiled = compile_entry(ir, key.compiled_dir(root), config)
    load_s = time.perf_counter() - t
    dropped = drop_mapped_pages(ir)
    return OVForward(compiled, int(meta["size"]), precision, key, load_s=load_s, convert_s=convert_s, dropped_bytes=dropped)


# --------------------------------------------------------------------------- auto: the measured choice


def cpu_id() -> str:
    """The key this CPU's speed records are kept under: its kind and a hash of its model name."""
    return f"{cpu_key()}-{hashlib.sha256(_cpu_model().encode()).hexdigest()[:8]}"


def speed_file(models_dir: str | os.PathLike[str] | None = None) -> Path:
    """The file the speed records live in: the models folder's measurements store (:mod:`gpen_core.platform.measurements`)."""
    from gpen_core.platform import measurements

    return measurements.path(models_dir)


def speed_records(models_dir: str | os.PathLike[str] | None = None) -> dict[str, SpeedRecord]:
    """This CPU's speed records (:func:`record_speed`), keyed by :func:`speed_key`.

    Empty when the store is missing, unreadable or of another version: a damaged record then
    means no measurement (``auto`` falls back to the defaults), and the next :func:`record_speed`
    writes the store whole again."""
    from gpen_core.platform import measurements

    return dict(measurements.read(models_dir).speeds.get(cpu_id(), {}))


def _cpu_model() -> str:
    from gpen_core.platform.cpuinfo import cpu_model

    return cpu_model()


def speed_key(network: str, size: int, dtype: str) -> str:
    return f"{size}-{dtype}" if network == "gpen" else f"{network}-{size}-{dtype}"


def record_speed(
    size: int,
    dtype: str,
    torch_s: float,
    openvino_s: float,
    *,
    models_dir: str | os.PathLike[str] | None = None,
    source: str = "",
    network: str = "gpen",
) -> Path:
    """Remember, for this CPU, the measured seconds per face of both backends (read by ``auto``); the store's path.

    ``network``: "gpen" (the generator; ``size`` is its face size) or another network the
    pipeline can run on either backend (e.g. "parsenet", "retinaface-resnet50"; ``size`` is
    its input size), each recorded under its own key.

    Written by the hardware check (:mod:`gpen_core.hwcheck.backends`, ``python -m gpen_core
    profile``) and by ``benchmarks/bench_forward.py --record``; ``source`` says which, and
    with what weights.
    """
    from dataclasses import replace

    from gpen_core.platform import measurements

    rec = SpeedRecord(round(float(torch_s), 4), round(float(openvino_s), 4), openvino_version(), _cpu_model(),
                      time.strftime("%Y-%m-%dT%H:%M:%S"), source)
    me, key = cpu_id(), speed_key(network, size, dtype)

    def add(store: measurements.Store) -> measurements.Store:
        return replace(store, speeds={**store.speeds, me: {**store.speeds.get(me, {}), key: rec}})

    return measurements.update(add, models_dir)


def choose_backend(
    requested: str,
    size: int,
    dtype: str,
    *,
    models_dir: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    network: str = "gpen",
) -> BackendChoice:
    """torch or OpenVINO for a request, and why.

    ``torch`` and ``openvino`` are taken as asked (``openvino`` raises
    :class:`ResourceError` where it cannot run: on a GPU device, or not installed).
    ``auto`` follows a measurement on this CPU model (see :func:`record_speed`;
    ``benchmarks/bench_forward.py --record`` and the hardware check write it) for this
    size and dtype; without one, the measurement recorded in the repository for CPUs of
    this kind (:mod:`gpen_core.runtimes.openvino.defaults`), and the caveat says so;
    with neither, torch.
    """
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; expected one of {', '.join(BACKENDS)}")
    if requested == "torch":
        return BackendChoice("torch", "asked for")
    if requested == "openvino":
        if not device.startswith("cpu"):
            raise ResourceError(f"the OpenVINO backend runs on the CPU only, and this request runs on {device}; use --backend torch")
        why = unavailable_reason()
        if why:
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


def choose_mode_backend(
    mode: MemoryMode,
    requested: str,
    size: int,
    dtype: str,
    *,
    models_dir: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    network: str = "gpen",
) -> BackendChoice:
    """:func:`choose_backend` for one of ``mode``'s networks: under ``auto``, a mode without
    :attr:`~gpen_core.modes.MemoryMode.auto_openvino` keeps every network on torch (an explicit
    ``openvino`` still runs there)."""
    choice = choose_backend(requested, size, dtype, models_dir=models_dir, device=device, network=network)
    if choice.runtime == "openvino" and requested == "auto" and not mode.auto_openvino:
        return BackendChoice("torch", (f"the {mode.name} mode keeps to PyTorch under auto, although OpenVINO was {choice.reason}; "
                                       "OpenVINO's runtime adds 60-80 MiB resident (measured) and this mode puts memory first; "
                                       "--backend openvino runs it there"))
    return choice
