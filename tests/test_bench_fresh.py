"""benchmarks/bench.py judges the targets on a fresh install (what auto picks with no hardware check), beside the checked figures."""

from __future__ import annotations

import os
import sys

import pytest

from gpen_core.runtimes.openvino import defaults
from gpen_core.runtimes.openvino import generator as ov_backend

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402

ZEN4 = {"avx2", "avx512f", "avx512_bf16"}


def _row(size: int, path: str, s: float, plain: float) -> dict:
    return {"size": size, "path": path, "median_s": s, "ratio": plain / s, "max_abs_dev": 1e-6 if "bf16" not in path else 1e-3,
            "psnr_db": 140.0 if "bf16" not in path else 75.0}


FORWARD = [_row(512, "plain", 4.0, 4.0), _row(512, "fast", 1.25, 4.0), _row(512, "ov", 0.83, 4.0),
           _row(512, "fast-bf16", 0.65, 4.0), _row(512, "ov-bf16", 0.41, 4.0),
           _row(256, "plain", 0.4, 0.4), _row(256, "fast", 0.1, 0.4), _row(256, "ov", 0.2, 0.4)]


@pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")
def test_the_fresh_plan_is_the_per_kind_default_even_where_the_shell_turned_defaults_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "cpu_flags", lambda: set(ZEN4))
    assert os.environ.get("GPEN_OPENVINO_DEFAULTS") == "0"  # the suite's setting (conftest)
    plan = bench.fresh_install_plan(["quality", "low"])
    assert os.environ.get("GPEN_OPENVINO_DEFAULTS") == "0"  # put back
    # Zen 4: GPEN-BFR-512 float32 was measured faster on OpenVINO, -256 float32 on torch
    assert plan["quality"]["backend"] == "openvino" and plan["quality"]["dtype"] == "float32"
    assert "Zen 4" in plan["quality"]["why"] and "not yet measured on this machine" in plan["quality"]["why"]
    assert plan["low"]["backend"] == "torch" and "Zen 4" in plan["low"]["why"]
    # an AVX2-only CPU: 256 float32 was measured faster on OpenVINO there, but low keeps to torch under auto
    monkeypatch.setattr(defaults, "cpu_flags", lambda: {"avx2", "fma"})
    low = bench.fresh_install_plan(["low"])["low"]
    assert low["backend"] == "torch" and "keeps to PyTorch under auto" in low["why"]


def test_targets_are_judged_on_the_fresh_install_with_the_checked_figure_beside() -> None:
    fresh = {"quality": {"backend": "torch", "dtype": "float32", "why": "no measurement"},
             "balanced": {"backend": "openvino", "dtype": "bfloat16", "why": "measured on Zen 4"},
             "low": {"backend": "torch", "dtype": "float32", "why": "no measurement"}}
    rows = {t.what: t for t in bench.targets(FORWARD, [], None, None, "avx512_bf16", fresh, [])}
    quality = rows["GPEN-BFR-512 per face, `quality` (exact float32)"]
    # fresh install runs torch: 4.0 / 1.25 = 3.2×, below 4.5×, although OpenVINO (4.8×) would meet it after the check
    assert quality.met is False
    assert "fresh install: fast (torch)" in quality.measured and "**3.20×**" in quality.measured
    assert "after the hardware check: ov (openvino)" in quality.measured and "**4.82×**" in quality.measured
    balanced = rows["GPEN-BFR-512 per face, `balanced` (bfloat16)"]
    assert balanced.met is True and "fresh install: ov-bf16 (openvino)" in balanced.measured  # 9.76× ≥ 8×


def test_the_out_of_box_table_has_both_columns_per_mode() -> None:
    fresh = {"quality": {"backend": "torch", "dtype": "float32", "why": "no measurement"}}
    req = {"mode": "quality", "rows": [{"total_s": 2.0, "rss": 900 * 2**20}]}
    table = bench.out_of_box_table(FORWARD, fresh, {"quality": "openvino"}, [req], [dict(req, rows=[{"total_s": 1.5, "rss": 950 * 2**20}])])
    line = table.splitlines()[2]
    assert line.startswith("| quality | torch float32 (no measurement) | 1.250 s (3.2×) | 2.00 s | 900 MiB | openvino float32 | 0.830 s (4.8×) | 1.50 s | 950 MiB |")


def test_the_memory_target_is_judged_on_the_highest_cold_process_peak_when_one_shot_ran() -> None:
    fresh = {"low": {"backend": "torch", "dtype": "float32", "why": "no measurement"}}
    warm = {"mode": "low", "rows": [{"total_s": 0.4, "rss": 470 * 2**20}], "import_rss": 250 * 2**20,
            "dtype": "float32", "detector": "mobilenet0.25"}

    def low(peaks_mib: list[int]) -> bench.Target:
        shot = {"mode": "low", "peak": peaks_mib[-1] * 2**20, "peaks": [p * 2**20 for p in peaks_mib], "total_s": 1.0}
        rows = bench.targets(FORWARD, [], None, None, "avx512_bf16", fresh, [warm], [shot])
        return next(t for t in rows if t.what.endswith("`low`"))

    # every cold process under 450 MiB: met, although the app's way (models kept) peaked at 470
    ok = low([430, 441, 428])
    assert ok.met is True and "**441 MiB** peak, the highest of 3 processes" in ok.measured
    assert "networks kept loaded (the app): 470 MiB" in ok.measured
    # one process over: not met (the highest, not the median, is judged)
    assert low([430, 455, 428]).met is False
    # without the one-shot runs the warm request's peak is judged, as before
    plain = next(t for t in bench.targets(FORWARD, [], None, None, "avx512_bf16", fresh, [warm]) if t.what.endswith("`low`"))
    assert plain.met is False and "470 MiB peak" in plain.measured
