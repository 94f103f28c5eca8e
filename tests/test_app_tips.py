"""The Hardware check tab's "Tips, measured here": the saved table, the measurement, the gate."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

import app
from gpen_app.app_state import Policy
from gpen_core.hwcheck import advice


def test_tips_panel_says_how_to_measure_until_a_report_is_saved(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    assert "Not measured on this machine yet" in app.saved_tips().markdown
    report = advice.AdviceReport("this machine", "2026-12-03T10:00:00", "w", 1,
                                 (advice.TipResult(advice.TIPS[10], "not measurable here", "this machine has no swap"),))
    advice.save_report(report)
    shown = app.saved_tips().markdown
    assert "2026-12-03T10:00:00" in shown and "| 11 |" in shown and "not measurable here" in shown


def test_measuring_the_tips_saves_the_table_the_page_shows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    monkeypatch.setattr(app.STATE, "policy", Policy())
    real = advice.measure_tips
    monkeypatch.setattr(advice, "measure_tips", lambda progress=None: real(workload="tiny", repeats=1, tips=[7, 11], progress=progress))
    md = app.measure_tips(progress=lambda f, desc="": None)
    assert "| 7 |" in md and "PNG" in md
    assert advice.load_report() is not None
    assert "| 7 |" in app.saved_tips().markdown


def test_tips_are_off_on_a_shared_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))
    # the page opens with the button off and the reason where "Press the button" was (a press was then refused)
    button = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "tips-button")
    load = next(d for d in app.demo.fns.values() if button._id in [o._id for o in d.outputs])
    shown, state = load.fn()
    assert state["interactive"] is False and "Press the button" not in shown and "--allow-hardware-check" in shown
    with pytest.raises(gr.Error) as e:
        app.measure_tips(progress=lambda f, desc="": None)
    assert "--allow-hardware-check" in str(e.value.message)
    monkeypatch.setattr(app.STATE, "policy", Policy())
    assert load.fn()[1]["interactive"] is True


def test_tips_progress_is_plain_text_with_no_frozen_counter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    monkeypatch.setattr(app.STATE, "policy", Policy())
    real = advice.measure_tips
    monkeypatch.setattr(advice, "measure_tips", lambda progress=None: real(workload="tiny", repeats=1, tips=[1, 10, 11], progress=progress))
    monkeypatch.setattr(advice, "machine_facts", lambda: {"cpu_model": "a CPU"})  # no child: the machine is not what it checks
    monkeypatch.setattr(advice, "_measure_plan", lambda plan, *a: advice.TipResult(plan.tip, "not measurable here", "stub"))
    seen: list[str] = []
    app.measure_tips(progress=lambda f, desc="": seen.append(desc))
    assert seen[0] == "tip 1 (1 of 3): OMP_NUM_THREADS=2 / OPENBLAS_NUM_THREADS=2"
    assert all("`" not in d and "so far" not in d for d in seen), seen
