"""OpenVINO basics shared by every network we run on it: availability, the one Core, CPU
features, precision, and the cache folder keyed by weights, release, precision and CPU.

Used by :mod:`gpen_core.runtimes.openvino.generator` (the generator), :mod:`gpen_core.runtimes.openvino.parser` (ParseNet) and
:mod:`gpen_core.runtimes.openvino.detector` (RetinaFace). Nothing beyond the standard library is imported at
module import; ``openvino`` is imported by :func:`get_core`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from gpen_core.errors import ResourceError

Precision = Literal["f32", "bf16"]

# CPU flags that change what OpenVINO's CPU plugin compiles (its ISA dispatch).
_KEY_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_fp16")
_INSTALL_HINT = "pip install openvino (or `bash scripts/setup.sh`, which installs requirements.txt)"
_core_lock = threading.Lock()
_core: Any = None
# One conversion at a time in this process. openvino.convert_model traces the torch module
# (torch.jit.trace), and two traces at once in two threads fail ("Graphs differed across
# invocations"): that happened when a request converted the generator while the app's
# background preparation converted it too. Whoever holds this re-checks the cache first, so
# the second of two threads that wanted the same network loads the first one's conversion.
CONVERSION_LOCK = threading.RLock()


# --------------------------------------------------------------------------- availability


def openvino_version() -> str | None:
    """The installed OpenVINO's version from package metadata (no import), or None."""
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """None when the backend can run here; else a sentence saying why not and how to fix it."""
    if openvino_version() is None:
        return f"OpenVINO is not installed; {_INSTALL_HINT}"
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


