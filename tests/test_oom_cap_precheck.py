"""Under an address-space cap, a mode that cannot fit is not started: no network runs at the cap's edge.

At the very edge of ``ulimit -v`` an allocation that fails inside oneDNN (PyTorch's CPU convolutions)
can kill the process: its JIT kernel for a transposed convolution is used unchecked after its code
buffer could not be mapped (SIGSEGV, caught once in 140 capped runs of test_oom's child). So under a
cap the engine compares what is left with the mode's estimate before the attempt, and steps down
without running it; the lightest mode is always tried, its layers each checking their room first
(tests/test_headroom.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpen_core.errors import ResourceError
from gpen_core.restorer import Restorer, RestoreOptions


def _spy_attempts(monkeypatch: pytest.MonkeyPatch, left: int | None) -> list[str]:
    """The modes pipeline.run_attempt really runs, with ``left`` bytes of address space under the cap."""
    from gpen_core.engine import pipeline
    from gpen_core.platform import oom

    monkeypatch.setattr(oom, "address_space_left", lambda: left)
    real, ran = pipeline.run_attempt, []

    def run_attempt(models, device, req, *a, **k):
        ran.append(req.mode.name)
        return real(models, device, req, *a, **k)

    monkeypatch.setattr(pipeline, "run_attempt", run_attempt)
    return ran


def test_a_mode_the_cap_cannot_hold_is_never_started(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _spy_attempts(monkeypatch, 500_000_000)  # below quality's and balanced's estimates, above low's
    res = Restorer(device="cpu", synthetic_weights=True)(np.zeros((512, 512, 3), np.uint8), RestoreOptions(mode="quality", aligned=True))
    assert ran == ["low"] and res.mode.name == "low"
    assert any("ran out of memory in quality" in n for n in res.notes), res.notes
    assert any("ran out of memory in balanced" in n for n in res.notes), res.notes


def test_the_lightest_mode_is_tried_whatever_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import pipeline

    ran = _spy_attempts(monkeypatch, 1)
    monkeypatch.setattr(pipeline, "run_attempt", lambda models, device, req, *a, **k: ran.append(req.mode.name) or (_ for _ in ()).throw(MemoryError()))
    with pytest.raises(ResourceError, match="out of memory in quality and then balanced and then low mode"):
        Restorer(device="cpu", synthetic_weights=True)(np.zeros((512, 512, 3), np.uint8), RestoreOptions(mode="quality", aligned=True))
    assert ran == ["low"]


def test_without_a_cap_every_mode_runs_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _spy_attempts(monkeypatch, None)
    res = Restorer(device="cpu", synthetic_weights=True)(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="balanced", aligned=True))
    assert ran == ["balanced"] and res.mode.name == "balanced"
