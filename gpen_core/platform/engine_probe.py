"""Whether the engine can be imported here, tried in a child process first (the CLI under a memory cap).
Not in :mod:`~gpen_core.platform.oom`: it runs :mod:`~gpen_core.platform.worker`, which reads oom (an import circle)."""

from __future__ import annotations

from gpen_core.platform import worker
from gpen_core.platform.oom import import_failure


def probe_engine_import(timeout_s: float = 300.0) -> Exception | None:
    """Import the engine in a child process (same limits) first; the error to show when it fails, None when it works.
    Under ``prlimit --data`` PyTorch's import can crash inside ``ctypes`` (SIGSEGV), which no ``except`` catches."""
    import signal

    try:  # the platform may not import the engine: the child runs it by reference
        out = worker.run("gpen_core.engine.pipeline:import_engine", timeout=timeout_s, quiet=True)
    except (OSError, MemoryError) as exc:  # cannot even start a child: memory, most likely
        return import_failure(MemoryError(f"cannot start a child process to load the engine: {exc}"))
    if isinstance(out, worker.Done):
        return None
    if out.how == "timed out":
        return import_failure(MemoryError(f"cannot start a child process to load the engine: it {out.message}"))
    if out.how == "killed" and out.exitcode is not None:
        try:
            sig = signal.Signals(-out.exitcode).name
        except ValueError:
            sig = f"signal {-out.exitcode}"
        # A crash while loading under a cap is the cap: say what the engine needs.
        return import_failure(MemoryError(f"the child process died with {sig}"), module="the engine")
    if out.how == "exited":
        # So is an exit before the import could report (OpenBLAS's exit(1), a MemoryError in the child's start-up);
        # a missing module is raised inside the import and reported as such.
        return import_failure(MemoryError(f"the child process {out.message}"), module="the engine")
    text = out.message or f"exit status {out.exitcode}"
    # The child's exception, of its kind: import_failure decides what a SystemError under a cap means.
    kind = MemoryError if out.oom or out.error_type.endswith("MemoryError") else (
        SystemError if out.error_type.endswith("SystemError") else ImportError)
    return import_failure(kind(text))
