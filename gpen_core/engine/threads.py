"""PyTorch's threads on the CPU: at most the mode's cap and the cores other programs leave free (a team of threads
waits for its slowest member at every layer: :mod:`gpen_core.platform.cpu_share`)."""

from __future__ import annotations

import time
from types import TracebackType

from gpen_core.modes import MemoryMode
from gpen_core.platform import cpu_share

# How often a clip asks again: sampling costs ~5 ms; a load change is followed within this.
RECHECK_S = 2.0


def mode_threads(threads: int, cap: int | None) -> int:
    """The torch threads a CPU request runs with, from ``threads``, in a mode whose cap is ``cap`` (None: none)."""
    return min(threads, cap) if cap else threads


class TorchThreads:
    """Sets torch's intra-op threads for a ``with`` block, restored after; :attr:`notes` says, once, when other
    programs made it run fewer."""

    def __init__(self, mode: MemoryMode, device: str) -> None:
        self._cpu = device == "cpu"
        self._mode = mode
        self._before = 0
        self._want = 0
        self._checked = 0.0
        self._fewest: int | None = None  # threads at the busiest check
        self.notes: list[str] = []

    def __enter__(self) -> TorchThreads:
        import torch

        self._before = torch.get_num_threads()
        self._want = mode_threads(self._before, self._mode.threads) if self._cpu else self._before
        self._apply(force=True)
        return self

    def refresh(self) -> None:
        """Follow the machine's load: ask again when :data:`RECHECK_S` has passed since the last time."""
        if self._cpu and time.monotonic() - self._checked >= RECHECK_S:
            self._apply(force=False)

    def _apply(self, force: bool) -> None:
        import torch

        threads = self._want
        if self._cpu and self._want > 1:
            self._checked = time.monotonic()
            share = cpu_share.sample()
            if share is not None and share.free < threads:
                threads = share.free
                if self._fewest is None or threads < self._fewest:  # said once, for the busiest check
                    self._fewest, others = threads, share.others
                    self.notes[:] = [
                        f"PyTorch ran on {threads} of {self._want} threads: other programs were keeping {others} thread"
                        f"{'s' if others != 1 else ''} busy on this machine (a team of threads waits for its slowest "
                        "at every layer, so sharing a core slows the whole team)"]
        if force or torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        import torch

        if torch.get_num_threads() != self._before:
            torch.set_num_threads(self._before)
