"""The advice measurements (gpen_core/advice.py) on tiny workloads: the code, not the numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpen_core.hwcheck import advice
from gpen_core.hwcheck.advice import Side, Tip, TipResult, verdict
from gpen_core.hwcheck.info import host_facts

from .conftest import ROOT


def _side(label: str, peak: int, secs: float, spread: float = 0.0) -> Side:
    """``peak`` in MB (above the measurement's 1 MB resolution)."""
    mb = 1_000_000
    return Side(label=label, process_peak_bytes=peak * mb, request_peak_bytes=peak * mb // 2, seconds=secs, spread=spread)


def test_verdict_reads_memory_first_then_time() -> None:
    assert verdict(_side("a", 1000, 1.0), _side("b", 500, 1.0))[0] == "helps"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1500, 1.0))[0] == "hurts"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1020, 1.0))[0] == "no effect"
    # Memory unchanged, time decides (beyond 25 %) for a claim about memory and time.
    both = "memory and time"
    assert verdict(_side("a", 1000, 2.0), _side("b", 1000, 1.0), claims=both)[0] == "helps"
    assert verdict(_side("a", 1000, 1.0), _side("b", 1000, 2.0), claims=both)[0] == "hurts"
    # A 15 % time change with memory unchanged is within a busy machine's noise.
    assert verdict(_side("a", 1000, 10.0), _side("b", 1000, 8.5), claims=both)[0] == "no effect"
    # A 20 % memory drop inside a 30 % run-to-run spread is noise.
    assert verdict(_side("a", 1000, 1.0, spread=0.3), _side("b", 800, 1.0))[0] == "no effect"
    # Sub-50 ms time differences never decide, whatever their share.
    assert verdict(_side("a", 1000, 0.001), _side("b", 1000, 0.01))[0] == "no effect"


def test_a_memory_claim_is_judged_on_memory_not_on_time() -> None:
    # Tip 7's case: "60 % less memory while writing"; memory rose 5 %, only the time fell.
    tip7 = next(t for t in advice.TIPS if t.number == 7)
    assert tip7.claims == "memory"
    v, why = verdict(_side("PNG", 100, 2.0), _side("JPEG q95", 105, 0.5), "process", tip7.claims)
    assert v == "no effect" and "+5\u00a0%" in why and "judged on memory" in why
    # ...and a claim of speed and memory still counts the time
    tip6 = next(t for t in advice.TIPS if t.number == 6)
    assert verdict(_side("a", 100, 2.0), _side("b", 105, 0.5), "process", tip6.claims)[0] == "helps"


def test_no_percentage_on_values_below_the_measurement_resolution() -> None:
    # Tip 9's case: times of 0.00 s on both sides, shown as "+47 %".
    v, why = verdict(_side("full", 50, 0.003), _side("empty", 50, 0.0044), "request")
    assert "%" not in why.split("time", 1)[1] and "under 0.01 s both times" in why
    tiny = Side("a", 400_000, 300_000, 0.2), Side("b", 600_000, 200_000, 0.2)
    v, why = verdict(*tiny, "request")
    assert v == "no effect" and "under 1 MB both times" in why and "-33\u00a0%" not in why


def test_progress_text_is_plain_and_counts_the_tips() -> None:
    text = advice.progress_text(2, 9, next(t for t in advice.TIPS if t.number == 1))
    assert text == "tip 1 (3 of 9): OMP_NUM_THREADS=2 / OPENBLAS_NUM_THREADS=2"


def test_unmeasurable_tips_say_why_without_running_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advice, "machine_facts", host_facts)
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[4, 5, 10, 11])
    assert [x.tip.number for x in r.results] == [4, 5, 10, 11]
    for x in r.results:
        assert x.verdict == "not measurable here"
        assert x.before is None and x.after is None
        assert len(x.why) > 20
    assert "GPU" in r.results[0].why
    assert "no CUDA GPU" in r.machine


def _ours(root: Path) -> list[Path]:
    return sorted(root.glob("gpen-advice-*"))


def test_encode_and_cache_tips_measure_both_sides_in_child_processes_sharing_one_scratch_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One run checks both: its five children (a Python with numpy and OpenCV each) are the cost.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[str] = []
    real = advice.run_side

    def spy(spec, env=None):
        seen.append(spec.get("scratch") or str(Path(spec.get("models_dir") or spec.get("root")).parent))
        return real(spec, env)

    monkeypatch.setattr(advice, "run_side", spy)
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[7, 9], cache_files=500)
    assert len(seen) == 5 and len(set(seen)) == 1 and Path(seen[0]).parent == tmp_path  # one folder for every child of the run
    assert _ours(tmp_path) == []  # ...removed when the run ends
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
def test_restore_tips_run_the_engine_on_a_tiny_photo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # faces-only vs balanced through the real Restorer, in three children (a warm-up and a side each). Their
    # generator is a 512 px GPEN an eighth of GPEN-BFR-512's width, given as the spec's model file: what is
    # checked is that the children restore, measure and are judged, which holds for any 512 px generator; each
    # child making and running the full-width random one was a third of the test's CPU time (26 s, now 17 s).
    from gpen_core.networks.arch import GPENConfig

    from .factories import write_checkpoint

    narrow = write_checkpoint(tmp_path / "narrow-512.pth", GPENConfig(512, style_dim=64, n_mlp=2, channel_multiplier=1,
                                                                      narrow=0.125), seed=2)
    plan_tips = advice.plan_tips

    def with_narrow_generator(*args, **kwargs):
        plans = plan_tips(*args, **kwargs)
        for plan in plans:  # the warm-ups are the same spec dicts as the sides'
            for spec, _ in getattr(plan, "specs", ()):
                spec["model"] = str(narrow)
        return plans

    monkeypatch.setattr(advice, "plan_tips", with_narrow_generator)
    r = advice.measure_tips(workload="tiny", repeats=1, tips=[6])
    (x,) = r.results
    assert x.before is not None and x.after is not None
    assert x.before.request_peak_bytes > 0 and x.after.request_peak_bytes > 0
    assert x.before.seconds > 0 and x.after.seconds > 0
    assert x.verdict in ("helps", "no effect", "hurts")


