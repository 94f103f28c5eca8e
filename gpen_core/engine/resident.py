"""The networks a model cache holds: at most one of each kind (generator, detector, parser, upscaler),
each with the key it was loaded for and how to load it again.

:meth:`Resident.swap` frees the resident network of a kind before loading the new one, and loads
the previous one back when the new one fails (a rollback); what :meth:`Resident.set_aside` let go
stays known until its kind loads again, so a failed load rolls back to it too. Not thread-safe
(the Restorer's lock serialises it). Nothing heavy at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpen_core.engine.lifetime import Network
from gpen_core.errors import GPENError
from gpen_core.platform.oom import release

KINDS: tuple[Network, ...] = ("generator", "detector", "parser", "upscaler")


@dataclass
class Held:
    """One resident network, the key it was loaded for, and how to load it again (a rollback)."""

    key: tuple[Any, ...]  # what identifies it, its runtime and dtype last
    obj: Any  # the network; None in a record of one let go
    name: str
    build: Callable[[], Any]


class Resident:
    """At most one network of each kind (see the module docstring)."""

    def __init__(self) -> None:
        self._held: dict[str, Held | None] = dict.fromkeys(KINDS)
        # What set_aside let go, by kind, until that kind loads again: a load that fails rolls
        # back to it, as it would had it still been resident.
        self._set_aside: dict[str, Held] = {}

    def get(self, kind: str) -> Held | None:
        """The resident network of ``kind``, or None."""
        return self._held[_checked(kind)]

    def names(self) -> dict[str, str | None]:
        """Kind → the resident network's name (None: nothing of that kind)."""
        return {kind: held.name if held else None for kind, held in self._held.items()}

    def swap(self, kind: str, new: Held, device: str) -> None:
        """Free the resident ``kind`` and load ``new`` in its place; on failure load the previous one
        again (out of memory, the file gone or damaged meanwhile: then nothing stays loaded, the next
        request loads what it needs) and re-raise the first failure, with the second beside it."""
        previous = self._held[_checked(kind)]
        self._held[kind] = None
        back = self._set_aside.pop(kind, None) if previous is None else Held(previous.key, None, previous.name, previous.build)
        del previous
        release(device)
        try:
            new.obj = new.build()
            self._held[kind] = new
            # A load's transient copies (the checkpoint read, a random initialisation, the
            # channels-last copy) stay in glibc's heap once freed: handed back here, they do not
            # sit under the next stage's peak (the ResNet-50 detector: 259 MiB resident after its
            # load, 101 MiB after this; quality's one-photo detect stage then peaks lower).
            release(device)
        except Exception as exc:  # clean up and re-raise: the caller decides what the failure means
            release(device)
            if back is not None:
                try:
                    back.obj = back.build()
                    self._held[kind] = back
                except (GPENError, MemoryError, RuntimeError, OSError) as again:
                    shown = Path(back.name).stem if "/" in back.name or os.sep in back.name else back.name
                    exc.add_note(f"the previous {kind} {shown} could not be reloaded either: {again}")
            raise

    def set_aside(self, kind: str, device: str) -> Held:
        """Let the resident ``kind`` go, keeping how to load it again (a later failed load of its kind
        rolls back to it). Returns that record (its ``obj`` None)."""
        held = self._held[_checked(kind)]
        if held is None:
            raise ValueError(f"no resident {kind} to set aside")
        record = Held(held.key, None, held.name, held.build)
        self._set_aside[kind] = record
        del held
        self.drop(kind, device)
        return record

    def drop(self, kind: str, device: str) -> None:
        """Drop the resident ``kind`` and hand its memory back."""
        if self._held[_checked(kind)] is not None:
            self._held[kind] = None
            release(device)

    def free(self, device: str) -> None:
        """Drop every resident network and hand the memory back (nothing to roll back to afterwards)."""
        self._held = dict.fromkeys(KINDS)
        self._set_aside.clear()
        release(device)


def _checked(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"no resident model of kind {kind!r}")
    return kind
