"""Under an address-space cap (``ulimit -v``), a PyTorch layer that would run at the cap's edge raises
:class:`~gpen_core.errors.OutOfMemory` instead: oneDNN maps each JIT kernel's code unchecked on a layer's first
call (SIGSEGV with under 256 KiB left). Only a first call of a kind, only in a capped process (a global hook costs
torch.compile its graphs). Measured: docs/files-and-limits.md, "Out of memory under a memory cap".
"""

from __future__ import annotations

import mmap
import resource
import threading

# The room a layer needs at its start: its output (4x its input for a 2x upsampling) and a reordered copy of its
# input; the constant covers the code buffers and an expanding layer's output (3 → 64 channels at 512 px).
PER_INPUT_BYTE = 5
EXTRA = 64 * 2**20

_installed = threading.Lock()
_handles: tuple = ()
# Calls that finished (see :func:`_signature`): their kernels are built, nothing new is mapped for them.
_finished: set[tuple] = set()
# The signature of each checked call still running, by (module, thread), for the post-hook to record.
_running: dict[tuple[int, int], tuple] = {}


def capped() -> bool:
    """Whether this process has an address-space cap (its soft ``RLIMIT_AS`` is finite)."""
    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def room_for(inputs: tuple) -> int:
    """Bytes of address space a layer called with ``inputs`` needs at its start (from its largest tensor input)."""
    largest = max((t.numel() * t.element_size() for t in inputs if hasattr(t, "element_size")), default=0)
    return PER_INPUT_BYTE * largest + EXTRA


def can_map(nbytes: int) -> bool:
    """Whether ``nbytes`` of address space can be mapped now (mapped with no access, then unmapped)."""
    try:
        mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE, prot=0).close()
    except OSError:
        return False
    return True


def _signature(module: object, inputs: tuple) -> tuple:
    """What decides the kernels a call builds: the layer's kind, weights' shapes and inputs' shape, type, strides."""
    own = getattr(module, "_parameters", {}).values()
    return (type(module), tuple(tuple(p.shape) for p in own if p is not None),
            tuple((tuple(t.shape), t.dtype, t.stride()) for t in inputs if hasattr(t, "stride")))


def _check(module: object, inputs: tuple) -> None:
    if not capped():
        return
    signature, key = _signature(module, inputs), (id(module), threading.get_ident())
    if signature in _finished:
        _running.pop(key, None)  # a call that raised left its entry; this one must not record it
        return
    need = room_for(inputs)
    if not can_map(need):
        from gpen_core.errors import OutOfMemory
        from gpen_core.platform.meter import format_bytes  # the budget's units

        raise OutOfMemory(f"the address-space cap (ulimit -v) leaves less than the {format_bytes(need)} that "
                          f"{type(module).__name__} may need: stopped before it rather than at the cap's edge")
    _running[key] = signature


def _finish(module: object, inputs: tuple, output: object) -> None:
    signature = _running.pop((id(module), threading.get_ident()), None)
    if signature is not None:
        _finished.add(signature)


def guard_layers() -> bool:
    """Check every PyTorch module's headroom before its first call of a kind when capped (idempotent); True if on."""
    global _handles
    if not capped():
        return bool(_handles)
    with _installed:
        if not _handles:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            _handles = (register_module_forward_pre_hook(_check), register_module_forward_hook(_finish))
    return True
