"""Out of memory: recognise it from any library we use (:func:`is_oom`), explain a failed import
(:func:`import_failure`), and hand memory back (:func:`release`). Torch is looked at only when already loaded.
"""

from __future__ import annotations

import errno
import gc
import re
import sys

from gpen_core.errors import GPENError, OutOfMemory
from gpen_core.platform.heap import glibc

# Lower-case fragments of allocation-failure messages (PyTorch on the CPU, OpenCV, OpenVINO; seen under prlimit --as).
_OOM_TEXT = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "insufficient memory",
    "failed to allocate",
    "not enough memory",
    # cuBLAS / cuDNN on a full GPU: a workspace that fails, a handle that cannot be created (NOT_INITIALIZED),
    # no convolution engine whose workspace fits.
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cublas_status_not_initialized",
    "unable to find an engine",
    "memory allocation still failed",  # OpenBLAS, in a child's stderr (see reserve_blas_buffers)
    # A shared library that could not be mapped (OpenVINO's CPU plugin, loaded on the first network, under ulimit -v).
    "failed to map segment",
)
# oneDNN's allocation failure; "could not create a primitive descriptor" is a different
# error (an unsupported layer configuration) and is not memory.
_ONEDNN = re.compile(r"could not create a primitive(?! descriptor)")
# Xbyak's "can't alloc" (a JIT code buffer in OpenVINO's CPU plugin); the plugin's "Can't allocate
# registers for a snippet" is a compiler limit, not memory.
_XBYAK = re.compile(r"can't alloc(?!ate registers)")
# OpenVINO's CPU plugin cannot map its threads' stacks under ulimit -v (EAGAIN); EAGAIN alone is not memory.
_OV_THREADS = re.compile(r"failed to create plugin.*resource temporarily unavailable", re.S)


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an allocation failure (RAM or VRAM), from any library we use. Our other errors
    (a :class:`~gpen_core.errors.GPENError` but ``OutOfMemory``) are never memory, whatever their text says."""
    if isinstance(exc, (MemoryError, OutOfMemory)):
        return True
    if isinstance(exc, GPENError):
        return False
    # torch.cuda.OutOfMemoryError is the same class; getattr: a torch still being imported may not have it yet.
    if isinstance(exc, getattr(sys.modules.get("torch"), "OutOfMemoryError", ())):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    msg = str(exc).lower()
    return any(t in msg for t in _OOM_TEXT) or any(bool(p.search(msg)) for p in (_ONEDNN, _XBYAK, _OV_THREADS))


# What importing the engine adds to a fresh process, measured on Linux x86_64 per PyTorch build (RSS, address space,
# data segment); tests/test_oom.py re-measures the installed build's and fails when they drift.
ENGINE_IMPORT = {
    # torch 2.14.1, CUDA build (requirements.txt), used on the CPU
    "cuda": {"rss": 560_000_000, "address_space": 3_800_000_000, "data": 1_000_000_000, "torch": "torch 2.14.1 (CUDA build)"},
    # torch 2.13.0+cpu (requirements-cpu.txt: what scripts/setup.sh installs without an NVIDIA GPU)
    "cpu": {"rss": 250_000_000, "address_space": 1_050_000_000, "data": 390_000_000, "torch": "torch 2.13.0 (CPU build)"},
}


def engine_import_figures() -> dict:
    """ENGINE_IMPORT's entry for the installed PyTorch build, read without importing torch."""
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = ""
    return ENGINE_IMPORT["cpu" if version.endswith("+cpu") else "cuda"]


def _limits_text() -> str:
    """This process's address-space / data limits, when set ("" when unlimited)."""
    try:
        import resource
    except ImportError:
        return ""
    parts = []
    for lim, what, flag in ((resource.RLIMIT_AS, "address space", "ulimit -v / prlimit --as"),
                            (resource.RLIMIT_DATA, "data", "prlimit --data")):
        soft = resource.getrlimit(lim)[0]
        if soft != resource.RLIM_INFINITY:
            size = f"{soft / 1e9:.1f} GB" if soft >= 1e9 else f"{soft / 1e6:.0f} MB"
            parts.append(f"{size} of {what} ({flag})")
    return f"; this process is limited to {' and '.join(parts)}" if parts else ""


