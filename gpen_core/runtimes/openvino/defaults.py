"""``auto``'s choice before this machine has measured anything: per CPU kind, a measurement on a named CPU of that
kind with its command. This machine's own record always wins; no entry: torch until measured."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from gpen_core.platform.cpuinfo import cpu_flags
from gpen_core.runtimes.openvino.choice import BackendChoice


@dataclass(frozen=True)
class Measured:
    """One torch-vs-OpenVINO measurement on a named CPU (seconds per call, medians)."""

    torch_s: float
    openvino_s: float
    source: str  # the CPU and the command, so anyone can measure it again


_BENCH = "benchmarks/bench_forward.py --paths fast fast-bf16 ov ov-bf16"
_NETS = "the parser and detector rows of python -m gpen_core profile (measure_speed, 5 runs)"
_XEON = "Intel Xeon with AMX, 2 cores"
_ZEN4 = "AMD EPYC Zen 4 (AVX-512 BF16, no AMX), 2 cores"
_ZEN2 = "AMD EPYC Zen 2 (AVX2 only, family 23 model 49), 2 cores"
# The generator rows of one quiet run of the whole benchmark (5 interleaved runs per path), on the Zen 2 and on the
# Zen 4 (its 256 px float32 tie: docs/performance.md, "Out of the box and after the hardware check"); on the Zen 2
# the detector rows of the hardware check right after it.
_QUIET = "benchmarks/bench.py (bench_forward.py --sizes 256 512 --runs 5), quiet, 2026-12-04"
_NETS_ZEN2 = "python -m gpen_core profile (measure_speed, 5 runs), quiet, 2026-12-04"
# The parser again, torch's parser whole (the first check timed an opt-in strip path), in a busier hour.
_PARSE_ZEN2 = "benchmarks/profile_table.py --synthetic (now bench.py --modes-table; measure_speed, 5 runs), 2026-12-04"
# GPEN's 1024 px task generators (colorize, inpaint: one architecture): CPU seconds per call
# (all the process's threads), medians of 3 interleaved runs on a machine shared with other work.
_TASKS_1024 = "benchmarks/ov_1024.py --runs 3 (CPU seconds; now bench_forward.py --sizes 1024)"

# Keys are the speed-record keys of generator.py: "<size>-<dtype>" for the GPEN generator,
# "<network>-<size>-<dtype>" for the others.
DEFAULTS: dict[str, dict[str, Measured]] = {
    "amx": {
        "512-float32": Measured(1.569, 1.152, f"{_XEON}, {_BENCH}, 2026-12-03"),
        "512-bfloat16": Measured(0.592, 0.314, f"{_XEON}, {_BENCH}, 2026-12-03"),
        "256-float32": Measured(0.111, 0.107, f"{_XEON}, {_BENCH}, 2026-12-03"),
        "256-bfloat16": Measured(0.050, 0.037, f"{_XEON}, {_BENCH}, 2026-12-03"),
        "parsenet-512-float32": Measured(2.32, 1.61, f"{_XEON}, python -m gpen_core profile, 2026-12-03"),
        "parsenet-256-bfloat16": Measured(0.135, 0.095, f"{_XEON}, python -m gpen_core profile, 2026-12-03"),
        "retinaface-resnet50-1000-float32": Measured(0.90, 0.57, f"{_XEON}, python -m gpen_core profile, 2026-12-03"),
        "retinaface-mobilenet0.25-1000-float32": Measured(0.10, 0.044, f"{_XEON}, python -m gpen_core profile, 2026-12-03"),
    },
    "avx512_bf16": {
        "1024-float32": Measured(6.574, 4.340, f"{_ZEN4}, {_TASKS_1024}, 2026-12-04"),
        "1024-bfloat16": Measured(4.052, 2.212, f"{_ZEN4}, {_TASKS_1024}, 2026-12-04"),
        "512-float32": Measured(2.414, 1.660, f"{_ZEN4}, {_QUIET}"),
        "512-bfloat16": Measured(1.231, 0.821, f"{_ZEN4}, {_QUIET}"),
        "256-float32": Measured(0.127, 0.133, f"{_ZEN4}, {_QUIET}"),
        "256-bfloat16": Measured(0.079, 0.064, f"{_ZEN4}, {_QUIET}"),
        "parsenet-512-float32": Measured(3.361, 2.561, f"{_ZEN4}, {_NETS}, 2026-12-04"),
        "parsenet-256-bfloat16": Measured(0.395, 0.344, f"{_ZEN4}, {_NETS}, 2026-12-04"),
        "parsenet-256-float32": Measured(0.802, 0.679, f"{_ZEN4}, {_NETS}, 2026-12-04"),
        "retinaface-resnet50-1000-float32": Measured(1.321, 0.923, f"{_ZEN4}, {_NETS}, 2026-12-04"),
        "retinaface-mobilenet0.25-1000-float32": Measured(0.167, 0.074, f"{_ZEN4}, {_NETS}, 2026-12-04"),
    },
    # Two AVX2-only EPYCs: OpenVINO was faster at 512 px on both; at 256 px torch on the first
    # (0.100 vs 0.114 s, 2026-12-02) and OpenVINO on the Zen 2 (below). The only mode that runs
    # 256 px, `low`, keeps to torch under auto either way (MemoryMode.auto_openvino).
    "avx2": {
        "512-float32": Measured(2.014, 1.825, f"{_ZEN2}, {_QUIET}"),
        "256-float32": Measured(0.159, 0.144, f"{_ZEN2}, {_QUIET}"),
        "parsenet-512-float32": Measured(3.904, 3.709, f"{_ZEN2}, {_PARSE_ZEN2}"),
        "parsenet-256-float32": Measured(0.926, 0.855, f"{_ZEN2}, {_PARSE_ZEN2}"),
        "retinaface-resnet50-1000-float32": Measured(1.279, 0.940, f"{_ZEN2}, {_NETS_ZEN2}"),
        "retinaface-mobilenet0.25-1000-float32": Measured(0.152, 0.062, f"{_ZEN2}, {_NETS_ZEN2}"),
    },
}

# The flag that makes a CPU of each kind, the first present deciding (AMX CPUs have AVX-512 BF16 and AVX2 too).
_KIND_FLAGS = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx2", "avx2"))
KIND_NAMES = {
    "amx": "CPUs with AMX (Intel Xeon Sapphire Rapids and later)",
    "avx512_bf16": "CPUs with AVX-512 BF16 but no AMX (AMD Zen 4)",
    "avx2": "CPUs with AVX2 and no native bf16",
}


def cpu_kind(flags: set[str] | None = None) -> str | None:
    """"amx", "avx512_bf16", "avx2" or None (another CPU: ARM, an old x86), from /proc/cpuinfo's flags."""
    flags = cpu_flags() if flags is None else flags
    return next((kind for flag, kind in _KIND_FLAGS if flag in flags), None)


