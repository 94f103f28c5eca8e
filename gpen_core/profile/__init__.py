"""The hardware check: "how much memory do I need?", measured on this machine.

For each memory mode, a fresh :class:`~gpen_core.restorer.Restorer` (in a fresh worker
process by default) runs the standard workloads (:mod:`gpen_core.workloads`: an aligned
512 px face, a 12 MP photo with one face, a group photo) and records what the engine's
own PeakMeter saw: peak RAM and VRAM (allocated and reserved) above the process just
before its first request, seconds per face and total seconds.

- :mod:`.records`: the typed results (:class:`~.records.Profile`, ``ModeProfile``,
  ``WorkloadRun``), their JSON form, and how runs are summarised into them (pure);
- :mod:`.store`: the machine fingerprint, ``profile.json`` save/load, and
  :func:`~.store.measured` (what :mod:`gpen_core.budget` reads; pure, never runs the engine);
- :mod:`.runner`: :func:`~.runner.run_profile`, the only part that imports the Restorer
  (worker processes);
- :mod:`.backends`: on the CPU, torch against OpenVINO per generator and dtype the modes
  use, and for the parser and detectors they run (:mod:`gpen_core.ov_parse`,
  :mod:`gpen_core.ov_detect`), recorded for ``--backend auto``
  (:func:`gpen_core.ov_backend.record_speed`);
- :mod:`.report`: the table, chart rows, backend comparison and recommendation.

The command line is ``python -m gpen_core profile`` (:mod:`gpen_core.cli`).
This package imports nothing at import: import the submodule you need.
"""
