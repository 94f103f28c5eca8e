"""The forward plan (device, dtype, layout, compile) a generator runs with; :func:`choose_plan` turns a request into
one this machine runs well, and says when it changed the request."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch

from gpen_core.networks.arch import FirImpl
from gpen_core.errors import ResourceError
from gpen_core.platform.cpuinfo import cpu_flags, native_bf16

DTypeName = Literal["float32", "bfloat16", "float16"]
_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ForwardPlan:
    """How one model runs. Hashable: the restorer keys its model cache on it."""

    # Where the weights and activations live ("cpu", "cuda", "cuda:1").
    device: str = "cpu"
    # Compute dtype of the convolutions. bfloat16 only where the CPU has it natively (emulated: measured 7-300x
    # slower than float32), float16 only on CUDA (~500x slower on CPU).
    dtype: DTypeName = "float32"
    # FIR implementation: "depthwise" is the fast one; "native" the official upfirdn2d, to check the fast one.
    fir: FirImpl = "depthwise"
    # Channels-last activations: oneDNN and cuDNN convolve NHWC without a layout round trip (1.5-2.2x per conv).
    channels_last: bool = True
    # torch.compile the forward: off by default, it compiles for tens of seconds on each process's first call.
    compile: bool = False

    @property
    def dtype_torch(self) -> torch.dtype:
        return _DTYPES[self.dtype]


def cpu_features() -> dict[str, bool]:
    """What this CPU can do natively: the ISA flags by name, ``arm_bf16``, ``torch_avx512`` (torch dispatches to
    AVX-512) and ``native_bf16`` (bfloat16 not emulated)."""
    flags = cpu_flags()
    capability = str(torch.backends.cpu.get_cpu_capability())  # torch's own dispatch level
    feats = {f: f in flags for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")}
    feats["avx2"] = "avx2" in flags or capability in ("AVX2", "AVX512")
    feats["arm_bf16"] = "bf16" in flags
    feats["torch_avx512"] = capability == "AVX512"
    # oneDNN's own answer where this torch exposes it (it is what the convolutions use).
    try:
        onednn = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN (some ARM builds) lacks the op or raises
        onednn = False
    feats["native_bf16"] = native_bf16(flags, onednn)
    return feats


def cuda_native_bf16(device: str | torch.device = "cuda") -> bool:
    """Whether the GPU ``device`` runs bfloat16 natively (compute capability 8.0 and later; ROCm: yes). Not
    ``torch.cuda.is_bf16_supported()``: it says yes where bfloat16 is emulated, and asks the current device."""
    if torch.version.hip:
        return True
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return torch.cuda.get_device_capability(dev)[0] >= 8


def choose_plan(device: str | torch.device = "cpu", requested_dtype: str = "float32", *,
                allow_compile: bool = False) -> tuple[ForwardPlan, str | None]:
    """The plan for ``requested_dtype`` (or "auto": CUDA float16, CPU bfloat16 where native) on ``device``, and a note
    when a dtype this device runs badly was replaced. ``allow_compile``: where a C++ compiler / Triton is there.
    ResourceError when CUDA is asked for but not available."""
    dev = str(device)
    requested = str(requested_dtype).replace("torch.", "")
    if requested not in (*_DTYPES, "auto"):
        raise ValueError(f"unknown dtype {requested_dtype!r}; expected one of float32, bfloat16, float16, auto")
    notes: list[str] = []
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ResourceError(f"device {dev!r} was asked for but CUDA is not available here; use device 'cpu'.")
        dtype = "float16" if requested == "auto" else requested
        if dtype == "bfloat16" and not cuda_native_bf16(dev):
            dtype = "float16"
            notes.append("this GPU has no bfloat16; used float16 instead")
    elif dev == "cpu":
        native_bf16 = cpu_features()["native_bf16"]
        dtype = requested
        if requested in ("auto", "float16"):
            dtype = "bfloat16" if native_bf16 else "float32"
        if requested == "float16":
            notes.append(f"float16 is ~500x slower than float32 on a CPU; used {dtype} instead")
        elif requested == "bfloat16" and not native_bf16:
            dtype = "float32"
            notes.append("this CPU has no native bfloat16 (no AVX-512 BF16 / AMX), where bfloat16 runs several "
                         "times slower than float32; used float32 instead")
    else:
        raise ValueError(f"unknown device {dev!r}; expected 'cpu' or 'cuda[:N]'")
    why_not = _compile_unavailable(dev) if allow_compile else None
    if why_not:
        notes.append(f"torch.compile is off: {why_not}")
    plan = ForwardPlan(device=dev, dtype=dtype, compile=allow_compile and not why_not)  # type: ignore[arg-type]
    return plan, ("; ".join(notes) or None)


def _compile_unavailable(device: str) -> str | None:
    import shutil

    if device.startswith("cuda"):
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton is not installed"
        return None
    if not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++")):
        return "no C++ compiler (g++/clang++) on PATH for inductor's CPU kernels"
    return None


@contextmanager
def cuda_numerics(device: str, *, exact_float32: bool, fixed_input: bool) -> Iterator[None]:
    """TF32 and cuDNN autotuning as a call on ``device`` needs them, restored afterwards (CPU: nothing).
    ``exact_float32``: TF32 off (its 10-bit mantissa is not the float32 ``quality`` promises). ``fixed_input``:
    ``cudnn.benchmark`` on (the generator's fixed shape; the detector's changes every photo). Process-wide flags:
    callers hold the Restorer's lock."""
    if not str(device).startswith("cuda"):
        yield
        return
    b = torch.backends
    # torch >= 2.9's one API (mixing it with allow_tf32 makes torch raise on reads); requirements pin 2.13+.
    targets = [b.cudnn.conv, b.cuda.matmul, b.cudnn.rnn]
    saved, bench = [t.fp32_precision for t in targets], b.cudnn.benchmark
    try:
        if exact_float32:
            for t in targets:
                t.fp32_precision = "ieee"
        b.cudnn.benchmark = fixed_input
        yield
    finally:
        for t, v in zip(targets, saved):
            t.fp32_precision = v
        b.cudnn.benchmark = bench
