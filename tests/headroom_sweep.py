"""Run in a fresh process by tests/test_headroom.py: PyTorch layers started with little address space
left under ``RLIMIT_AS``, each room in its own forked child, and how each child ended.

    python tests/headroom_sweep.py [--guard] [--past-need] LO_KIB HI_KIB STEP_KIB

Prints one line per layer: ``name ok=N oom=N signal=N [rooms that crashed, KiB]`` (oom: a Python
exception; signal: the child was killed, e.g. by SIGSEGV). ``--guard`` installs
:func:`gpen_core.platform.headroom.guard_layers` in each child, after its cap; ``--past-need`` counts
the rooms from what the guard asks of each layer (:func:`gpen_core.platform.headroom.room_for`).
"""

from __future__ import annotations

import os
import resource
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project, for --guard
torch.set_num_threads(1)  # one thread before any fork: a forked child never meets a half-held OpenMP pool

# GPEN's upsampling layers as the fast generator runs them (depthwise FIR as a transposed conv, and
# a modulated transposed conv) and a depthwise conv: (input channels, size, weight shape, call).
LAYERS = {
    "fir-up": (64, 128, (64, 1, 4, 4), dict(stride=2, padding=1, groups=64)),
    "fir-up-256": (256, 32, (256, 1, 4, 4), dict(stride=2, padding=1, groups=256)),
    "mod-up": (64, 128, (64, 64, 3, 3), dict(stride=2)),
}


class Upsampling(nn.Module):
    """A layer that makes its weight in its call, as GPEN's modulated convs do, then runs a
    transposed convolution: its allocations are those of one of the generator's layers."""

    def __init__(self, shape: tuple[int, ...], call: dict) -> None:
        super().__init__()
        self.shape, self.call = shape, call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv_transpose2d(x, torch.randn(self.shape), **self.call)


def _vm_size() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(layer: nn.Module, x: torch.Tensor, room: int, guard: bool) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + room, resource.RLIM_INFINITY))
    if guard:
        from gpen_core.platform.headroom import guard_layers

        guard_layers()
    try:
        layer(x)
    except Exception:  # noqa: BLE001 — any exception is the outcome counted as "oom"
        os._exit(3)
    os._exit(0)


def main(argv: list[str]) -> None:
    guard, past_need = "--guard" in argv, "--past-need" in argv
    lo, hi, step = (int(a) * 1024 for a in argv if not a.startswith("--"))
    if guard or past_need:
        import gpen_core.errors  # noqa: F401 — imported before the cap, as in the engine
        from gpen_core.platform.headroom import room_for
    F.conv2d(torch.randn(1, 8, 8, 8), torch.randn(8, 8, 3, 3), padding=1)  # oneDNN's own start-up
    for name, (channels, size, shape, call) in LAYERS.items():
        x, layer = torch.randn(1, channels, size, size), Upsampling(shape, call)
        ends, crashed = {"ok": 0, "oom": 0, "signal": 0}, []
        base = room_for((x,)) if past_need else 0
        for room in range(base + lo, base + hi, step):
            pid = os.fork()
            if pid == 0:
                _child(layer, x, room, guard)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            ends["ok" if code == 0 else "oom" if code == 3 else "signal"] += 1
            if code < 0:
                crashed.append(room // 1024)
        print(name, " ".join(f"{k}={v}" for k, v in ends.items()), crashed, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
