"""Measure one call's peak RAM and VRAM, and say how it was measured.

RAM: on Linux the kernel keeps the process's resident high-water mark (VmHWM);
writing ``5`` to ``/proc/self/clear_refs`` resets it to the current RSS, so the
mark read after the call is exactly this call's peak ("vmhwm"). Where that is
refused (other kernels, sandboxes, macOS, Windows) a thread samples RSS with
psutil every 2 ms ("sampling"), which can miss spikes shorter than that.

VRAM: ``torch.cuda.reset_peak_memory_stats`` before and ``max_memory_allocated``
/ ``max_memory_reserved`` after, when CUDA is in use.

The meter is process-wide: the Restorer runs one call at a time under its lock,
so concurrent requests never contaminate each other's peaks.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from types import TracebackType

import psutil

from .result import Peaks, RamMethod

_HWM = re.compile(rb"VmHWM:\s+(\d+)\s+kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+)\s+kB")


def _status_kb(pattern: re.Pattern[bytes]) -> int | None:
    try:
        with open("/proc/self/status", "rb") as f:
            m = pattern.search(f.read())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def current_rss() -> int:
    """Resident set size of this process now, in bytes."""
    return psutil.Process().memory_info().rss


def _reset_hwm() -> bool:
    """Reset the kernel's high-water mark; True when it demonstrably worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = _status_kb(_HWM), _status_kb(_RSS)
    # After a reset the mark equals the current RSS (give it a page or two of slack).
    return hwm is not None and rss is not None and hwm <= rss + 64 * 1024


class _Sampler(threading.Thread):
    def __init__(self, interval_s: float = 0.002) -> None:
        super().__init__(name="gpen-rss-sampler", daemon=True)
        self.interval_s = interval_s
        self.peak = current_rss()
        self._stop_event = threading.Event()
        self._proc = psutil.Process()

    def run(self) -> None:
        while not self._stop_event.is_set():
            rss = self._proc.memory_info().rss
            if rss > self.peak:
                self.peak = rss
            time.sleep(self.interval_s)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, current_rss())


def _cuda():
    """torch.cuda if torch is already imported and CUDA is initialised-capable, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


class PeakMeter:
    """``with PeakMeter() as m: ...`` then ``m.peaks`` (a :class:`Peaks`).

    ``force_sampling`` uses the psutil sampler even where VmHWM works (for tests
    and for comparing the two methods).
    """

    def __init__(self, *, cuda: bool = True, force_sampling: bool = False) -> None:
        self._want_cuda = cuda
        self._force_sampling = force_sampling
        self._sampler: _Sampler | None = None
        self._method: RamMethod = "vmhwm"
        self._baseline = 0
        self._baseline_vram: int | None = None
        self.peaks: Peaks | None = None

    def __enter__(self) -> "PeakMeter":
        cuda = _cuda() if self._want_cuda else None
        if cuda is not None:
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
            self._baseline_vram = int(cuda.memory_allocated())
        self._baseline = current_rss()
        if self._force_sampling or not _reset_hwm():
            self._method = "sampling"
            self._sampler = _Sampler()
            self._sampler.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        cuda = _cuda() if self._want_cuda else None
        vram_alloc = vram_res = None
        if cuda is not None and self._baseline_vram is not None:
            cuda.synchronize()
            vram_alloc = int(cuda.max_memory_allocated())
            vram_res = int(cuda.max_memory_reserved())
        if self._sampler is not None:
            peak = self._sampler.stop()
        else:
            peak = _status_kb(_HWM) or current_rss()
        self.peaks = Peaks(
            rss_bytes=int(peak),
            baseline_rss_bytes=int(self._baseline),
            method=self._method,
            vram_allocated_bytes=vram_alloc,
            vram_reserved_bytes=vram_res,
            baseline_vram_bytes=self._baseline_vram,
        )


def format_bytes(n: int | None) -> str:
    """'1.23 GB' / '456 MB' (decimal units, as in the README tables); 'n/a' for None."""
    if n is None:
        return "n/a"
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.0f} MB"