def default_choice(key: str, flags: set[str] | None = None) -> BackendChoice | None:
    """The choice for speed-record ``key`` on this CPU kind, or None. ``GPEN_OPENVINO_DEFAULTS=0`` turns these off
    (a machine unlike its kind; the test suite, whose expectations must not depend on its CPU)."""
    m = default_measured(key, flags)
    if m is None:
        return None
    if m.openvino_s < m.torch_s:
        faster, other, fast, slow = "openvino", "torch", m.openvino_s, m.torch_s
    else:
        faster, other, fast, slow = "torch", "OpenVINO", m.torch_s, m.openvino_s
    digits = 2 if f"{fast:.2f}" != f"{slow:.2f}" else 3  # two figures that round alike would read as a tie
    reason = (f"measured faster on {KIND_NAMES[cpu_kind(flags) or '']}: {fast:.{digits}f} s vs {other} "
              f"{slow:.{digits}f} s per call on an {machine(m.source)}")
    return BackendChoice(faster, reason, "not yet measured on this machine (the hardware check measures it here)")


def machine(source: str) -> str:
    """The CPU a source names: up to its first comma outside brackets ("AMD EPYC Zen 4 (AVX-512 BF16, no AMX)"),
    not up to the first comma (which cut that bracket open in every result's notes)."""
    return re.match(r"(?:\([^)]*\)|[^,(])*", source).group(0)  # type: ignore[union-attr]  # matches "" at worst


def default_measured(key: str, flags: set[str] | None = None) -> Measured | None:
    """The measurement for speed-record ``key`` on a CPU of this one's kind, or None (see :func:`default_choice`)."""
    if os.environ.get("GPEN_OPENVINO_DEFAULTS", "1") == "0":
        return None
    return DEFAULTS.get(cpu_kind(flags) or "", {}).get(key)
