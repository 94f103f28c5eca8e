"""Convert ahead: `download` and the app convert what auto runs on OpenVINO before a request waits for it."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gpen_core.engine import prepare
from gpen_core.engine.model_cache import ModelCache
from gpen_core.modes import MODES
from gpen_core.options import RestoreOptions
from gpen_core.runtimes.openvino import generator as ov_backend

from . import worker_jobs as jobs
from .conftest import ROOT, shared_path
from .factories import low_on_openvino

LOW_OV = low_on_openvino()

needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")


@pytest.fixture()
def home(tmp_path: Path, gen256: Path) -> Path:
    (tmp_path / "GPEN-BFR-256.pth").symlink_to(gen256)
    return tmp_path


def _hold(tok: str) -> tuple[threading.Event, threading.Thread]:
    """Another live thread that owns ``tok``, as a background conversion would."""
    release = threading.Event()
    t = threading.Thread(target=release.wait, daemon=True)
    t.start()
    with prepare._LOCK:
        prepare._CONVERTING[tok] = t
    return release, t


def test_busy_note_only_for_another_live_thread() -> None:
    tok = prepare.token("generator", "GPEN-BFR-256")
    assert prepare.busy_note(tok, "x") is None
    release, t = _hold(tok)
    try:
        note = prepare.busy_note(tok, "the generator GPEN-BFR-256")
        assert note and "background" in note and "ran it on torch" in note
        with prepare._LOCK:  # the converting thread itself is never told to wait for itself
            prepare._CONVERTING[tok] = threading.current_thread()
        assert prepare.busy_note(tok, "x") is None
    finally:
        with prepare._LOCK:
            prepare._CONVERTING.pop(tok, None)
        release.set()
        t.join()


def test_nothing_is_planned_where_auto_stays_on_torch(home: Path) -> None:
    # no speed record here and the per-kind defaults off (conftest): auto runs torch, nothing to convert
    assert prepare._plan(list(MODES.values()), home) == []
    report = prepare.convert_ahead(models_dir=home)
    assert report.converted == [] and report.failed == []


@needs_openvino
def test_a_request_during_a_background_conversion_runs_torch_and_says_why(home: Path) -> None:
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    tok = prepare.token("generator", "GPEN-BFR-256")
    release, t = _hold(tok)
    try:
        from gpen_core.restorer import conversion_busy

        cache = ModelCache(home, busy=conversion_busy)  # as the Restorer makes it
        g = cache.generator(LOW_OV, RestoreOptions(mode="low"), "cpu")
        assert g.size == 256 and g.runtime == "torch"
        assert g.note and "converted to OpenVINO in the background" in g.note
        assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # the request converted nothing itself
    finally:
        with prepare._LOCK:
            prepare._CONVERTING.pop(tok, None)
        release.set()
        t.join()


def test_the_outcome_of_a_load_is_typed_not_read_off_its_notes() -> None:
    assert prepare.ConversionOutcome.of("openvino", 12.5, []) == prepare.ConversionOutcome("converted")
    # a note that merely contains the word (a file name) does not make a conversion
    assert prepare.ConversionOutcome.of("openvino", None, ["paste mask: converted-parsenet.pth, 512 px input"]) == prepare.ConversionOutcome("cached")
    busy = "the generator X is being converted to OpenVINO in the background"
    assert prepare.ConversionOutcome.of("torch", None, ["plan note", busy]) == prepare.ConversionOutcome("skipped", f"plan note; {busy}")
    assert prepare.ConversionOutcome.of("torch", None, []) == prepare.ConversionOutcome("skipped", "torch was measured faster")
    with pytest.raises(AttributeError):
        prepare.ConversionOutcome("cached").outcome = "converted"  # type: ignore[misc]  # frozen


def test_convert_ahead_files_each_network_under_its_outcome(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.errors import WeightsError
    from gpen_core.runtimes.openvino import base

    def fails(cache, opts):
        raise WeightsError("the file is damaged")

    plan = [
        ("generator:A", "A (float32)", lambda cache, opts: prepare.ConversionOutcome("converted")),
        ("parser:256", "the 256 px parser", lambda cache, opts: prepare.ConversionOutcome("cached")),
        ("detector:x", "the x detector", lambda cache, opts: prepare.ConversionOutcome("skipped", "too little RAM")),
        ("generator:B", "B (float32)", fails),
    ]
    monkeypatch.setattr(base, "openvino_version", lambda: "2099.1")
    monkeypatch.setattr(prepare, "_plan", lambda modes, models_dir: plan)
    report = prepare.convert_ahead(models_dir=home)
    assert report.lines() == ["converted A (float32)", "already converted: the 256 px parser",
                              "left on torch: the x detector (too little RAM)", "could not convert B (float32): the file is damaged"]
    assert not prepare._CONVERTING  # every token released, the failed one too


def test_a_request_does_not_wait_for_the_background_converting_another_network() -> None:
    # The background converts the parser; a request needing the unconverted generator would
    # otherwise wait for that conversion (one at a time per process) and then convert itself.
    tok = prepare.token("parser", "512")
    release, t = _hold(tok)
    with prepare._LOCK:
        prepare._LABELS[tok] = "the 512 px parser (float32)"
    try:
        note = prepare.busy_note(prepare.token("generator", "GPEN-BFR-512"), "the generator GPEN-BFR-512")
        assert note and note.startswith("the generator GPEN-BFR-512 is not converted to OpenVINO yet")
        assert "converting the 512 px parser (float32) right now" in note and "ran it on torch" in note
    finally:
        with prepare._LOCK:
            prepare._CONVERTING.pop(tok, None)
            prepare._LABELS.pop(tok, None)
        release.set()
        t.join()


@needs_openvino
@pytest.mark.slow  # one GPEN-BFR-256 conversion
def test_two_threads_loading_the_same_generator_convert_it_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A request and the app's background preparation can both find the generator unconverted.
    # Two torch.jit.trace calls at once fail ("Graphs differed across invocations"), and two
    # conversions of one file waste a minute: the second thread must load the first one's.
    real_convert, lock = ov_backend.convert, threading.Lock()
    state = {"inside": 0, "most": 0, "calls": 0}

    def slow_convert(*args, **kwargs):
        with lock:
            state["inside"] += 1
            state["calls"] += 1
            state["most"] = max(state["most"], state["inside"])
        try:
            threading.Event().wait(0.5)  # both threads are past the cache check by now
            return real_convert(*args, **kwargs)
        finally:
            with lock:
                state["inside"] -= 1

    monkeypatch.setattr(ov_backend, "convert", slow_convert)
    start, results, errors = threading.Barrier(2), [], []

    def load() -> None:
        start.wait()
        try:
            results.append(ov_backend.load(home / "GPEN-BFR-256.pth", "f32", models_dir=home))
        except Exception as exc:  # reported below with the other thread's outcome
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert state == {"inside": 0, "most": 1, "calls": 1}
    assert sorted(r.convert_s is None for r in results) == [False, True]  # one converted, one loaded it


def _scripted(target, folder: Path, retry_after_s: float = 0.5) -> prepare.BackgroundPreparation:
    """The app's watcher around a stand-in child: a scripted function of tests/worker_jobs.py instead of the conversion."""
    cls = type("Scripted", (prepare.BackgroundPreparation,), {"TARGET": staticmethod(target), "RETRY_AFTER_S": retry_after_s})
    return cls(folder)


