"""A hardware-check measurement, in a fresh process (:func:`gpen_core.platform.worker.run`) or in this one.
One that runs out of memory (an error, or the kernel's killer) raises :class:`ModeFailed`: the check goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gpen_core.progress import Progress
from gpen_core.platform import worker

T = TypeVar("T")


class ModeFailed(Exception):
    """One measurement ran out of memory (the check goes on with the others)."""


def in_child(measure: Callable[[dict[str, Any], Progress], T], spec: dict[str, Any], report: Progress) -> T:
    """``measure(spec, progress)`` in a fresh process, its progress passed to ``report``; its value. An error of
    ours (:class:`gpen_core.errors.GPENError`) is raised again as itself, anything else as a RuntimeError."""
    out = worker.run(measure, spec, worker.report, on_event=worker.forward_progress(report))
    if isinstance(out, worker.Done):
        return out.value
    what = spec.get("mode") or spec.get("task") or "the backends"
    if out.oom:
        if out.how == "raised":
            raise ModeFailed(f"out of memory: {out.message}")
        raise ModeFailed(f"the measuring process was killed by signal {-(out.exitcode or 0)} "
                         "(most likely the kernel's out-of-memory killer)")
    if out.how == "raised":
        from gpen_core import errors

        cls = getattr(errors, out.error_type, None)
        if isinstance(cls, type) and issubclass(cls, errors.GPENError):
            raise cls(out.message)
        raise RuntimeError(f"measuring {what} failed in its worker process: {out.error_type}: {out.message}")
    raise RuntimeError(f"measuring {what} failed: its worker process {out.message}")


def run_measure(measure: Callable[[dict[str, Any], Progress], T], spec: dict[str, Any], report: Progress,
                isolate: bool) -> T:
    """``measure(spec, report)``: in a fresh process when ``isolate`` (:func:`in_child`), else in this one,
    where running out of memory raises :class:`ModeFailed` too."""
    if isolate:
        return in_child(measure, spec, report)
    from gpen_core.platform.oom import is_oom

    try:
        return measure(spec, report)
    except Exception as exc:
        if is_oom(exc) or type(exc).__name__ == "ResourceError":
            raise ModeFailed(f"out of memory: {exc}") from exc
        raise
