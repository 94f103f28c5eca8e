"""What every network run on OpenVINO shares: availability, the one Core, precision, and the cache keyed by
weights, release, precision and CPU. ``openvino`` is imported where used, never at module import."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Self

from gpen_core.errors import GPENError, ResourceError
from gpen_core.platform import durable
from gpen_core.platform.cpuinfo import cpu_flags
from gpen_core.platform.leftovers import pid_alive
from gpen_core.platform.oom import is_oom, malloc_trim
from gpen_core.progress import Progress

Precision = Literal["f32", "bf16"]

# CPU flags that change what the CPU plugin compiles (its ISA dispatch).
_KEY_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_fp16")
# How to install OpenVINO, for the messages that say it is missing (this module, parser).
INSTALL_HINT = "pip install openvino (or `bash scripts/setup.sh`, which installs requirements.txt)"
_core_lock = threading.Lock()
_core: Any = None
# One conversion at a time in this process: two torch.jit.trace at once in two threads fail ("Graphs differed
# across invocations"; a request and the app's background preparation did). Whoever holds it checks the cache
# again (load_compiled), so the second of two threads loads the first one's conversion.
CONVERSION_LOCK = threading.RLock()


def convert_traced(module: Any, example: Any, shape: Any = None) -> Any:
    """``module`` (torch, eval) as an ``openvino.Model`` for inputs of ``shape`` (a PartialShape; default the
    example's, static). No trace check: it triples the conversion (docs/performance.md, "OpenVINO: the full-size
    level in strips")."""
    import openvino as ov
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings about Python ints: intended (static shapes)
        traced = torch.jit.trace(module, example, check_trace=False)
        gc.collect()
        malloc_trim()
        shape = tuple(example.shape) if shape is None else shape
        return ov.convert_model(traced, example_input=example, input=[shape])


def openvino_version() -> str | None:
    """The installed OpenVINO's version from package metadata (no import), or None."""
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """None when the backend can run here; else a sentence saying why not and how to fix it."""
    if openvino_version() is None:
        return f"OpenVINO is not installed; {INSTALL_HINT}"
    try:
        get_core()
    except Exception as exc:  # a broken install or a CPU the plugin refuses
        return f"OpenVINO is installed but its CPU plugin does not start ({exc.__class__.__name__}: {exc})"
    return None


def get_core() -> Any:
    """One ``openvino.Core`` per process (it owns the plugins and their thread pools)."""
    global _core
    with _core_lock:
        if _core is None:
            import openvino as ov

            _core = ov.Core()
        return _core


def cpu_key() -> str:
    """Short, stable name of what the CPU plugin compiles for: e.g. ``avx2`` or ``avx2-avx512f-amx_bf16``."""
    flags = cpu_flags()
    return "-".join(f for f in _KEY_FLAGS if f in flags) or "generic"


def capabilities() -> tuple[str, ...]:
    """OpenVINO CPU plugin's optimisation capabilities (e.g. FP32, BF16, INT8)."""
    return tuple(get_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def check_precision(precision: str) -> None:
    """ValueError for a precision other than ``f32``/``bf16``; GPENError for ``bf16`` on a CPU without it."""
    if precision not in ("f32", "bf16"):
        raise ValueError(f"precision must be 'f32' or 'bf16', got {precision!r}")
    if precision == "bf16" and "BF16" not in capabilities():
        raise GPENError("OpenVINO bf16 needs a CPU with AVX-512 BF16 or AMX; this one has neither. Use precision 'f32' "
                        "(choose_precision picks it for you).")


def choose_precision(requested_dtype: str) -> tuple[Precision, str | None]:
    """The OpenVINO precision for a torch dtype name, and a note when it differs: ``float32`` → ``f32``;
    ``bfloat16`` / ``float16`` / ``auto`` → ``bf16`` where the CPU plugin has BF16, else ``f32``."""
    if requested_dtype == "float32":
        return "f32", None
    if requested_dtype not in ("bfloat16", "float16", "auto"):
        raise ValueError(f"unknown dtype {requested_dtype!r}; expected float32, bfloat16, float16 or auto")
    if "BF16" in capabilities():
        return "bf16", (None if requested_dtype in ("bfloat16", "auto") else "OpenVINO on the CPU runs bfloat16, not float16")
    if requested_dtype == "auto":
        return "f32", None
    return "f32", f"this CPU has no native bfloat16 for OpenVINO (no AVX-512 BF16 / AMX); OpenVINO ran float32 instead of {requested_dtype}"


@dataclass(frozen=True)
class CacheKey:
    """Everything a cached model depends on."""

    weights_sha256: str  # the checkpoint's content
    openvino: str  # OpenVINO's version: IR and blobs are only reused by the same release
    precision: Precision  # inference precision the blob was compiled for
    cpu: str  # see cpu_key(): the ISA the blob was compiled for
    name: str = "gpen"  # the checkpoint's stem, to make the folder readable

    def ir_dir(self, root: Path) -> Path:
        return root / f"{self.name}-{self.weights_sha256[:16]}" / f"ov{self.openvino}"

    def compiled_dir(self, root: Path) -> Path:
        return self.ir_dir(root) / f"compiled-{self.precision}-{self.cpu}"


def cache_root(models_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<models folder>/openvino`` (created on demand by :func:`save_ir`)."""
    from gpen_core.weights.lookup import models_dir as default_models_dir

    return (default_models_dir() if models_dir is None else Path(models_dir)) / "openvino"


def cache_key(checkpoint: Path, precision: Precision, sha256: str | None = None, name: str = "") -> CacheKey:
    """The key of ``checkpoint`` converted for ``precision``; ``name``: its folder's (default the file's stem)."""
    from gpen_core.weights.lookup import file_sha256

    version = openvino_version()
    if version is None:
        raise ResourceError(f"OpenVINO is not installed; {INSTALL_HINT}")
    name = name or checkpoint.stem[:40]
    return CacheKey(sha256 or file_sha256(checkpoint), version.split("-")[0], precision, cpu_key(), name)


def is_cached(key: CacheKey, models_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the IR for ``key`` is in the cache (then :func:`load` needs no torch)."""
    ir = key.ir_dir(cache_root(models_dir))
    return all((ir / name).is_file() for name in ("model.xml", "model.bin", "meta.json"))


def drop_mapped_pages(folder: Path) -> int:
    """``madvise(MADV_DONTNEED)`` this process's read-only mappings of files in ``folder``; the bytes advised (0 off
    Linux). The plugin runs on its own copy of the weights, yet the mapped originals stay resident
    (docs/performance.md, "Where a 12 MP request's memory goes")."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return 0
    import ctypes

    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    prefix = os.path.realpath(folder) + os.sep
    dropped = 0
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "w" in fields[1] or not fields[5].startswith(prefix):
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        if madvise(start, end - start, 4) == 0:  # 4: MADV_DONTNEED
            dropped += end - start
    return dropped


def first_use_fallback(need: int, free_ram: int, what: str, estimated: bool = False, where: str = "here") -> str | None:
    """Why ``auto`` runs ``what`` on torch this time: converting it needs ``need`` bytes of RAM and only
    ``free_ram`` are free; else None. ``where``: whose measurement made OpenVINO the choice."""
    if free_ram >= need:
        return None
    from gpen_core.platform.meter import format_bytes

    figure = f"~{format_bytes(need)}" + (" (estimated from the file size)" if estimated else "")
    return (f"OpenVINO was measured faster {where}, but converting {what} for it the first time needs {figure} of RAM and "
            f"{format_bytes(free_ram)} is free, so this request ran it on torch; with more memory free the next request "
            "converts it once (`--backend torch` keeps torch)")


_CONVERT_PREFIX = ".convert-"
# A temporary this old is abandoned whatever its pid says (pids are reused); the slowest conversion is far shorter.
_STALE_S = 6 * 3600


def abandoned(path: Path, pid_text: str) -> bool:
    """Whether ``path``, a temporary named with its owner's pid ``pid_text``, was left by a killed run: that process
    is gone, or it is older than :data:`_STALE_S` (without a pid: an hour)."""
    try:
        age = time.time() - path.lstat().st_mtime
    except OSError:
        return False
    if not pid_text.isdigit():
        return age > 3600
    return age > _STALE_S or not pid_alive(int(pid_text))


def _own_temp(parent: Path, purpose: str = "") -> Path:
    """A new ``.convert-<pid>-…`` folder in ``parent``: the pid tells a killed conversion's from a live one's."""
    return Path(tempfile.mkdtemp(prefix=f"{_CONVERT_PREFIX}{os.getpid()}-{purpose}", dir=parent))


def clean_stale_conversions(root: Path) -> list[Path]:
    """Remove the ``.convert-*`` folders of killed conversions under ``root/<model>/``; what went. A ``<model>``
    that is a link is not entered: it may lead out of the models folder."""
    removed = []
    try:
        models = [m for m in root.iterdir() if not m.is_symlink() and m.is_dir()]
    except OSError:  # no cache yet, or not a folder
        return removed
    for d in (d for m in models for d in m.glob(f"{_CONVERT_PREFIX}*")):
        pid_text = d.name[len(_CONVERT_PREFIX) :].split("-", 1)[0]
        if abandoned(d, pid_text) and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class CacheProblem(ResourceError):
    """The OpenVINO cache cannot serve a network right now; torch can (the model cache falls back)."""


class CacheUnwritable(CacheProblem):
    """The models folder's ``openvino/`` cache cannot be written, so nothing can be converted into it."""


class CacheDamaged(CacheProblem):
    """A cache entry failed its check or its load; it has been set aside and is converted again on a later use."""


def unwritable_reason(root: Path) -> str | None:
    """None when a conversion can be saved under ``root`` (created if missing), else why not and the fix. Probed by
    a write: a permission check lies to root on a read-only mount."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(_own_temp(root, "probe-"))
    except OSError as exc:
        return (f"the OpenVINO cache folder {root} cannot be written ({exc.strerror or exc.__class__.__name__}), so "
                "nothing can be converted for OpenVINO there; make it writable (or point --models-dir at a writable folder "
                "holding the weights), or use --backend torch")
    return None


def require_writable(root: Path) -> None:
    if why := unwritable_reason(root):
        raise CacheUnwritable(why)


def entry_problem(ir_dir: Path) -> str | None:
    """None when the IR in ``ir_dir`` has the sizes :func:`save_ir` recorded, else what is wrong."""
    try:
        meta = json.loads((ir_dir / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        return f"its meta.json cannot be read ({exc.__class__.__name__})"
    for name, want in (meta.get("files") or {}).items():
        try:
            have = (ir_dir / name).stat().st_size
        except OSError:
            return f"{name} is missing"
        if have != want.get("size"):
            return f"{name} has {have} bytes, {want.get('size')} were written"
    return None


def set_aside(ir_dir: Path, why: str) -> CacheDamaged:
    """Take a damaged entry out of the cache (renamed first: an open reader keeps its files) and return the error."""
    try:
        aside = _own_temp(ir_dir.parent, "damaged-")
        durable.move_aside(ir_dir, aside / "entry")
        shutil.rmtree(aside, ignore_errors=True)
        done = "it was removed and is converted again on a later use"
    except OSError as exc:
        done = f"it could not be removed ({exc.strerror}): delete {ir_dir} to have it converted again"
    return CacheDamaged(f"the cached OpenVINO model in {ir_dir} is damaged ({why}); {done}")


def save_ir(ov_model: Any, final: Path, meta: dict[str, Any], started: float) -> float:
    """Write a converted model (float32 weights, and ``meta`` with each file's size and sha256) into ``final`` whole
    or not at all; another process's finished copy of the same conversion is kept. Seconds since ``started``;
    raises :class:`CacheUnwritable`."""
    import openvino as ov

    require_writable(final.parent.parent)  # the cache root: <root>/<model>/<ov version>
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_conversions(final.parent.parent)
    tmp = _own_temp(final.parent)
    try:
        ov.save_model(ov_model, tmp / "model.xml", compress_to_fp16=False)  # keep float32 weights
        seconds = time.perf_counter() - started
        files = {}
        for name in ("model.xml", "model.bin"):
            with open(tmp / name, "rb") as f:
                files[name] = {"size": os.fstat(f.fileno()).st_size, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
        (tmp / "meta.json").write_text(json.dumps({**meta, "convert_s": round(seconds, 2), "files": files}, indent=1))
        if not _same_conversion(final, meta):
            _replace_entry(tmp, final, meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it became the entry
    return seconds


def save_conversion(ov_model: Any, key: CacheKey, models_dir: str | os.PathLike[str] | None, meta: dict[str, Any],
                    started: float, say: Progress) -> float:
    """:func:`save_ir` of the conversion of ``key``'s weights, ``meta`` with what every entry records (the weights'
    sha256, OpenVINO's and torch's versions); told to ``say``, seconds since ``started``."""
    import torch

    say(0.8, "OpenVINO: saving the converted model")
    meta = {**meta, "weights_sha256": key.weights_sha256, "openvino": key.openvino, "torch": torch.__version__}
    seconds = save_ir(ov_model, key.ir_dir(cache_root(models_dir)), meta, started)
    say(1.0, f"OpenVINO: converted in {seconds:.1f} s")
    return seconds


def synthetic_file(models_dir: str | os.PathLike[str] | None, name: str, state_dict: Callable[[], Any]) -> Path:
    """``<cache>/synthetic/<name>``: random weights (``state_dict()``) written once, so a network timed without its
    weights converts once."""
    path = cache_root(models_dir) / "synthetic" / name
    if not path.exists():
        import torch

        path.parent.mkdir(parents=True, exist_ok=True)
        with durable.replacing(path, sync=True, sweep=True) as tmp:  # flushed: a file here is reused as it is
            torch.save(state_dict(), tmp)
    return path


# meta.json fields naming where the weights were read from: the same conversion from another path is the same
_PATH_KEYS = ("checkpoint", "weights")


def _same_conversion(entry: Path, meta: dict[str, Any]) -> bool:
    """Whether ``entry`` is a finished conversion of the same thing (``meta``'s every field alike, files intact)."""
    try:
        have = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    same = all(have.get(k) == v for k, v in meta.items() if k not in _PATH_KEYS)
    return same and "files" in have and entry_problem(entry) is None


def _replace_entry(tmp: Path, final: Path, meta: dict[str, Any]) -> None:
    """Rename ``tmp`` to ``final``, setting aside whatever is there; another process's finished copy of the same
    conversion appearing meanwhile is kept."""
    aside = None
    if final.exists() or final.is_symlink():
        aside = _own_temp(final.parent, "old-")
        with contextlib.suppress(FileNotFoundError):  # another process set it aside first
            durable.move_aside(final, aside / "entry")
    try:
        # Not flushed: the entry records its files' sizes, and a torn one is set aside and converted again.
        durable.install(tmp, final, sync=False)
    except OSError:  # another process finished the same conversion first: keep its copy
        if not _same_conversion(final, meta):
            raise
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


def compile_entry(ir_dir: Path, compiled_dir: Path, config: dict[str, Any]) -> Any:
    """Compile the cached IR in ``ir_dir``, its blob kept in ``compiled_dir`` where writable. A torn or unreadable
    entry is set aside and :class:`CacheDamaged` raised; running out of memory is raised as it is."""
    if why := entry_problem(ir_dir):
        raise set_aside(ir_dir, why)
    with contextlib.suppress(OSError):  # a read-only cache: compile from the IR every time
        compiled_dir.mkdir(parents=True, exist_ok=True)
        config = {**config, "CACHE_DIR": str(compiled_dir)}
    try:
        return compile_cached(ir_dir / "model.xml", config)
    except RuntimeError as exc:
        if is_oom(exc):
            raise
        raise set_aside(ir_dir, f"OpenVINO could not load it: {str(exc).strip().splitlines()[0][:200]}") from exc


def compile_cached(xml: str | os.PathLike[str], config: dict[str, Any]) -> Any:
    """``compile_model`` on the CPU with ``config``. Two processes compiling one model at once (Ray workers) race on
    the blob cache ("filesystem error"); the compile is sound, so it is retried once, then once without the cache."""
    core = get_core()
    for pause in (0.2, None):
        try:
            return core.compile_model(str(xml), "CPU", config)
        except RuntimeError as exc:
            if "filesystem error" not in str(exc):
                raise
        if pause:
            time.sleep(pause)
    return core.compile_model(str(xml), "CPU", {k: v for k, v in config.items() if k != "CACHE_DIR"})


class CompiledNet:
    """A network compiled from the OpenVINO cache and its one infer request; calls are serialised. After each call
    the plugin's buffers go back: kept, they sat under every later stage's peak (docs/performance.md, "OpenVINO:
    handing the buffers back after each call"). ``meta``: the entry's meta.json."""

    backend = "openvino"

    def __init__(self, compiled: Any, meta: dict[str, Any], key: CacheKey, *, load_s: float,
                 convert_s: float | None) -> None:
        self._compiled, self._request, self._lock = compiled, compiled.create_infer_request(), threading.Lock()
        self.key, self.precision = key, key.precision
        self.load_s = load_s  # reading + compiling (or importing the cached blob)
        self.convert_s = convert_s  # None when the IR came from the cache
        self.ir_dir: Path | None = None  # the entry compiled from (None: built by hand)
        self.dropped_bytes = 0  # mapped weight-file bytes taken out of RSS after compiling (see open)

    @classmethod
    def open(cls, key: CacheKey, models_dir: str | os.PathLike[str] | None, threads: int | None,
             convert: Callable[[], float], current: Callable[[CacheKey, Any], bool] = is_cached) -> Self:
        """The network of ``key`` compiled, converted first by ``convert()`` (its seconds) unless ``current`` finds it
        cached. ResourceError when OpenVINO cannot run here; a bad precision raises as :func:`check_precision`; a
        damaged entry :class:`CacheDamaged`."""
        if why := unavailable_reason():
            raise ResourceError(why)
        check_precision(key.precision)
        root = cache_root(models_dir)
        convert_s = None
        if not current(key, models_dir):
            with CONVERSION_LOCK:
                if not current(key, models_dir):
                    require_writable(root)  # before the minutes of loading and tracing, not after
                    convert_s = convert()
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": key.precision,
                                  **({"INFERENCE_NUM_THREADS": int(threads)} if threads else {})}
        t, ir = time.perf_counter(), key.ir_dir(root)
        compiled = compile_entry(ir, key.compiled_dir(root), config)
        net = cls(compiled, json.loads((ir / "meta.json").read_text()), key, load_s=time.perf_counter() - t,
                  convert_s=convert_s)
        net.ir_dir, net.dropped_bytes = ir, drop_mapped_pages(ir)  # the plugin runs on its own copy of the weights
        return net

    @property
    def dtype_name(self) -> str:
        return "bfloat16" if self.precision == "bf16" else "float32"

    def infer(self, inputs: list[Any], read: Callable[[Any], Any] = lambda r: r.get_output_tensor(0).data.copy()) -> Any:
        """``read(request)`` after running ``inputs``: it copies what it keeps (the request reuses its buffers)."""
        with self._lock:
            self._request.infer(inputs)
            out = read(self._request)
            self._compiled.release_memory()
        malloc_trim()
        return out