def _wait(cond, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "the watcher never saw the child's event"
        time.sleep(0.02)


def test_the_watcher_holds_what_the_child_plans_and_releases_each_as_it_finishes(tmp_path: Path) -> None:
    gen, par, det = jobs.GEN, jobs.PAR, prepare.token("detector", "resnet50")
    prep = _scripted(jobs.scripted_preparation, tmp_path)
    prep.start()
    # before the child has planned, whatever a request would convert counts as under way
    _wait(lambda: prepare.ANY in prepare._CONVERTING)
    assert "converted to OpenVINO in the background" in (prepare.busy_note(det, "the resnet50 detector") or "")
    (tmp_path / "plan").touch()
    _wait(lambda: "1 of 2" in prep.status)
    assert prepare.ANY not in prepare._CONVERTING
    for tok in (gen, par):  # the one converting and the one queued behind it
        assert "converted to OpenVINO in the background" in (prepare.busy_note(tok, "x") or "")
    assert "converting GPEN-BFR-512 (float32) right now" in (prepare.busy_note(det, "the resnet50 detector") or "")
    (tmp_path / "next").touch()
    _wait(lambda: "2 of 2" in prep.status)
    assert "converting the 512 px parser (float32) right now" in (prepare.busy_note(gen, "the generator") or "")
    assert not prep.done.is_set()
    (tmp_path / "end").touch()
    assert prep.done.wait(60)
    assert prep.report == prepare.PrepareReport(converted=["GPEN-BFR-512 (float32)", "the 512 px parser (float32)"])
    assert prep.status == "OpenVINO ready for GPEN-BFR-512 (float32), the 512 px parser (float32)"
    assert prepare.busy_note(gen, "x") is None and not prepare._CONVERTING  # released when the child ended


def test_a_killed_child_is_started_again_and_requests_stay_on_torch_meanwhile(tmp_path: Path) -> None:
    prep = _scripted(jobs.preparation_killed_once, tmp_path, retry_after_s=2.0)
    prep.start()
    first = tmp_path / "first-run"
    _wait(lambda: first.exists() and first.read_text() != "")
    pid = int(first.read_text())
    assert pid == prep.child_pid
    os.kill(pid, signal.SIGKILL)  # kill -9 of the preparation process, as the OOM killer would
    _wait(lambda: "starting it again" in prep.status)
    # the page said the generator runs on torch: until the restart converts it, a request still does
    assert "converted to OpenVINO in the background" in (prepare.busy_note(jobs.GEN, "the generator") or "")
    assert prep.done.wait(60)
    assert prep.attempts == 2 and prep.report == prepare.PrepareReport(converted=[jobs.GEN_LABEL])
    assert prep.status == f"OpenVINO ready for {jobs.GEN_LABEL}" and not prepare._CONVERTING


def test_a_child_that_dies_twice_leaves_a_report_that_says_how(tmp_path: Path) -> None:
    prep = _scripted(jobs.preparation_that_dies, tmp_path)
    prep.start()
    assert prep.done.wait(60)
    assert prep.attempts == 2 and prep.report is not None and prep.report.converted == []
    assert prep.report.failed == ["OpenVINO's networks (the preparation process exited with code 3 before it finished, twice)"]
    assert not prepare._CONVERTING


@needs_openvino
def test_the_app_s_preparation_converts_in_a_niced_child_and_the_app_loads_its_result(home: Path) -> None:
    # faces-only runs the mobilenet0.25 detector; recorded faster on OpenVINO here, so auto converts it
    det = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (home / det.name).symlink_to(det)
    ov_backend.record_speed(1000, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test",
                            network="retinaface-mobilenet0.25")
    assert prepare.BackgroundPreparation.NICENESS == 10
    prep = prepare.BackgroundPreparation(home)
    prep.start()
    assert prep.done.wait(240)
    assert prep.report is not None and prep.report.converted == ["the mobilenet0.25 detector"], prep.report.lines()
    # this process converted nothing: its next load finds the child's files and converts nothing
    cache = ModelCache(home)
    notes: list[str] = []
    detector = cache.detector("mobilenet0.25", "cpu", RestoreOptions(backend="auto"), notes)
    assert detector.backend == "openvino" and detector.convert_s is None, notes


def test_the_child_exits_when_the_app_is_killed(tmp_path: Path) -> None:
    import subprocess

    app = subprocess.Popen([sys.executable, "-c", "import time\n"
                            "from gpen_core.engine import prepare\n"
                            "from tests import worker_jobs as jobs\n"
                            "class P(prepare.BackgroundPreparation):\n"
                            "    TARGET = staticmethod(jobs.preparation_killed_once)\n"
                            f"P({str(tmp_path)!r}).start(); time.sleep(120)\n"], cwd=str(ROOT))
    try:
        first = tmp_path / "first-run"
        _wait(lambda: first.exists() and first.read_text() != "")
        child = int(first.read_text())
        app.kill()  # kill -9 of the app: none of its exit handlers run
        app.wait()
        _wait(lambda: not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z", 20)
    finally:
        if app.poll() is None:
            app.kill()