def cpu_flags() -> set[str]:
    """The CPU flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_key() -> str:
    """Short, stable name of what the CPU plugin compiles for: e.g. ``avx2`` or ``avx2-avx512f-amx_bf16``."""
    flags = cpu_flags()
    key = "-".join(f for f in _KEY_FLAGS if f in flags)
    return key or "generic"


def capabilities() -> tuple[str, ...]:
    """OpenVINO CPU plugin's optimisation capabilities (e.g. FP32, BF16, INT8)."""
    return tuple(get_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def choose_precision(requested_dtype: str) -> tuple[Precision, str | None]:
    """The OpenVINO precision for a torch-style dtype name, and a note when it differs.

    ``float32`` → ``f32``. ``bfloat16`` / ``float16`` / ``auto`` → ``bf16`` where the
    CPU plugin supports BF16 natively, else ``f32`` (the note says so).
    """
    if requested_dtype == "float32":
        return "f32", None
    if requested_dtype not in ("bfloat16", "float16", "auto"):
        raise ValueError(f"unknown dtype {requested_dtype!r}; expected float32, bfloat16, float16 or auto")
    if "BF16" in capabilities():
        return "bf16", (None if requested_dtype in ("bfloat16", "auto") else "OpenVINO on the CPU runs bfloat16, not float16")
    if requested_dtype == "auto":
        return "f32", None
    return "f32", f"this CPU has no native bfloat16 for OpenVINO (no AVX-512 BF16 / AMX); OpenVINO ran float32 instead of {requested_dtype}"


# --------------------------------------------------------------------------- the cache


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
    """``<models folder>/openvino`` (created on demand by :func:`convert`)."""
    if models_dir is not None:
        return Path(models_dir) / "openvino"
    from gpen_core.weights.lookup import models_dir as default_models_dir

    return default_models_dir() / "openvino"


def _sha256(path: Path) -> str:
    from gpen_core.weights.lookup import file_sha256

    return file_sha256(path)


def cache_key(checkpoint: Path, precision: Precision, sha256: str | None = None) -> CacheKey:
    version = openvino_version()
    if version is None:
        raise ResourceError(f"OpenVINO is not installed; {_INSTALL_HINT}")
    return CacheKey(sha256 or _sha256(checkpoint), version.split("-")[0], precision, cpu_key(), checkpoint.stem[:40])


def is_cached(key: CacheKey, models_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the IR for ``key`` is in the cache (then :func:`load` needs no torch)."""
    ir = key.ir_dir(cache_root(models_dir))
    return (ir / "model.xml").is_file() and (ir / "model.bin").is_file() and (ir / "meta.json").is_file()


def drop_mapped_pages(folder: Path) -> int:
    """Take this process's resident pages of the read-only files mapped from ``folder`` out of
    its RSS (``madvise(MADV_DONTNEED)``); returns the bytes advised (0 off Linux).

    OpenVINO maps the IR's weights (or the cached compiled blob) and reads all of them while
    compiling; the CPU plugin copies the convolution and matmul weights into its own layouts
    then, so their originals in the mapping are never read again, yet stay resident: ~230 MiB
    of the 512 px generator (measured: 290 MiB mapped, 63 MiB read again by the first face).
    Pages still in use come back from the page cache at the first inference (same outputs,
    bit for bit, and the same speed, measured). Only mappings without write permission are
    touched, so no data can be lost. Any network compiled from a cache folder can call it
    after ``compile_model`` (ParseNet's and RetinaFace's loaders: ~80-180 MiB more, measured).
    """
    import sys

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


def first_use_fallback(requested: str, backend: str, cached: bool, need: int, free_ram: int, what: str, estimated: bool = False) -> str | None:
    """Why ``auto`` should run ``what`` on torch this time instead of converting it for OpenVINO now, or None.

    Only for ``auto`` (an explicit ``openvino`` is taken as asked), only while ``what`` is not
    converted yet (``cached``), and only when the conversion needs more RAM (``need``) than is
    free: a later request with more memory free converts it once.
    """
    if requested != "auto" or backend != "openvino" or cached or free_ram >= need:
        return None
    from gpen_core.platform.meter import format_bytes

    figure = f"~{format_bytes(need)}" + (" (estimated from the file size)" if estimated else "")
    return (f"OpenVINO was measured faster here, but converting {what} for it the first time needs {figure} of RAM and "
            f"{format_bytes(free_ram)} is free, so this request ran it on torch; with more memory free the next request "
            "converts it once (`--backend torch` keeps torch)")


_CONVERT_PREFIX = ".convert-"
# A conversion folder this old is abandoned whatever its pid says (pids are reused);
# the slowest conversion measured here (GPEN-BFR-2048) is far shorter.
_STALE_CONVERT_S = 6 * 3600


def clean_stale_conversions(root: Path) -> list[Path]:
    """Remove ``.convert-*`` folders under ``root/<model>/`` left by a conversion that was killed;
    returns what went.

    Stale: its owner process (the pid in its name) is gone, or it is older than
    ``_STALE_CONVERT_S``, or it has no pid in its name and is over an hour old. A live
    conversion's folder is never touched.
    """
    import shutil
    import time

    removed = []
    now = time.time()
    for d in root.glob(f"*/{_CONVERT_PREFIX}*"):
        try:
            age = now - d.lstat().st_mtime
        except OSError:
            continue
        pid_text = d.name[len(_CONVERT_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit():
            stale = age > _STALE_CONVERT_S or not _alive(int(pid_text))
        else:
            stale = age > 3600
        if stale and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def save_ir(ov_model: Any, final: Path, meta: dict[str, Any], started: float) -> float:
    """Write a converted model into its cache folder ``final`` atomically; returns the seconds
    since ``started`` (the conversion's time, also stored in meta.json as ``convert_s``).

    The IR (float32 weights) and meta.json go to a temporary sibling folder first, which is
    then renamed into place: a stale or partial entry is replaced, and when another process
    finished the same conversion first its copy is kept.
    """
    import json
    import shutil
    import tempfile
    import time

    import openvino as ov

    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_conversions(final.parent.parent)
    # The owner's pid in the name: a later run can tell a killed conversion from a live one.
    tmp = Path(tempfile.mkdtemp(prefix=f"{_CONVERT_PREFIX}{os.getpid()}-", dir=final.parent))
    try:
        ov.save_model(ov_model, tmp / "model.xml", compress_to_fp16=False)  # keep float32 weights
        seconds = time.perf_counter() - started
        (tmp / "meta.json").write_text(json.dumps({**meta, "convert_s": round(seconds, 2)}, indent=1))
        shutil.rmtree(final, ignore_errors=True)  # a stale or partial entry (the cache check said no)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same conversion first: keep its copy
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return seconds


def compile_cached(xml: str | os.PathLike[str], config: dict[str, Any]) -> Any:
    """``compile_model`` on the CPU with ``config`` (its ``CACHE_DIR`` included).

    Two processes compiling the same model at once (Ray workers warming up on a fresh models
    folder) race on the compiled-blob cache: OpenVINO writes the blob, then sets its
    permissions, and the other process may have replaced the file in between ("filesystem
    error: cannot set permissions"). The compile itself is sound: it is retried once, then
    once without the cache (correct, only slower to start), never failed for it."""
    core = get_core()
    try:
        return core.compile_model(str(xml), "CPU", config)
    except RuntimeError as exc:
        if "filesystem error" not in str(exc):
            raise
    import time

    time.sleep(0.2)
    try:
        return core.compile_model(str(xml), "CPU", config)
    except RuntimeError as exc:
        if "filesystem error" not in str(exc):
            raise
    return core.compile_model(str(xml), "CPU", {k: v for k, v in config.items() if k != "CACHE_DIR"})