def test_forward_child_runs_the_plain_generator() -> None:
    out = advice.run_side({"kind": "forward", "size": 64, "repeats": 1})
    assert out is not None and out.seconds > 0 and out.vram_reserved_bytes is None


def test_report_round_trips_through_the_measurements_store(tmp_path) -> None:
    tip = advice.TIPS[6]
    rep = advice.AdviceReport("m", "t", "w", 1, (TipResult(tip, "helps", "x", _side("a", 10, 1.0), _side("b", 5, 1.0)),
                                                TipResult(advice.TIPS[9], "not measurable here", "why")))
    assert advice.load_report(tmp_path) is None
    where = advice.save_report(rep, tmp_path)
    assert where == tmp_path / "measurements.json" and not (tmp_path / "advice.json").exists()
    back = advice.load_report(tmp_path)
    assert back == rep
    assert isinstance(back.results[0].tip, Tip)
    saved = json.loads(where.read_text())
    saved["advice"] = {"machine": "m"}  # a damaged report is no report, never a crash
    where.write_text(json.dumps(saved))
    assert advice.load_report(tmp_path) is None


def test_a_measurement_killed_midway_leaves_a_folder_the_next_one_sweeps(tmp_path: Path) -> None:
    script = ("import sys\nfrom gpen_core.hwcheck import advice\n"
              "advice.measure_tips(workload='tiny', repeats=50, tips=[7], progress=lambda f, d: print(d, flush=True))\n")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "left" in line:  # a child has measured: the run is midway
                break
        left = _ours(tmp_path)
        assert [p.name.split("-")[2] for p in left] == [str(proc.pid)]
    finally:
        proc.kill()  # kill -9: no finally of the run's runs
        proc.wait()
    assert _ours(tmp_path) == left
    other = tmp_path / "gpen-advice-foreign"  # not named by a pid: not ours to judge
    other.mkdir()
    assert advice.sweep_scratch(tmp_path) == left
    assert _ours(tmp_path) == [other]


def test_a_restore_is_loaded_once_unmeasured_only_when_it_brings_a_network_not_loaded_yet(tmp_path: Path) -> None:
    tips = [next(t for t in advice.TIPS if t.number == n) for n in (6, 1, 3)]
    plans = advice.plan_tips(tips, {"workload": "tiny", "repeats": 1, "scratch": str(tmp_path)}, False, 10, True, tmp_path)
    warm = [[(s["mode"], s.get("model")) for s, _ in p.warm_ups] for p in plans]
    # balanced brings GPEN-BFR-512 (bfloat16) and the 256 px parser; faces-only loads only that generator, tip 1 only
    # balanced again; quality's float32 GPEN-BFR-512 and the 256 checkpoint are new
    assert warm == [[("balanced", None)], [], [("quality", "GPEN-BFR-512"), ("quality", "GPEN-BFR-256")]]
    assert plans[0].steps(2) == ["warm-up restore:balanced"] + ["restore:balanced", "restore:faces-only"] * 2


def test_the_tips_machine_line_names_the_cpu_as_the_hardware_check_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own flag list said 'no AVX2' for a CPU whose FMA and BF16 the hardware check's line names."""
    from gpen_core.hwcheck import info

    monkeypatch.setattr(info, "cpu_model", lambda: "An ARM CPU")
    monkeypatch.setattr(info, "cpu_flags", lambda: {"fp", "asimd", "fma", "bf16"})
    monkeypatch.setattr(advice, "machine_facts", info.host_facts)  # what the tips have when their child fails
    line = advice.measure_tips(workload="tiny", repeats=1, tips=[10]).machine
    assert line.startswith("An ARM CPU [fma, bf16; native bf16: no], ") and " threads, RAM " in line, line
    assert line.endswith(", no CUDA GPU")
    # The plan's answer, asked of a child that imports torch, wins over the flags (ARM's bf16 runs natively).
    monkeypatch.setattr(advice, "machine_facts", lambda: {**info.host_facts(), "native_bf16": True})
    assert "[fma, bf16; native bf16: yes], " in advice.measure_tips(workload="tiny", repeats=1, tips=[10]).machine


def test_the_tips_machine_line_names_the_gpu_as_the_hardware_check_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """It said only 'a CUDA GPU'; the check's line names the card and its memory, from the same facts."""
    gpu = {**host_facts(), "gpu_name": "A GPU", "vram_total_bytes": 8_000_000_000}
    monkeypatch.setattr(advice, "machine_facts", lambda: gpu, raising=False)
    assert advice.measure_tips(workload="tiny", repeats=1, tips=[10]).machine.endswith(", A GPU (8.00 GB)")


def test_the_tips_ask_a_child_what_the_plan_decides() -> None:
    import torch

    from gpen_core.networks.plan import choose_plan

    facts = advice.machine_facts()
    assert (facts["gpu_name"] is not None) is torch.cuda.is_available()
    assert facts["native_bf16"] is (choose_plan("cpu", "auto")[0].dtype == "bfloat16")
