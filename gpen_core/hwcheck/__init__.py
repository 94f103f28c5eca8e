"""Around the engine: the hardware check, the measured advice, self-check and machine info.

The check measures what a fresh Restorer needs per memory mode on the standard workloads (:mod:`.workloads`):
:mod:`.runner` runs it, :mod:`.backends` times torch against OpenVINO, :mod:`.report` presents it; its records
and their store live in the engine, which reads them. Nothing at import: import the submodule you need.
"""
