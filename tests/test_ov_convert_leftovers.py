"""A killed OpenVINO conversion leaves a ``.convert-*`` folder; the next conversion removes it, never a live one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpen_core.runtimes.openvino.base import clean_stale_conversions


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_folders_of_dead_or_old_conversions_go_and_live_ones_stay(tmp_path: Path) -> None:
    model = tmp_path / "GPEN-BFR-512-0123456789abcdef"
    model.mkdir()
    killed = model / f".convert-{_dead_pid()}-abc123"
    live = model / f".convert-{os.getpid()}-def456"
    old_style = model / ".convert-k2j3h4"  # no pid in its name
    fresh_old_style = model / ".convert-zz9911"
    for d in (killed, live, old_style, fresh_old_style):
        d.mkdir()
        (d / "model.bin").write_bytes(b"\0" * 1024)
    hour_ago = time.time() - 2 * 3600
    os.utime(old_style, (hour_ago, hour_ago))
    finished = model / "ov2025.1"  # a finished conversion is not a leftover
    finished.mkdir()

    removed = clean_stale_conversions(tmp_path)
    assert sorted(p.name for p in removed) == sorted([killed.name, old_style.name])
    assert sorted(p.name for p in model.iterdir()) == sorted([live.name, fresh_old_style.name, "ov2025.1"])


def test_save_ir_sweeps_before_it_converts(tmp_path: Path, monkeypatch) -> None:
    import pytest

    pytest.importorskip("openvino", reason="needs OpenVINO (requirements.txt)")
    import openvino as ov
    from openvino import opset13 as ops

    from gpen_core.runtimes.openvino.base import save_ir

    left = tmp_path / "other-model-0000" / f".convert-{_dead_pid()}-aaaaaa"
    left.mkdir(parents=True)
    x = ops.parameter([1, 3], name="x")
    model = ov.Model([ops.relu(x)], [x], "tiny")
    final = tmp_path / "tiny-1111" / "ov-test"
    save_ir(model, final, {"what": "test"}, time.perf_counter())
    assert (final / "model.xml").is_file() and not left.exists()
    assert [p.name for p in final.parent.iterdir()] == ["ov-test"]  # its own temporary folder went too
