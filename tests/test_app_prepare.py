"""The app converts for OpenVINO in the background after start: the page says so, and a restore meanwhile runs on torch and says why."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

import app
from gpen_core.engine import prepare
from gpen_app import preparation
from gpen_app.app_state import Policy
from gpen_core.runtimes.openvino import generator as ov_backend

from gpen_core.modes import MODES

from .conftest import ROOT, shared_path
from .factories import low_on_openvino

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")


@pytest.fixture(autouse=True)
def _server_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(app.STATE, "policy", Policy())
    monkeypatch.setattr(app.STATE, "preparation", None)
    monkeypatch.setattr(app, "TEMP_ROOT", tmp_path / "app-temp")


def _fake(done: bool, status: str = "not started", report: prepare.PrepareReport | None = None) -> SimpleNamespace:
    ev = threading.Event()
    if done:
        ev.set()
    return SimpleNamespace(done=ev, status=status, report=report)


def test_status_line_while_converting_then_ready_then_failures() -> None:
    assert preparation.status_markdown(None) == "" and not preparation.running(None)
    starting = _fake(False)
    assert "finding the networks to convert" in preparation.status_markdown(starting)  # never "not started"
    assert preparation.running(starting)
    busy = _fake(False, "OpenVINO: preparing GPEN-BFR-512 (float32) (1 of 2) — restores meanwhile run on torch and say so")
    line = preparation.status_markdown(busy)
    assert "preparing GPEN-BFR-512" in line and "on torch" in line and "once" in line
    ready = _fake(True, report=prepare.PrepareReport(converted=["GPEN-BFR-512 (float32)"], cached=["the 512 px parser (float32)"],
                                                     failed=["the resnet50 detector: out of disk"]))
    line = preparation.status_markdown(ready)
    assert not preparation.running(ready)
    assert "OpenVINO ready for GPEN-BFR-512 (float32), the 512 px parser (float32)" in line
    assert "Could not convert the resnet50 detector: out of disk: that network runs on torch" in line
    assert preparation.status_markdown(_fake(True, report=prepare.PrepareReport())) == ""  # nothing to tell
    assert "error" in preparation.status_markdown(_fake(True, report=None))  # the thread raised


def test_nothing_starts_for_a_remote_backend_or_a_cuda_device() -> None:
    def never() -> None:
        raise AssertionError("a remote backend must not build the local restorer")

    assert preparation.start_background(never, remote=True) is None
    assert preparation.start_background(lambda: SimpleNamespace(device="cuda", models_dir=None)) is None


def test_started_on_cpu_it_runs_in_the_background_and_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not niced here (test_prepare checks the niceness): in the full suite a niced child waited 20 s behind
    # the other work sharing its worker's core.
    monkeypatch.setattr(prepare.BackgroundPreparation, "NICENESS", 0)
    prep = preparation.start_background(lambda: SimpleNamespace(device="cpu", models_dir=tmp_path))
    assert prep is not None
    assert prep.done.wait(120)
    # an empty models folder: nothing to convert, so the page shows nothing and the timer stops
    assert prep.report is not None and prep.report.converted == [] and prep.report.failed == []
    assert preparation.status_markdown(prep) == "" and not preparation.running(prep)


def test_the_page_handler_shows_the_line_and_stops_its_timer_when_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.STATE, "preparation", _fake(False, "OpenVINO: preparing the 256 px parser (float32) (2 of 3)"))
    md, timer = app.preparation_status()
    assert "preparing the 256 px parser" in md
    assert isinstance(timer, gr.Timer) and timer.active
    monkeypatch.setattr(app.STATE, "preparation", _fake(True, report=prepare.PrepareReport(converted=["GPEN-BFR-256 (float32)"])))
    md, timer = app.preparation_status()
    assert "OpenVINO ready for GPEN-BFR-256" in md and not timer.active
    monkeypatch.setattr(app.STATE, "preparation", None)  # tests, a Ray backend: no line, no ticking
    md, timer = app.preparation_status()
    assert md == "" and not timer.active


@needs_openvino
def test_a_restore_during_the_background_conversion_runs_on_torch_and_its_panel_says_why(
    tmp_path: Path, gen256: Path, _isolated_models_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "models"
    home.mkdir()
    (home / "GPEN-BFR-256.pth").symlink_to(gen256)
    (home / "detection_mobilenet0.25_Final.pth").symlink_to(shared_path("weights", "detection_mobilenet0.25_Final.pth"))
    monkeypatch.setenv("GPEN_HOME", str(home))
    # auto would run this generator on OpenVINO here (measured faster; low allowed to), but another thread is converting it
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    monkeypatch.setitem(MODES, "low", low_on_openvino())
    release = threading.Event()
    converter = threading.Thread(target=release.wait, daemon=True)
    converter.start()
    tok = prepare.token("generator", "GPEN-BFR-256")
    with prepare._LOCK:
        prepare._CONVERTING[tok] = converter
    try:
        _, _, md, _, record = app.restore(str(EXAMPLE), "low", "default", "default", 1.0, 0.9, 50, False)
    finally:
        with prepare._LOCK:
            prepare._CONVERTING.pop(tok, None)
        release.set()
        converter.join()
    assert record["backend"] == "torch"
    assert any("converted to OpenVINO in the background" in n and "ran it on torch" in n for n in record["notes"])
    assert "converted to OpenVINO in the background" in md  # the panel the visitor reads says it too
    assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # the request converted nothing itself


def test_a_shared_servers_conversion_failures_name_its_folders_by_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed conversion's line is read by every visitor: on a shared server its error names the models folder by
    role, as the server's other error messages do (docs/files-and-limits.md); a local app keeps the full path."""
    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    monkeypatch.setenv("GPEN_HOME", str(models))
    failed = f"the resnet50 detector: cannot write {models}/openvino/retinaface-resnet50 (Permission denied)"
    for done in (True, False):  # the line at the end, and the status while the others still convert
        prep = _fake(done, "OpenVINO: could not convert " + failed, prepare.PrepareReport(failed=[failed]))
        for shared in (True, False):
            monkeypatch.setattr(app.STATE, "policy", Policy(shared=shared))
            monkeypatch.setattr(app.STATE, "preparation", prep)
            line = app.preparation_status()[0]
            assert "Permission denied" in line and (str(models) in line) is not shared, line
            # the role's brackets escaped: the page's Markdown renders HTML, and would hide a bare <models folder>
            assert (r"\<models folder\>/openvino/retinaface-resnet50" in line) is shared, line
