"""Where a request's buffers come from: glibc's main heap, or mappings of their own (glibc's mmap threshold).

glibc's threshold rises with every mapped block freed, so a lighter mode's buffers after a heavier mode's stay
resident in the heap's holes: a request fixes it (:func:`map_blocks_from`), a network loads under
:func:`loading_mapped` (measured: docs/performance.md, "A lighter mode after a heavier one, in one process" and
"The same request, peaking higher now and then"). An operator's threshold is left alone. Process-wide: two
requests at once share the latest setting.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# The heavier modes and the upscaler's tiles (2 MiB measured the same; 4 MiB let `low` after `balanced` peak higher).
MAPPED_FROM = 1 << 20
# glibc's own ceiling for its rising threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
HEAP_UP_TO = 32 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
# The threshold this process last set through map_blocks_from (None: glibc's own, rising), which loads restore.
_policy: int | None = None


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
    global _policy
    if not _fix_threshold(nbytes):
        return False
    _policy = int(nbytes)
    return True


def _fix_threshold(nbytes: int) -> bool:
    """glibc's mmap threshold fixed at ``nbytes``, unless this is not glibc or the operator set one."""
    libc = glibc()
    operator_set = "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")
    return libc is not None and not operator_set and libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)) == 1


# Loads under way now (two visitors' requests may load at once): the last one to end restores the policy.
_loads = 0
_loads_lock = threading.Lock()


@contextmanager
def loading_mapped() -> Iterator[None]:
    """A network loads inside with every block of :data:`MAPPED_FROM` or more mapped on its own, so its transient
    copies go back to the OS when freed. When the last load under way ends, the policy the process set
    (:func:`map_blocks_from`), else :data:`HEAP_UP_TO` (glibc's threshold cannot be handed back, only fixed)."""
    global _loads
    with _loads_lock:
        _loads += 1
        mapped = _fix_threshold(MAPPED_FROM)
    try:
        yield
    finally:
        with _loads_lock:
            _loads -= 1
            if mapped and _loads == 0:
                _fix_threshold(HEAP_UP_TO if _policy is None else _policy)
