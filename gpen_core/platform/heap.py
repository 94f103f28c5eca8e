"""Where a request's buffers come from: glibc's main heap, or mappings of their own.

glibc's *mmap threshold* rises with every mapped block freed (up to :data:`HEAP_UP_TO`), so a lighter
mode's buffers after a heavier mode's land in the main heap's holes and touch fresh pages that stay
resident. A process that serves many modes therefore sets it per request, before malloc looks in its
free lists (:attr:`gpen_core.modes.MemoryMode.heap_blocks`, through :func:`map_blocks_from`). Why and
measured: docs/performance.md, "A lighter mode after a heavier one, in one process". A threshold the
operator set (``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``) is left alone. Process-wide: two requests
at once share the latest setting.
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
def glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (its malloc tuning and trim exist there only); None elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: elsewhere the threshold means something else or nothing
    except (OSError, AttributeError):
        return None
    return libc


def map_blocks_from(nbytes: int) -> bool:
    """From now on, blocks of ``nbytes`` or more get a mapping of their own (glibc's mmap threshold,
    fixed). True when set; False off glibc, when glibc refused, or when the operator set one."""
    libc = glibc()
    operator_set = "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")
    if libc is None or operator_set:
        return False
    return libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)) == 1
