"""Around the engine: the hardware check, the measured advice, self-check and machine info.

The hardware check ("how much memory do I need?", measured on this machine): for each
memory mode, a fresh :class:`~gpen_core.restorer.Restorer` (in a fresh worker process by
default) runs the standard workloads (:mod:`.workloads`) and records what the engine's own
PeakMeter saw. :mod:`.runner` runs it, :mod:`.backends` times torch against OpenVINO for
``--backend auto``, :mod:`.report` presents it; the records and their store live in the
engine (:mod:`gpen_core.engine.profile_records`, :mod:`gpen_core.engine.profile_store`),
which reads them. This package imports nothing at import: import the submodule you need.
"""
