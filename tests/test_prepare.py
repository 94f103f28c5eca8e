"""Convert ahead: `download` and the app convert what auto runs on OpenVINO before a request waits for it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpen_core.engine import prepare
from gpen_core.engine.model_cache import ModelCache
from gpen_core.modes import MODES
from gpen_core.options import RestoreOptions
from gpen_core.runtimes.openvino import generator as ov_backend

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
        cache = ModelCache(home)
        _, size, _, _, note = cache.generator(LOW_OV, RestoreOptions(mode="low"), "cpu")
        assert size == 256 and cache.backend == "torch"
        assert note and "converted to OpenVINO in the background" in note
        assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # the request converted nothing itself
    finally:
        with prepare._LOCK:
            prepare._CONVERTING.pop(tok, None)
        release.set()
        t.join()


@needs_openvino
@pytest.mark.slow  # one GPEN-BFR-256 conversion: ~10-20 s on 2 busy cores
def test_convert_ahead_converts_once_and_then_finds_it_cached(home: Path) -> None:
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    # low itself loads no OpenVINO runtime under auto: nothing is prepared for it
    plain = prepare.convert_ahead([MODES["low"]], models_dir=home)
    assert plain.converted == [] and plain.cached == [] and not list((home / "openvino").glob("GPEN-BFR-256-*"))
    seen: list[str] = []
    report = prepare.convert_ahead([LOW_OV], models_dir=home, progress=lambda f, m: seen.append(m))
    assert report.converted == ["GPEN-BFR-256 (float32)"], report.lines()
    assert any("preparing GPEN-BFR-256" in m for m in seen)
    again = prepare.convert_ahead([LOW_OV], models_dir=home)
    assert again.converted == [] and again.cached == ["GPEN-BFR-256 (float32)"]
    cache = ModelCache(home)
    _, _, _, _, note = cache.generator(LOW_OV, RestoreOptions(mode="low"), "cpu")
    assert cache.backend == "openvino" and not (note and "converted" in note)  # no conversion inside the request


def test_the_outcome_of_a_load_is_typed_not_read_off_its_notes() -> None:
    assert prepare.Prepared.of("openvino", 12.5, []) == prepare.Prepared("converted")
    # a note that merely contains the word (a file name) does not make a conversion
    assert prepare.Prepared.of("openvino", None, ["paste mask: converted-parsenet.pth, 512 px input"]) == prepare.Prepared("cached")
    busy = "the generator X is being converted to OpenVINO in the background"
    assert prepare.Prepared.of("torch", None, ["plan note", busy]) == prepare.Prepared("skipped", f"plan note; {busy}")
    assert prepare.Prepared.of("torch", None, []) == prepare.Prepared("skipped", "torch was measured faster")
    with pytest.raises(AttributeError):
        prepare.Prepared("cached").outcome = "converted"  # type: ignore[misc]  # frozen


def test_convert_ahead_files_each_network_under_its_outcome(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.errors import WeightsError
    from gpen_core.runtimes.openvino import base

    def fails(cache, opts):
        raise WeightsError("the file is damaged")

    plan = [
        ("generator:A", "A (float32)", lambda cache, opts: prepare.Prepared("converted")),
        ("parser:256", "the 256 px parser", lambda cache, opts: prepare.Prepared("cached")),
        ("detector:x", "the x detector", lambda cache, opts: prepare.Prepared("skipped", "too little RAM")),
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
