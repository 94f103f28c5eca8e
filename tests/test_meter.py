"""The peak meter measures this call's peak, by either method."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpen_core.meter import PeakMeter, current_rss, format_bytes


def _touch(nbytes: int) -> None:
    a = np.ones(nbytes // 8)  # ones, not zeros: the pages must really be resident
    time.sleep(0.05)  # give the sampler time to see it
    del a


@pytest.mark.parametrize("force_sampling", [False, True])
def test_peak_sees_a_transient_allocation(force_sampling: bool) -> None:
    with PeakMeter(force_sampling=force_sampling) as m:
        _touch(300_000_000)
    p = m.peaks
    assert p is not None
    assert p.method == ("sampling" if force_sampling else p.method)
    assert p.rss_delta_bytes >= 250_000_000
    assert p.vram_allocated_bytes is None or p.vram_allocated_bytes >= 0


def test_peak_is_per_call_not_process_lifetime() -> None:
    with PeakMeter() as big:
        _touch(400_000_000)
    with PeakMeter() as small:
        _touch(50_000_000)
    assert big.peaks and small.peaks
    # a lifetime high-water mark would report the 400 MB again
    assert small.peaks.rss_delta_bytes < 200_000_000
    assert big.peaks.rss_delta_bytes > 350_000_000


def test_vmhwm_is_used_where_the_kernel_allows_it() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("this kernel refuses /proc/self/clear_refs; the sampler is used instead")
    with PeakMeter() as m:
        pass
    assert m.peaks and m.peaks.method == "vmhwm"
    assert abs(m.peaks.baseline_rss_bytes - current_rss()) < 50_000_000


def test_format_bytes() -> None:
    assert format_bytes(None) == "n/a"
    assert format_bytes(1_234_000_000) == "1.23 GB"
    assert format_bytes(456_000_000) == "456 MB"
