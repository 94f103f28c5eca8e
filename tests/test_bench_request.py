"""benchmarks/bench_request.py --stages: it wraps the engine's stage functions by name, so a renamed stage
must fail here, not in the middle of a benchmark run (docs/performance.md's per-stage table comes from it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_request  # noqa: E402


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_every_stage_it_wraps_exists_and_a_stage_reports_its_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import pipeline
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.faces import photo
    from gpen_core.images import decode

    for owner, attrs in ((pipeline, ["decode"]), (decode, ["encode_image"]), (ModelCache, ["generator", "parser", "detector"]),
                         (photo, ["_restore_checked", "face_mask", "warp_piece", "compose"])):
        for attr in attrs:  # put back after the test: install() replaces them for the whole process
            monkeypatch.setattr(owner, attr, getattr(owner, attr))
    profiler = bench_request.StageRSS()
    profiler.install()
    assert getattr(photo._restore_checked, "_stage_rss", False) and getattr(pipeline.decode, "_stage_rss", False)
    from gpen_core.platform.meter import current_rss

    before = current_rss()
    with profiler.stage("restore"):
        block = bytearray(64 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1
    assert profiler.table()["restore"] >= before + 0.9 * len(block)  # the stage's own 64 MB, not only the process's
