"""The out-of-memory ladder measures each attempt on its own.

A forced out-of-memory error in the first attempt, after it touched a big buffer:
the stepped-down result must report the lighter attempt's peak, not the failed
heavier one's, and list both attempts with their own peaks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine import pipeline
from gpen_core.restorer import Restorer, RestoreOptions

BIG = 1 << 30  # 1 GiB: far above what a 256 px generator call needs


@pytest.fixture()
def plenty_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """``quality`` must be tried as asked: the budget check sees plenty of free RAM."""
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))


def test_stepped_down_result_reports_its_own_attempts_peak_and_lists_both(
    gen256: Path, plenty_free: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pipeline.run_attempt

    def heavy_then_oom(models, device, req, *args, **kwargs):
        if req.mode.name == "quality":
            buf = np.ones(BIG, np.uint8)  # every page touched: resident
            assert buf[-1] == 1
            raise MemoryError("test: quality does not fit")
        return real(models, device, req, *args, **kwargs)

    monkeypatch.setattr(pipeline, "run_attempt", heavy_then_oom)
    face = np.full((256, 256, 3), 128, np.uint8)
    res = Restorer(device="cpu")(face, RestoreOptions(mode="quality", model=str(gen256), aligned=True))

    assert res.mode.name == "balanced"
    assert any("ran out of memory in quality" in n for n in res.notes)
    assert [(a.mode, a.outcome) for a in res.attempts] == [("quality", "out of memory"), ("balanced", "ok")]
    failed, ok = res.attempts
    assert failed.peaks.rss_delta_bytes >= 0.9 * BIG  # the failed attempt saw its buffer (less a few pages freed meanwhile)
    assert res.peaks == ok.peaks  # the result's figures are the attempt that made it
    # ... which never held the buffer: freed before its meter started
    assert ok.peaks.rss_delta_bytes < BIG // 2, ok.peaks
    assert ok.peaks.rss_bytes < failed.peaks.rss_bytes


def test_a_call_that_fits_has_one_attempt_whose_peaks_are_the_results(gen256: Path, plenty_free: None) -> None:
    face = np.full((256, 256, 3), 128, np.uint8)
    res = Restorer(device="cpu")(face, RestoreOptions(mode="low", model=str(gen256), aligned=True))
    assert [(a.mode, a.outcome) for a in res.attempts] == [("low", "ok")]
    assert res.attempts[0].peaks == res.peaks and res.peaks.rss_bytes > res.peaks.baseline_rss_bytes
