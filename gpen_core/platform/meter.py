"""Measure one call's peak RAM and VRAM, say how it was measured, and say when it was shared.

RAM: ``5`` written to ``/proc/self/clear_refs`` resets the kernel's high-water mark (VmHWM), read after the
call ("vmhwm"); where that is refused a thread samples RSS every 2 ms ("sampling"; it can miss spikes). VRAM:
torch's peak stats, for a CUDA ``device`` only (a CPU meter never makes a CUDA context, hundreds of MB).
Both marks are process-wide: a meter hands the mark to every live meter before it resets it (nested meters
stay exact), and a call's peaks are ``shared`` when a meter overlapped it from another thread or another
Python thread moved memory meanwhile: 32 MB of page faults, or 50 ms of CPU (2% of a longer call) with 1 MB
of faults. Native worker threads (OpenMP, oneDNN, OpenVINO) work for the call: named only beside other work.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from types import TracebackType
from typing import Any

import psutil

from gpen_core.result import Peaks, RamMethod

_HWM = re.compile(rb"VmHWM:\s+(\d+)\s+kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+)\s+kB")

# Another thread's activity during a call that makes the call "shared" (see the module doc).
BUSY_CPU_S = 0.05
BUSY_CPU_FRACTION = 0.02
BUSY_FAULT_BYTES = 32 << 20
BUSY_MIN_FAULT_BYTES = 1 << 20
# A shared peak's note in plain words; the meter's own account stays in ``Peaks.shared`` (the JSON's peaks.shared).
SHARED_NOTE = ("other work in this app ran at the same time, so the peak may include some of its memory "
               "(the JSON's peaks.shared says which)")


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


def peak_rss() -> int:
    """This process's peak resident set size so far (the kernel's VmHWM), in bytes; the current RSS where /proc has none."""
    return _status_kb(_HWM) or current_rss()


def _reset_hwm(before: int, tries: int = 3) -> bool:
    """Reset the kernel's high-water mark (``before``: it, in bytes, read just before); True once /proc/self/status
    shows it reset: at the RSS, or below ``before`` (memory another thread freed since the reset leaves the mark above
    the RSS, but a mark that moved down was reset). Retried where neither shows."""
    for _ in range(tries):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            with open("/proc/self/status", "rb") as f:
                status = f.read()
        except OSError:
            return False
        hwm, rss = _HWM.search(status), _RSS.search(status)
        if hwm is None or rss is None:
            return False
        if int(hwm.group(1)) <= int(rss.group(1)) + 64 or int(hwm.group(1)) * 1024 < before:  # kB: a page or two of slack
            return True
    return False


class _Sampler(threading.Thread):
    NAME = "gpen-rss-sampler"
    INTERVAL_S = 0.002

    def __init__(self) -> None:
        super().__init__(name=self.NAME, daemon=True)
        self.peak = current_rss()
        self._stop_event = threading.Event()
        self._proc = psutil.Process()

    def run(self) -> None:
        while not self._stop_event.wait(self.INTERVAL_S):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, current_rss())


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# Python threads started while a meter measured (native id -> name): one that starts and ends inside a call
# is otherwise invisible at both ends of it.
_STARTED: dict[int, str] = {}
# Threads a measured call starts for itself (:func:`mark_call_worker`): their work is the call's.
_CALL_WORKERS: set[int] = set()


def mark_call_worker() -> None:
    """Declare the current thread a worker of the call that started it (use as a pool initializer)."""
    _CALL_WORKERS.add(threading.get_native_id())


def _started_hook(frame: Any, event: str, arg: Any) -> None:
    _STARTED[threading.get_native_id()] = threading.current_thread().name
    sys.setprofile(None)  # once per thread: no profiling cost after its first event


def _tasks() -> dict[int, tuple[float, int]] | None:
    """Every thread of this process (native ones too): id -> (CPU seconds, minor faults); None off Linux."""
    out: dict[int, tuple[float, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                cpu_ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                minflt = int(f.read().rsplit(b")", 1)[1].split()[7])
        except (OSError, IndexError, ValueError):
            continue  # it ended between the listing and the read
        out[int(tid)] = (cpu_ns / 1e9, minflt)
    return out


def _process_usage() -> tuple[float, int]:
    """(CPU seconds, minor faults) of the whole process, ended threads included."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