def address_space_left() -> int | None:
    """Bytes of address space this process may still map under its ``RLIMIT_AS`` soft limit; None when uncapped."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status", encoding="ascii") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (ImportError, OSError, StopIteration, ValueError):
        return None
    return soft - size


# Package → how to name it, and how its module or library shows up in an import error.
_PACKAGES = (
    ("PyTorch", re.compile(r"torch")),
    ("OpenCV", re.compile(r"\bcv2\b|opencv")),
    ("NumPy", re.compile(r"numpy|openblas")),
    ("Pillow", re.compile(r"\bpil\b|pillow")),
    ("facexlib", re.compile(r"facexlib")),
)


def import_failure(exc: BaseException, module: str | None = None) -> Exception:
    """The error to show for a failed import: :class:`~gpen_core.errors.OutOfMemory` with what the engine needs when
    memory ran out, else a :class:`~gpen_core.errors.GPENError` saying how to repair the installation. A
    ``SystemError`` under a memory cap is the cap (a C extension's failed allocation, seen under ``prlimit --data``)."""
    text = str(exc).strip()
    detail = text.splitlines()[-1][:200] if text else type(exc).__name__
    name = getattr(exc, "name", None) or ""
    # The package, from the module name or the library in the message ("libtorch_cpu.so: failed to map…").
    haystack = f"{name} {text}".lower()
    if module is None:
        module = next((label for label, pattern in _PACKAGES if pattern.search(haystack)), name.split(".")[0] or "a module")
    capped_crash = isinstance(exc, SystemError) and memory_limited()
    # is_oom knows "failed to map segment" too; "cannot map" is another library that could not be mapped under a cap
    if isinstance(exc, MemoryError) or capped_crash or is_oom(exc) or "cannot map" in text.lower():
        fig = engine_import_figures()
        return OutOfMemory(
            f"not enough memory to start: importing {module} failed ({detail}). Loading the engine (PyTorch, "
            f"OpenCV, facexlib) takes about {fig['rss'] / 1e6:.0f} MB of RAM, "
            f"{fig['address_space'] / 1e9:.1f} GB of address space and {fig['data'] / 1e9:.2f} GB of "
            f"data segment (measured with {fig['torch']} on Linux x86_64){_limits_text()}. "
            "Raise the limit or close other programs, and try again."
        )
    return GPENError(f"cannot import {module} ({detail}). The installation is incomplete: run `bash scripts/setup.sh` "
                     "(or reinstall the requirements) and try again.")


def out_of_memory_advice() -> str:
    """What to do when even the lightest mode ran out of memory (callers add their context): under a cap, raise it;
    without one, free memory or use a smaller photo."""
    limits = _limits_text()
    if limits:
        fig = engine_import_figures()
        return (
            f"This process runs under a memory cap{limits}, and the cap ran out, not the machine: a smaller photo "
            f"will not help much. Raise the limit and try again (loading the engine alone takes about "
            f"{fig['address_space'] / 1e9:.1f} GB of address space with {fig['torch']}, before any photo)."
        )
    return (
        "Close other programs or use a smaller photo; `python -m gpen_core profile` measures what each mode "
        "needs on this machine."
    )


def memory_limited() -> bool:
    """Whether this process runs under an address-space or data-segment limit (``ulimit -v``, ``prlimit``)."""
    return bool(_limits_text())


def release(device: str) -> None:
    """Collect garbage, empty the CUDA cache on a CUDA device, and give freed heap back to the OS."""
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    malloc_trim()


def reserve_blas_buffers() -> None:
    """Have NumPy's OpenBLAS map its work buffers now, while the address space is free: it maps them at its first
    product and calls ``exit(1)`` when that fails, which no ``except`` catches. Kept for the process's life."""
    import numpy as np

    a = np.ones((256, 256), np.float32)  # large enough that every OpenBLAS thread takes part
    a @ a


def malloc_trim() -> None:
    """Give freed heap pages back to the OS (glibc), so RSS falls after a model switch."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
