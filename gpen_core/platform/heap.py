"""Where a request's buffers come from: glibc's main heap, or mappings of their own.

glibc's malloc serves a block of at least its *mmap threshold* from a mapping of its own, which
``free`` unmaps at once; smaller blocks come from the main heap. The threshold starts at 128 KiB
and rises to the size of every mapped block freed, up to 32 MiB (:data:`HEAP_UP_TO`), so after a
first request a request's tensors and images (a few MiB each) are carved out of the main heap,
between small objects that live on (Python's, torch's, oneDNN's). Reused from one request to the
next, those blocks cost no page faults; but when a heavier mode has run, the heap spans its
buffers (550-820 MiB of it, 100 MiB in use once its networks are released): ``malloc_trim`` hands
the free pages back, yet the holes stay, and a lighter mode's buffers land in them, each touching
fresh pages that stay resident after it frees them. Measured (torch 2.13 CPU, one thread, a 384 px
photo, the released architectures): ``low`` after ``balanced`` peaked at 536-567 MiB against
421-443 MiB for a fresh process running ``low``. Setting the threshold when the lighter mode starts
is too late: malloc looks in its free lists (the holes) before it considers a mapping.

So in a process that serves many modes (the app's shared Restorer) each request sets the threshold
for its mode (:attr:`gpen_core.modes.MemoryMode.heap_blocks`,
through :func:`map_blocks_from`): the heavier modes map every block of 1 MiB or more
(:data:`MAPPED_FROM`), the heap keeps only small objects and never spans their buffers, and
``low`` after ``balanced`` peaked at 462-463 MiB against 431-442 MiB fresh. ``balanced``'s own
peak fell too (749-776 → 647 MiB on a warm request, torch); the price is page faults, a mapped
block's pages zeroed by the kernel each time: ~0.5 s more CPU per ``balanced`` request on torch on
the AMX Xeon (1.32 → 1.83 s, one thread), none measurable when its networks run on OpenVINO, which
keeps its own buffers (0.85-0.91 s either way), 4 % more time for ``quality`` on a 12 MP photo
(docs/performance.md). ``low`` keeps glibc's usual ceiling (:data:`HEAP_UP_TO`): its buffers stay
small, and mapping them cost it 0.51-0.63 → 0.73-0.91 CPU seconds per request
(docs/performance.md), against its 0.7 s target; with that ceiling its CPU time is unchanged.

Once set, glibc's threshold stays fixed (mallopt(3)); a threshold the operator set
(``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES``) is left alone. Process-wide: two requests of
different modes at once in one process (two Restorers) share the latest setting, which changes
only where blocks come from.
"""

from __future__ import annotations

import ctypes
import functools
import os

# The heavier modes and the upscaler's tiles: every block of 1 MiB or more mapped on its own.
# 2 MiB measured the same peaks within 6 MiB; 4 MiB let `low` after `balanced` peak 30-50 MiB higher.
MAPPED_FROM = 1 << 20
# glibc's own ceiling for its rising threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): what a
# process settles at by itself once a request has freed a large mapped block.
HEAP_UP_TO = 32 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: elsewhere the threshold means something else or nothing
    except (OSError, AttributeError):
        return None
    return libc


def operator_set() -> bool:
    """Whether whoever started the process fixed glibc's mmap threshold themselves."""
    return "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")


def map_blocks_from(nbytes: int) -> bool:
    """From now on, blocks of ``nbytes`` or more get a mapping of their own (glibc's mmap threshold,
    fixed). True when set; False off glibc, when glibc refused, or when the operator set one."""
    libc = _glibc()
    if libc is None or operator_set():
        return False
    return libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)) == 1
