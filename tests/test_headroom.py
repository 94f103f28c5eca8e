"""No PyTorch layer starts at the edge of an address-space cap, where oneDNN can crash
(:mod:`gpen_core.platform.headroom`).

Each sweep runs in a fresh process (tests/headroom_sweep.py): GPEN's upsampling layers are started in
forked children with 0-224 KiB of address space left, 32 KiB apart, and how each child ended is
counted. Without the guard, oneDNN kills some of them (SIGSEGV: an unchecked JIT code mapping);
with it, each ends in an exception the engine steps down from, and a layer given the room the guard
asks for runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpen_core.platform.cpuinfo import cpu_model

SWEEP = Path(__file__).with_name("headroom_sweep.py")


def _sweep(*args: str) -> dict[str, dict[str, int]]:
    done = subprocess.run([sys.executable, str(SWEEP), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ends = {}
    for line in done.stdout.splitlines():
        name, *counts = line.split(" [")[0].split()
        ends[name] = {k: int(v) for k, v in (c.split("=") for c in counts)}
    assert len(ends) == 3, done.stdout
    return ends


def test_without_the_guard_onednn_kills_a_layer_at_the_caps_edge():
    """The crash itself, kept reproduced: some room near the edge ends in a signal, not an exception."""
    ends = _sweep("0", "256", "32")
    if not any(e["signal"] for e in ends.values()):
        pytest.skip(f"oneDNN ended cleanly at every room on {cpu_model()}: its kernels here check their code mapping")
    assert all(e["ok"] == 0 for e in ends.values()), ends  # none of these rooms holds a layer's output


def test_with_the_guard_every_layer_at_the_edge_ends_in_an_exception_and_with_room_runs():
    at_edge = _sweep("--guard", "0", "256", "32")
    assert all(e == {"ok": 0, "oom": 8, "signal": 0} for e in at_edge.values()), at_edge
    # Given the room the guard asks for (and a little more), each layer runs: the guard's figure
    # covers what the layer really maps (its output and oneDNN's scratch and code).
    with_room = _sweep("--guard", "--past-need", "0", "2048", "1024")
    assert all(e == {"ok": 2, "oom": 0, "signal": 0} for e in with_room.values()), with_room


def test_only_a_layers_first_call_of_a_kind_is_checked(monkeypatch: pytest.MonkeyPatch):
    """A call like one that finished builds no new kernel: it runs without the check, so a capped
    process's later requests run as close to the cap as they would without it; a new shape is checked."""
    import torch

    from gpen_core.errors import OutOfMemory
    from gpen_core.platform import headroom

    monkeypatch.setattr(headroom, "capped", lambda: True)
    monkeypatch.setattr(headroom, "_finished", set())
    room = {"ok": True}
    monkeypatch.setattr(headroom, "can_map", lambda n: room["ok"])
    conv = torch.nn.Conv2d(4, 4, 3)
    x = torch.ones(1, 4, 8, 8)
    headroom._check(conv, (x,))
    headroom._finish(conv, (x,), conv(x))
    room["ok"] = False  # no room left now
    headroom._check(conv, (x,))  # the same call again: not checked
    with pytest.raises(OutOfMemory, match="Conv2d"):
        headroom._check(conv, (torch.ones(1, 4, 16, 16),))  # a new shape: new kernels, checked
    with pytest.raises(OutOfMemory):
        headroom._check(torch.nn.Conv2d(4, 8, 3), (x,))  # other weights: checked
    with pytest.raises(OutOfMemory):
        headroom._check(conv, (x.contiguous(memory_format=torch.channels_last),))  # another layout
