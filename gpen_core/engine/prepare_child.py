"""The child side of the app's background preparation: :func:`convert_ahead` in a process of its own.

:func:`prepare_in_child` runs in a :func:`gpen_core.platform.worker.run` child (niced by the
parent) and sends typed events as it goes: :class:`Planned` before anything is converted,
:class:`Started` when a network's conversion begins, a :class:`~gpen_core.platform.worker.Progress`
per step; it returns the :class:`~gpen_core.engine.prepare.PrepareReport`.

Why a process and not a thread of the app: a conversion keeps both cores busy for tens of
seconds, and a visitor's first restore (on torch meanwhile) competed with it for them. A
niced process yields the cores to the restore; a thread could be niced too, but the
runtime's worker threads it starts would stay niced for the app's whole life. The
conversion's memory is also the child's, not the app's, and is handed back when it exits.
The converted files land in the same on-disk cache the app's next load reads. The child
exits when the app does (the worker's rule), so a conversion never outlives the app that asked for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpen_core.platform import worker

if TYPE_CHECKING:
    from gpen_core.engine.prepare import PrepareReport


@dataclass(frozen=True)
class Planned:
    """What the child will prepare, in order: (token, label) pairs."""

    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Started:
    """The child began preparing ``token`` (those planned before it are done)."""

    token: str
    label: str


def prepare_in_child(models_dir: str | os.PathLike[str] | None) -> "PrepareReport":
    """:func:`gpen_core.engine.prepare.convert_ahead`, telling the parent through :func:`worker.send` as it goes."""
    from gpen_core.engine.prepare import convert_ahead

    return convert_ahead(models_dir=models_dir or None, progress=worker.report,
                         on_plan=lambda todo: worker.send(Planned(tuple((str(t), str(lab)) for t, lab in todo))),
                         on_start=lambda tok, label: worker.send(Started(tok, label)))
