"""What this machine is and what is installed (``python -m gpen_core info``): versions from package metadata
(Gradio is never imported), device, CPU, memory, and the state of every registry checkpoint."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from gpen_core.compat.versions import installed
from gpen_core.platform.cpuinfo import cpu_flags, cpu_model
from gpen_core.platform.meter import format_bytes
from gpen_core.weights.lookup import WeightStatus, status
from gpen_core.weights.missing import download_size, size_text
from gpen_core.weights.registry import unpinned_note

# CPU features that decide dtype and speed: bf16 is only worth it with native support (bf16: ARM's).
CPU_FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "bf16")
# The packages info names, in its order, each with the wheels that install it (the first installed counts).
_PACKAGES = {"torch": ("torch",), "torchvision": ("torchvision",), "gradio": ("gradio",), "facexlib": ("facexlib",),
             "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
                        "opencv-contrib-python"),
             "numpy": ("numpy",), "modelscope": ("modelscope",)}


@dataclass(frozen=True)
class Info:
    """A snapshot of the environment. Bytes for memory; None where unknown or absent."""

    python: str
    platform: str
    gpen_core: str
    torch: str | None
    torchvision: str | None
    gradio: str | None
    facexlib: str | None
    opencv: str | None
    numpy: str | None
    modelscope: str | None
    device: str  # "cpu" or "cuda:0 (<name>)"
    cuda_name: str | None
    cuda_vram_bytes: int | None  # total memory of device 0
    cuda_runtime: str | None  # torch.version.cuda
    torch_threads: int | None
    cpu_model: str
    cpu_flags: tuple[str, ...]  # the CPU_FLAGS_OF_INTEREST this CPU has
    cores_logical: int | None
    cores_physical: int | None
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    models_dir: Path
    weights: tuple[WeightStatus, ...]


def host_facts() -> dict[str, Any]:
    """The CPU (its model, the :data:`CPU_FLAGS_OF_INTEREST` it has), cores and RAM, named as in :class:`Info`;
    without torch (the tips' parent keeps it out)."""
    flags, vm = cpu_flags(), psutil.virtual_memory()
    return {"cpu_model": cpu_model(), "cpu_flags": tuple(f for f in CPU_FLAGS_OF_INTEREST if f in flags),
            "cores_logical": psutil.cpu_count(logical=True), "cores_physical": psutil.cpu_count(logical=False),
            "ram_total_bytes": int(vm.total), "ram_available_bytes": int(vm.available)}


def machine_facts() -> dict[str, Any]:
    """The hardware check's machine facts (a profile's ``machine``, the tips' line): :func:`host_facts`, versions,
    torch's threads, the GPU and the plan's native bf16. Imports torch: the tips ask it of a child."""
    from gpen_core import __version__
    from gpen_core.networks.plan import cpu_features

    _, gpu, vram, cuda_runtime, threads = _torch_side()
    host = host_facts()
    return {**host, "cpu_flags": list(host["cpu_flags"]), "cuda_runtime": cuda_runtime, "torch": installed("torch"),
            "torch_threads": threads, "gpen_core": __version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "gpu_name": gpu, "vram_total_bytes": vram,
            "native_bf16": cpu_features()["native_bf16"]}


def _torch_side() -> tuple[str, str | None, int | None, str | None, int | None]:
    """(device, cuda name, VRAM bytes, CUDA runtime, torch threads); imports torch if installed."""
    try:
        import torch
    except ImportError:
        return "cpu", None, None, None, None
    threads = torch.get_num_threads()
    try:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return f"cuda:0 ({props.name})", props.name, int(props.total_memory), torch.version.cuda, threads
    except Exception:  # a broken driver must not break `info`; it reports CPU
        pass
    return "cpu", None, None, torch.version.cuda, threads


def collect_info(models_dir: str | os.PathLike[str] | None = None) -> Info:
    """Everything ``info`` shows. No network; hashes present weights once per process."""
    from gpen_core import __version__
    from gpen_core.platform.paths import folder as models_folder

    folder = models_folder(models_dir)
    device, cuda_name, vram, cuda_rt, threads = _torch_side()
    return Info(
        python=sys.version.split()[0], platform=platform.platform(), gpen_core=__version__,
        **{name: next(filter(None, map(installed, wheels)), None) for name, wheels in _PACKAGES.items()},
        device=device, cuda_name=cuda_name, cuda_vram_bytes=vram, cuda_runtime=cuda_rt, torch_threads=threads,
        models_dir=folder, weights=tuple(status(folder)), **host_facts(),
    )


def format_info(info: Info) -> str:
    """Human-readable lines, one fact per line; weights last, one line each."""
    missing = "not installed"
    lines = [
        f"gpen_core    {info.gpen_core}",
        f"python       {info.python} on {info.platform}",
        f"torch        {info.torch or missing}" + (f" (CUDA {info.cuda_runtime})" if info.cuda_runtime else ""),
        *(f"{name:<13}{getattr(info, name) or missing}" for name in list(_PACKAGES)[1:]),  # torch: the line above
        f"device       {info.device}" + (f", {format_bytes(info.cuda_vram_bytes)} VRAM" if info.cuda_vram_bytes else ""),
        f"cpu          {info.cpu_model}; {info.cores_physical or '?'} cores / {info.cores_logical or '?'} threads"
        + (f"; torch uses {info.torch_threads} threads" if info.torch_threads else ""),
        f"cpu flags    {' '.join(info.cpu_flags) or 'none of ' + ', '.join(CPU_FLAGS_OF_INTEREST)}",
        f"ram          {format_bytes(info.ram_available_bytes)} available of {format_bytes(info.ram_total_bytes)}",
        f"models dir   {info.models_dir}",
        "weights:",
    ]
    for w in info.weights:
        if not w.present:
            state = f"missing      ({size_text(*download_size(w.name))}) -> `python -m gpen_core download {w.name}` or place it at {w.expected_path}"
        elif w.verified:  # "ok" only where a published sha256 matched
            note = unpinned_note(w.name)
            state = (f"{'present' if note else 'ok':<12} {size_text(w.size_bytes, False)}, {w.location}: {w.path}"
                     + (f" ({note})" if note else ""))
        else:
            first = (w.problem or "failed verification").splitlines()[0]
            state = f"CORRUPT      {w.path}: {first}"
        lines.append(f"  {w.name:<25} {state}")
    return "\n".join(lines)
