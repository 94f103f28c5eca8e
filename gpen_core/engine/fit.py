"""Which memory mode fits: the one rule behind ``auto``, the weights panel and the hardware check's report.
Pure and light (no psutil, no torch): the app's views import it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpen_core.modes import MODES

# The photo a verdict on "which mode fits" speaks for (readiness, the hardware check's report): about 1 MP.
PANEL_PHOTO = (1280, 800)

# Keep this much of the free memory unused: other programs and allocator slack.
SAFETY_MARGIN = 0.8


def usable_bytes(free_bytes: int | None) -> int:
    """Bytes a request may plan to use out of ``free_bytes`` (0 when unknown)."""
    return int((free_bytes or 0) * SAFETY_MARGIN)


def fits(need_bytes: int, free_bytes: int | None) -> bool:
    """``need_bytes`` fits ``free_bytes`` less the margin; nothing runs in no memory, even a ~0 peak."""
    usable = usable_bytes(free_bytes)
    return usable > 0 and need_bytes <= usable


@dataclass(frozen=True)
class ModeFit:
    """One mode against the memory free now."""

    mode: str
    need_bytes: int
    fits: bool
    short_bytes: int  # how much more than the usable memory it needs (0 when it fits)
    passed_over: str = ""  # why it cannot run whatever the memory ("" when it can)

    @property
    def runnable(self) -> bool:
        return not self.passed_over


@dataclass(frozen=True)
class Ranking:
    """The candidate modes, best (highest rank) first, against ``free_bytes`` of ``binding`` memory."""

    modes: tuple[ModeFit, ...]
    free_bytes: int | None
    binding: str = "RAM"

    @property
    def best(self) -> ModeFit | None:
        """The highest-ranked runnable mode that fits, or None."""
        return next((m for m in self.modes if m.runnable and m.fits), None)

    @property
    def best_fitting(self) -> ModeFit | None:
        """The highest-ranked mode that fits, runnable or not (what to run here once its files are in)."""
        return next((m for m in self.modes if m.fits), None)

    @property
    def lightest(self) -> ModeFit:
        """The lowest-ranked runnable mode (the lowest of all when none is runnable): auto's last resort."""
        runnable = [m for m in self.modes if m.runnable]
        return (runnable or list(self.modes))[-1]

    @property
    def chosen(self) -> ModeFit:
        """What ``auto`` runs: :attr:`best`, else :attr:`lightest` (which may not fit)."""
        return self.best or self.lightest

    def above(self, mode: str) -> tuple[ModeFit, ...]:
        """The modes ranked above ``mode``, nearest first."""
        names = [m.mode for m in self.modes]
        return tuple(reversed(self.modes[: names.index(mode)])) if mode in names else ()


def rank(needs: Mapping[str, int], free_bytes: int | None, *, binding: str = "RAM",
         passed_over: Mapping[str, str] | None = None, candidates: Iterable[str] | None = None) -> Ranking:
    """Rank the pasting modes of ``needs`` (mode → bytes; or of ``candidates``) against ``free_bytes`` (None:
    nothing fits). ``passed_over``: mode → why it cannot run whatever the memory."""
    names = list(candidates) if candidates is not None else list(needs)
    usable = usable_bytes(free_bytes)
    skip = passed_over or {}
    out = []
    for name in sorted((n for n in names if MODES[n].paste), key=lambda n: -MODES[n].rank):
        need = int(needs[name])
        out.append(ModeFit(name, need, fits(need, free_bytes), max(0, need - usable), skip.get(name, "")))
    return Ranking(tuple(out), free_bytes, binding)