class _ThreadWatch:
    """What threads other than the measured one (``thread``, a native id) did between start and finish."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self.t0 = time.perf_counter()
        self.names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        self.tasks0 = _tasks()
        if self.tasks0 is not None:
            # The kernel reuses an ended thread's id (after pid_max, 32768 on many systems): a record of an ended
            # thread would pass a new thread of that id off as a call worker, or as no new thread at all.
            for tid in [k for k in _STARTED if k not in self.tasks0]:
                _STARTED.pop(tid, None)
            _CALL_WORKERS.intersection_update(self.tasks0)
        self.started0 = set(_STARTED)
        self.proc0 = _process_usage()

    def busy(self) -> list[str]:
        """Plain sentences, one per busy thread (empty when the call had the process to itself)."""
        tasks1 = _tasks()
        proc1 = _process_usage()
        if self.tasks0 is None or tasks1 is None:
            return []
        wall = time.perf_counter() - self.t0
        cpu_limit = max(BUSY_CPU_S, BUSY_CPU_FRACTION * wall)
        new = {k: v for k, v in list(_STARTED.items()) if k not in self.started0}
        names = {**self.names, **{t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}, **new}
        found: list[str] = []
        native = [0.0, 0]  # CPU seconds and faults of native threads that started during the call
        seen_cpu = seen_faults = 0.0
        for tid, (cpu1, f1) in tasks1.items():
            cpu0, f0 = self.tasks0.get(tid, (0.0, 0))
            cpu, faults = cpu1 - cpu0, f1 - f0
            seen_cpu += cpu
            seen_faults += faults
            if tid == self.thread or tid in _CALL_WORKERS:  # workers serve the call
                continue
            if tid not in names:
                # A native thread that started during the call (or a joined one lingering in /proc): the
                # call's own pools start so (OpenMP's team, OpenVINO's streams), so it is named only beside
                # other concurrent work (below).
                if tid not in self.tasks0 and _moved_memory(cpu, faults, cpu_limit):
                    native[0] += cpu
                    native[1] += faults
                continue
            if names[tid] == _Sampler.NAME:  # a meter's sampler (this one's too): its own cost, not memory work
                continue
            if _moved_memory(cpu, faults, cpu_limit):
                found.append(_busy_sentence(f"thread {names[tid]!r}", cpu, faults))
        # What the process did beyond every live thread was done by threads that ended meanwhile.
        gone_cpu = proc1[0] - self.proc0[0] - seen_cpu
        gone_faults = proc1[1] - self.proc0[1] - seen_faults
        if _moved_memory(gone_cpu, gone_faults, cpu_limit):
            ended = sorted(n for k, n in new.items() if k not in tasks1 and k not in _CALL_WORKERS)
            if not ended and any(k in _CALL_WORKERS for k in new if k not in tasks1):
                return found  # only the call's own workers ended: their work was the call's
            who = f"thread {', '.join(map(repr, ended))}" if ended else "threads"
            found.append(_busy_sentence(f"{who} that ended during it", gone_cpu, int(gone_faults)))
        if found and native[1]:
            found.append(_busy_sentence("native threads that started during it", native[0], int(native[1])))
        return found


def _thp_possible() -> bool:
    """Whether a page fault may map a 2 MB transparent huge page here (THP not "never")."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


# NumPy madvises big arrays for huge pages, so one fault may map 2 MB (a thread filling 400 MB showed ~202 faults):
# where THP is possible, faults worth BUSY_FAULT_BYTES at 2 MB each, with 10 ms of CPU, count too.
_HUGE = 2 << 20
_THP = _thp_possible()


def _moved_memory(cpu_s: float, faults: float, cpu_limit: float) -> bool:
    """Whether a thread's work during the call can have raised the process's resident peak."""
    if faults * _PAGE >= BUSY_FAULT_BYTES or (cpu_s >= cpu_limit and faults * _PAGE >= BUSY_MIN_FAULT_BYTES):
        return True
    return _THP and faults * _HUGE >= BUSY_FAULT_BYTES and cpu_s >= BUSY_CPU_S / 5


def _busy_sentence(who: str, cpu_s: float, faults: int) -> str:
    return f"{who} of this process worked alongside it ({cpu_s * 1000:.0f} ms CPU, {faults * _PAGE / 1e6:.0f} MB of page faults)"


_REGISTRY_LOCK = threading.Lock()
_ACTIVE: list["PeakMeter"] = []


def active_meters() -> int:
    """How many meters are measuring right now in this process (for tests and diagnostics)."""
    with _REGISTRY_LOCK:
        return len(_ACTIVE)


def _cuda_index(device: Any) -> int | None:
    """The CUDA device index ``device`` names ("cuda": the current one), or None (torch.cuda untouched)."""
    if device is None or not str(device).startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    index = torch.device(str(device)).index
    return int(torch.cuda.current_device()) if index is None else int(index)


