"""The CPU's model name, read once from /proc/cpuinfo (no torch): in benchmark tables and in the keys of
what is measured per machine."""

from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """"Intel(R) Xeon(R) Processor", "AMD EPYC 9R14 …": /proc/cpuinfo's model name, else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
