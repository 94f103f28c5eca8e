"""Around the engine: the hardware check, the measured advice, self-check and machine info.

The hardware check measures, for each memory mode, what a fresh Restorer (in a fresh worker process by
default) needs on the standard workloads (:mod:`.workloads`): :mod:`.runner` runs it, :mod:`.backends` times
torch against OpenVINO for ``--backend auto``, :mod:`.report` presents it; its records and their store live
in the engine (:mod:`gpen_core.engine.profile_records`, :mod:`gpen_core.engine.profile_store`), which reads
them. This package imports nothing at import: import the submodule you need.
"""