class PeakMeter:
    """``with PeakMeter(device) as m: ...`` then ``m.peaks`` (a :class:`Peaks`).

    ``device``: where the call runs ("cpu", "cuda:1", a ``torch.device``, None for RAM only); ``force_sampling``
    samples even where VmHWM works (for tests and for comparing the two methods).
    """

    def __init__(self, device: Any = None, *, force_sampling: bool = False) -> None:
        self._device = device
        self._force_sampling = force_sampling
        self._sampler: _Sampler | None = None
        self._method: RamMethod = "vmhwm"
        self._baseline = 0
        self._baseline_vram: int | None = None
        self._cuda_index: int | None = None
        self._overlapped: dict[str, None] = {}  # why this call's peak is shared (an ordered set)
        self._watch: _ThreadWatch | None = None
        self._thread = 0
        self._hwm_floor = 0  # the mark as it stood when a later meter reset it
        self._vram_floor = (0, 0)  # (allocated, reserved) likewise
        self.peaks: Peaks | None = None

    @property
    def baseline_rss(self) -> int:
        """The process's resident set as the measured call began (bytes; 0 before ``__enter__``)."""
        return self._baseline

    def __enter__(self) -> "PeakMeter":
        self._cuda_index = _cuda_index(self._device)
        self._thread = me = threading.get_native_id()
        with _REGISTRY_LOCK:
            others = list(_ACTIVE)
            # threading.setprofile is process-wide: the thread-start hook is in only while a meter measures (and
            # never over another profiler).
            if not others and threading.getprofile() is None:
                threading.setprofile(_started_hook)
            overlap = "another measured call overlapped it from another thread"
            for m in others:
                if m._thread != me:
                    m._overlapped[overlap] = self._overlapped[overlap] = None
            _ACTIVE.append(self)
            if self._cuda_index is not None:
                import torch

                i = self._cuda_index
                torch.cuda.synchronize(i)
                alloc, res = int(torch.cuda.max_memory_allocated(i)), int(torch.cuda.max_memory_reserved(i))
                for m in others:  # hand them the peak the reset is about to forget
                    if m._cuda_index == i:
                        m._vram_floor = (max(m._vram_floor[0], alloc), max(m._vram_floor[1], res))
                torch.cuda.reset_peak_memory_stats(i)
                self._baseline_vram = int(torch.cuda.memory_allocated(i))
            self._baseline = current_rss()
            self._method = "sampling"
            if not self._force_sampling:
                hwm = _status_kb(_HWM)
                if hwm is not None:
                    # Handed over first: a reset whose check then fails has still reset the mark.
                    for m in others:
                        m._hwm_floor = max(m._hwm_floor, hwm)
                    if _reset_hwm(hwm):
                        self._method = "vmhwm"
            if self._method == "sampling":
                self._sampler = _Sampler()
                self._sampler.start()
        self._watch = _ThreadWatch(me)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._watch is not None:
            self._overlapped.update(dict.fromkeys(self._watch.busy()))
        vram_alloc = vram_res = None
        if self._cuda_index is not None:
            import torch

            torch.cuda.synchronize(self._cuda_index)
        with _REGISTRY_LOCK:
            if self._cuda_index is not None:
                vram_alloc = max(int(torch.cuda.max_memory_allocated(self._cuda_index)), self._vram_floor[0])
                vram_res = max(int(torch.cuda.max_memory_reserved(self._cuda_index)), self._vram_floor[1])
            # The call's start counts: RSS freed between the baseline read and the mark's reset (another thread's
            # clean-up) would otherwise leave a peak below the baseline.
            peak = max(self._sampler.stop() if self._sampler is not None else max(peak_rss(), self._hwm_floor), self._baseline)
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            if not _ACTIVE and threading.getprofile() is _started_hook:
                threading.setprofile(None)
            shared = list(self._overlapped)
        self.peaks = Peaks(
            rss_bytes=int(peak),
            baseline_rss_bytes=int(self._baseline),
            method=self._method,
            vram_allocated_bytes=vram_alloc,
            vram_reserved_bytes=vram_res,
            baseline_vram_bytes=self._baseline_vram,
            vram_device=None if self._cuda_index is None else f"cuda:{self._cuda_index}",
            shared="; ".join(shared) or None,
        )


def peak_vram_text(reserved_bytes: int | None) -> str:
    """", peak VRAM 900 MB reserved" for a result line ('' without a GPU): peak VRAM is always the reserved
    figure (the budget's and the hardware check's), never the smaller allocated one."""
    return "" if reserved_bytes is None else f", peak VRAM {format_bytes(reserved_bytes)} reserved"


def format_bytes(n: int | None) -> str:
    """'1.23 GB' / '456 MB' (decimal units, as in the README tables); 'n/a' for None."""
    if n is None:
        return "n/a"
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.0f} MB"
