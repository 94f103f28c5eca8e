"""The advice measurements (gpen_core/advice.py) on tiny workloads: the code, not the numbers."""

from __future__ import annotations

import pytest

from gpen_core.hwcheck import advice
from gpen_core.hwcheck.advice import Side, Tip, TipResult, verdict


def _side(label: str, peak: int, secs: float, spread: float = 0.0) -> Side:
    return Side(label=label, process_peak_bytes=peak, request_peak_bytes=peak // 2, seconds=secs, spread=spread)


def test_verdict_reads_memory_first_then_time() -> None:
    assert verdict(_side("a", 1000, 1.0), _side("b", 500, 1.0))[0] == "helps"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1500, 1.0))[0] == "hurts"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1020, 1.0))[0] == "no effect"
    # Memory unchanged, time decides (beyond 25 %).
    assert verdict(_side("a", 1000, 2.0), _side("b", 1000, 1.0))[0] == "helps"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1000, 2.0))[0] == "hurts"
    # A 15 % time change with memory unchanged is within a busy machine's noise.
    assert verdict(_side("a", 1000, 10.0), _side("b", 1000, 8.5))[0] == "no effect"
    # A 20 % memory drop inside a 30 % run-to-run spread is noise.
    assert verdict(_side("a", 1000, 1.0, spread=0.3), _side("b", 800, 1.0))[0] == "no effect"
    # Sub-50 ms time differences never decide, whatever their share.
    assert verdict(_side("a", 1000, 0.001), _side("b", 1000, 0.01))[0] == "no effect"


def test_unmeasurable_tips_say_why_without_running_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advice, "cuda_available", lambda: False)
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[4, 5, 10, 11])
    assert [x.tip.number for x in r.results] == [4, 5, 10, 11]
    for x in r.results:
        assert x.verdict == "not measurable here"
        assert x.before is None and x.after is None
        assert len(x.why) > 20
    assert "GPU" in r.results[0].why
    assert "no CUDA GPU" in r.machine


def test_encode_and_cache_tips_measure_both_sides_in_child_processes() -> None:
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[7, 9], cache_files=500)
    enc, cache = r.results
    assert enc.before is not None and enc.after is not None
    assert (enc.before.label, enc.after.label) == ("PNG", "JPEG q95")
    assert enc.before.seconds > 0 and enc.after.seconds > 0
    # A child process of ours has imported numpy and OpenCV at least: tens of MB.
    assert enc.before.process_peak_bytes > 20e6
    assert cache.before is not None and "os.walk" in cache.why
    table = advice.format_table(r)
    assert table.count("\n| 7 |") == 1 and table.count("\n| 9 |") == 1
    assert "Measured on" in table


@pytest.mark.slow
def test_restore_tips_run_the_engine_on_a_tiny_photo() -> None:
    # faces-only vs balanced through the real Restorer (synthetic GPEN-BFR-512 weights).
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[6])
    (x,) = r.results
    assert x.before is not None and x.after is not None
    assert x.before.request_peak_bytes > 0
    assert x.verdict in ("helps", "no effect", "hurts")


def test_forward_child_runs_the_plain_generator() -> None:
    out = advice._run_child({"kind": "forward", "size": 64, "repeats": 1})
    assert out["finite"] is True and out["seconds"] > 0 and out["vram_reserved"] is None


def test_report_round_trips_through_json(tmp_path) -> None:
    tip = advice.TIPS[6]
    rep = advice.AdviceReport("m", "t", "w", 1, (TipResult(tip, "helps", "x", _side("a", 10, 1.0), _side("b", 5, 1.0)),
                                                TipResult(advice.TIPS[9], "not measurable here", "why")))
    p = tmp_path / "advice.json"
    advice.save_report(rep, p)
    back = advice.load_report(p)
    assert back == rep
    p.write_text("{not json")
    assert advice.load_report(p) is None
    assert isinstance(back.results[0].tip, Tip)
