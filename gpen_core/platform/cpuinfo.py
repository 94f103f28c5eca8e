"""What /proc/cpuinfo says about the CPU (no torch): its model name and its flags (bfloat16 native or not)."""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Collection
from functools import lru_cache


def _first(keys: tuple[str, ...]) -> str:
    """The first core's value of the first of ``keys`` found (every core reports the same); '' without one."""
    # OSError: not Linux
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() in keys and value.strip():
                return value.strip()
    return ""


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """"Intel(R) Xeon(R) Processor", "AMD EPYC 9R14 …": /proc/cpuinfo's model name, else what platform says."""
    return _first(("model name",)) or platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU's flags (x86 ``flags``, ARM ``Features``) from /proc/cpuinfo; empty where there is none."""
    return set(_first(("flags", "Features")).split())


def native_bf16(flags: Collection[str], onednn_bf16: bool) -> bool:
    """Whether bfloat16 matmuls run natively on a CPU with ``flags``: AVX-512 BF16 or AMX on x86; ARMv8.6 BF16 where
    torch's oneDNN uses it (``onednn_bf16``; its yes alone does not count: it says yes where it emulates)."""
    return "avx512_bf16" in flags or "amx_bf16" in flags or ("bf16" in flags and onednn_bf16)
