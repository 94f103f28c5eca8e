"""The hardware check times torch against OpenVINO on the CPU and records it for ``--backend auto``
(tiny generators, one small workload: quick)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpen_core.runtimes.openvino.choice import BackendChoice

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.cli import main as cli_main  # imported here, not under capsys: its progress line binds sys.stderr at import
from gpen_core.modes import MODES
from gpen_core.platform import measurements
from gpen_core.hwcheck import backends
from gpen_core.engine import profile_records as records
from gpen_core.hwcheck import report
from gpen_core.hwcheck import runner
from gpen_core.engine import profile_store as store
from gpen_core.hwcheck.workloads import Workload

from .factories import TINY
from .fixtures_openvino import ConvertedIRs
from .fixtures_profile import IsolatedRun

CONFIGS = {"GPEN-BFR-256": TINY, "GPEN-BFR-512": TINY}
FACE = (Workload("face", "aligned face", 64, 64, 1, aligned=True),)

needs_openvino = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)


def _speeds(home: Path) -> dict:
    """This CPU's speed records in the store ``auto`` reads, as saved."""
    return {k: vars(r) for k, r in ov_backend.speed_records(home).items()}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory, one_thread: None) -> tuple[records.Profile, Path, list[tuple[float, str]]]:
    """One check of low and balanced with the backend comparison asked for (tiny overrides)."""
    if ov_backend.openvino_version() is None:
        pytest.skip("needs OpenVINO (pip install openvino; in requirements.txt)")
    home = tmp_path_factory.mktemp("backends_home")
    seen: list[tuple[float, str]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPEN_HOME", str(home))
        mp.setenv("GPEN_OFFLINE", "1")
        prof = runner.run_profile(modes=["low", "balanced"], models_dir=home, workloads=FACE, model_configs=CONFIGS,
                                  progress=lambda f, d: seen.append((f, d)), isolate=False, backends=True)
    return prof, home, seen


@needs_openvino
def test_the_check_times_both_backends_and_records_them(compared: tuple[records.Profile, Path, list[tuple[float, str]]]) -> None:
    prof, home, seen = compared
    b = prof.backends
    assert b is not None and b.skipped is None and b.openvino == ov_backend.openvino_version()
    bal_dtype = b.uses["balanced"][1]
    assert b.uses == {"low": (64, "float32"), "balanced": (64, bal_dtype)}
    expected_pairs = {(64, "float32"), (64, bal_dtype)}
    assert {(r.size, r.dtype) for r in b.rows} == expected_pairs
    for r in b.rows:
        assert r.error is None and r.recorded and r.weights == "override"
        assert r.runs == 3 and len(r.torch_times) == 3 and len(r.openvino_times) == 3
        assert r.torch_s == pytest.approx(sorted(r.torch_times)[1]) and r.openvino_s == pytest.approx(sorted(r.openvino_times)[1])
        assert r.convert_s is not None and r.convert_s > 0  # a fresh models folder: converted, timed apart from the calls
        assert r.precision == ("bf16" if r.dtype == "bfloat16" else "f32")
    # conversions are visible in the progress, which stays monotonic within [0, 1]
    assert any("OpenVINO: converting" in d for _, d in seen) and any("timed call 3 of 3" in d for _, d in seen)
    fs = [f for f, _ in seen]
    assert fs == sorted(fs) and 0.0 <= fs[0] and fs[-1] == 1.0
    # the speed file auto reads holds the medians, saying where they came from
    saved = _speeds(home)
    assert b.speed_file == str(measurements.path(home))
    rec = saved["64-float32"]
    low = next(r for r in b.rows if r.dtype == "float32")
    assert rec["torch_s"] == pytest.approx(low.torch_s, abs=1e-4) and rec["openvino_s"] == pytest.approx(low.openvino_s, abs=1e-4)
    assert "hardware check" in rec["source"] and "model-config override" in rec["source"]


@needs_openvino
def test_auto_follows_the_check(compared: tuple[records.Profile, Path, list[tuple[float, str]]]) -> None:
    prof, home, _ = compared
    assert prof.backends is not None
    for r in prof.backends.rows:
        choice = ov_backend.choose_backend("auto", r.size, r.dtype, models_dir=home)
        assert choice.runtime == r.faster and choice.why.startswith("measured faster here")
    # a size the check did not measure stays on torch
    assert ov_backend.choose_backend("auto", 128, "float32", models_dir=home).runtime == "torch"
    # the report shows the comparison and what auto now uses per mode
    text = report.format_report(prof, models_dir=home)
    # (`low`, and `balanced` too where the CPU has no native bfloat16: both run float32 there)
    assert "**CPU backends**" in text and "| 64 px | float32 | `low`" in text
    chosen = report.auto_backends(prof, home)
    assert set(chosen) == {"low", "balanced"}
    for mode, c in chosen.items():
        assert f"`{mode}` → {'OpenVINO' if c.runtime == 'openvino' else 'torch'} ({c.why})" in text


@needs_openvino
def test_the_comparison_is_saved_with_the_profile(compared: tuple[records.Profile, Path, list[tuple[float, str]]]) -> None:
    prof, home, _ = compared
    d = json.loads((home / "measurements.json").read_text())["profiles"]["cpu"]
    assert set(d["backends"]) == {f for f in records.BackendCheck.__dataclass_fields__}
    assert store.load_json(home / "measurements.json") == prof
    # a later run that skips the comparison keeps the earlier rows in the saved profile
    again = runner.run_profile(modes=["low"], models_dir=home, workloads=FACE, model_configs=CONFIGS, isolate=False, backends=False)
    assert again.backends is not None and again.backends.skipped == "asked not to (--no-backends)" and again.backends.rows == ()
    kept = store.load_json(home / "measurements.json").backends
    assert kept is not None and {(r.size, r.dtype) for r in kept.rows} == {(r.size, r.dtype) for r in prof.backends.rows}
    assert "Earlier measurements" in report.backends_section(store.load_json(home / "measurements.json"), home)


@needs_openvino
def test_cli_no_backends_records_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        one_thread: None, converted_ir: ConvertedIRs) -> None:
    real = runner.run_profile
    converted_ir.seed("tiny-override-256", tmp_path)  # what is recorded is tested here, not the conversion (the fixture above)

    def tiny(*a: Any, backends: bool | None = None, **k: Any) -> records.Profile:
        # the CLI passes None (compare) or False (--no-backends); tiny overrides need True to compare
        return real(*a, **{**k, "workloads": FACE, "model_configs": CONFIGS, "backends": True if backends is None else backends})

    monkeypatch.setattr(runner, "run_profile", tiny)
    argv = ["profile", "--modes", "low", "--models-dir", str(tmp_path), "--in-process"]
    assert cli_main([*argv, "--no-backends"]) == 0
    out = capsys.readouterr().out
    assert "Not compared in this check: asked not to (--no-backends)." in out
    assert "Backend `auto` (the default) now runs: `low` → torch (no OpenVINO measurement for 64 px float32 on this CPU or CPUs of its kind yet)" in out
    assert _speeds(tmp_path) == {}
    saved = json.loads((tmp_path / "measurements.json").read_text())["profiles"]["cpu"]
    assert saved["command"].endswith("--in-process --no-backends --models-dir " + str(tmp_path))
    # the same command without the flag records
    assert cli_main(argv) == 0
    assert "| 64 px | float32 | `low` |" in capsys.readouterr().out
    assert "64-float32" in _speeds(tmp_path)


def test_without_openvino_the_report_says_so_and_the_check_goes_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_thread: None) -> None:
    why = "OpenVINO is installed but its CPU plugin does not start (RuntimeError: test)"
    monkeypatch.setattr(ov_backend, "unavailable_reason", lambda: why)
    if ov_backend.openvino_version() is None:
        why = "OpenVINO is not installed; pip install openvino (or `bash scripts/setup.sh`, which installs requirements.txt)"
        monkeypatch.setattr(ov_backend, "unavailable_reason", lambda: why)
    prof = runner.run_profile(modes=["low"], models_dir=tmp_path, workloads=FACE, model_configs=CONFIGS, isolate=False, backends=True)
    assert prof.modes["low"].failed is None and prof.modes["low"].runs[0].faces == 1
    assert prof.backends is not None and prof.backends.skipped == why and prof.backends.rows == ()
    assert _speeds(tmp_path) == {}
    assert f"Not compared in this check: {why}." in report.format_report(prof, models_dir=tmp_path)
    # not installed at all: decided without starting OpenVINO, auto says why it stays on torch
    monkeypatch.setattr(ov_backend, "openvino_version", lambda: None)
    prof = runner.run_profile(modes=["low"], models_dir=tmp_path, workloads=FACE, model_configs=CONFIGS, isolate=False, backends=True)
    assert prof.backends is not None and prof.backends.skipped == why
    assert report.auto_backends(prof, tmp_path) == {"low": BackendChoice("torch", "OpenVINO is not installed")}


@needs_openvino
def test_the_apps_hardware_check_shows_the_comparison(monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    app = pytest.importorskip("app", reason="the app needs gradio")
    from gpen_app.app_state import Policy

    monkeypatch.setattr(app.STATE, "policy", Policy())
    real = runner.run_profile
    monkeypatch.setattr(runner, "run_profile", lambda **k: real(**{**k, "modes": ["low"], "workloads": FACE, "isolate": False,
                                                                   "model_configs": {"GPEN-BFR-256": TINY}, "backends": True}))
    descs: list[str] = []
    md, _ = app.hardware_check(progress=lambda f, desc=None, **_: descs.append(str(desc)))
    assert any("OpenVINO: converting" in d for d in descs)  # the conversion shows in the progress
    for text in (md, app.saved_hardware_check()[0]):  # right after the check, and on the next page load
        assert "**CPU backends**" in text and "| 64 px | float32 | `low` |" in text
        assert "Backend `auto` (the default) now runs: `low` → " in text


def _spec(kind: str, path: str | None = None) -> dict[str, Any]:
    return {"model_opt": path, "kind": kind, "threads": 2}


def test_without_openvino_the_comparison_is_skipped_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs whether or not OpenVINO is installed here: its absence is simulated."""
    from gpen_core.runtimes.openvino import base

    for module in (base, ov_backend):  # the generator module re-exports the base's function
        monkeypatch.setattr(module, "openvino_version", lambda: None)
    modes = [MODES["low"], MODES["quality"]]
    real = str(tmp_path / "GPEN-BFR-256.pth")
    spec, check = backends.plan(modes, [_spec("real", real), _spec("synthetic")], {}, "cpu", None, str(tmp_path))
    assert spec is None and check.skipped is not None and check.skipped.startswith("OpenVINO is not installed; ")
    assert "pip install openvino" in check.skipped  # and how to fix it
    assert check.uses == {"low": (256, "float32"), "quality": (512, "float32")}  # what the modes would have timed


@needs_openvino
def test_which_weights_are_timed_and_what_is_recorded(tmp_path: Path) -> None:
    """Real files and the released architectures with random weights are recorded (saying which);
    an override standing in for a released size is timed but never recorded; GPU and the flag skip."""
    from gpen_core.networks.arch import GPENConfig

    modes = [MODES["low"], MODES["quality"]]
    real = str(tmp_path / "GPEN-BFR-256.pth")
    spec, check = backends.plan(modes, [_spec("real", real), _spec("synthetic")], {}, "cpu", None, str(tmp_path))
    assert spec is not None and check.uses == {"low": (256, "float32"), "quality": (512, "float32")}
    low, quality = spec["pairs"]
    assert low["path"] == real and low["weights"] == "real" and "real weights" in low["source"] and low["threads"] == 2
    assert quality["path"] == "synthetic:GPEN-BFR-512" and quality["weights"] == "synthetic"
    assert "random weights of the released GPEN-BFR-512 architecture (time does not depend on the values)" in quality["source"]
    # overrides: compared only when asked; one of a released size is not recorded
    big = GPENConfig(256, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
    assert backends.plan(modes[:1], [_spec("synthetic", "x.pth")], {"GPEN-BFR-256": big}, "cpu", None, None)[0] is None
    spec, check = backends.plan(modes[:1], [_spec("synthetic", "x.pth")], {"GPEN-BFR-256": big}, "cpu", True, None)
    assert spec is not None and "would stand in for the released 256 px generator" in spec["pairs"][0]["no_record"]
    row = {"size": 256, "dtype": "float32", "modes": ["low"], "model": "GPEN-BFR-256", "weights": "override", "runs": 3,
           "measured_at": "now", "torch_s": 0.2, "openvino_s": 0.1}
    done = backends.finish(check, spec, {"skipped": None, "rows": [row]}, str(tmp_path))
    assert not done.rows[0].recorded and "not recorded" in (done.rows[0].note or "")
    assert _speeds(tmp_path) == {}
    # a failed pair is reported, not recorded
    done = backends.finish(check, spec, {"skipped": None, "rows": [{**row, "torch_s": None, "error": "RuntimeError: no"}]}, str(tmp_path))
    assert done.rows[0].note == "not measured: RuntimeError: no" and "| n/a |" in report.backends_section(
        records.Profile(**{**_empty_profile(), "backends": done}), tmp_path)
    # the GPU and the flag
    assert "CPU only" in (backends.plan(modes, [_spec("real", real), _spec("synthetic")], {}, "cuda:0", None, None)[1].skipped or "")
    spec, check = backends.plan(modes, [_spec("real", real), _spec("synthetic")], {}, "cpu", False, None)
    assert spec is None and check.skipped == "asked not to (--no-backends)" and check.uses["quality"] == (512, "float32")


def _empty_profile() -> dict[str, Any]:
    return dict(created="now", device="cpu", synthetic=True, fingerprint={}, machine={},
                free_at_start={}, isolated=False, workloads=(), modes={})


@needs_openvino
def test_in_a_worker_process_the_comparison_reports_back(isolated_low_profile: IsolatedRun) -> None:
    # The session's isolated check of low (tests/fixtures_profile.py), which test_profile.py reads too.
    prof, seen, home = isolated_low_profile.profile, isolated_low_profile.progress, isolated_low_profile.home
    assert prof.isolated and prof.backends is not None and prof.backends.skipped is None
    (row,) = prof.backends.rows
    assert row.recorded and row.torch_s and row.openvino_s and row.convert_s
    assert any("OpenVINO: converted in" in d for d in seen)  # the worker's progress reached the parent
    assert ov_backend.choose_backend("auto", 64, "float32", models_dir=home).runtime == row.faster


def test_the_comparison_loads_each_generator_through_the_model_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both sides of a pair are what a request of that mode loads: ModelCache.generator, asked for each backend."""
    import torch

    from gpen_core.engine.model_cache import Generator, ModelCache

    asked: list[tuple[str, str | None, str, bool]] = []

    class Forward:
        convert_s = None

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x

    def generator(self: ModelCache, mode, opts, device, progress=None):  # noqa: ANN001
        asked.append((mode.name, opts.model, opts.backend, self.synthetic_weights))
        return Generator(Forward(), 64, torch.float32, mode.model, opts.backend)

    monkeypatch.setattr(ModelCache, "generator", generator)
    monkeypatch.setattr(ov_backend, "choose_precision", lambda dtype: ("f32", None))
    pair = {"size": 64, "dtype": "float32", "modes": ["low"], "model": "GPEN-BFR-256", "path": "synthetic:GPEN-BFR-256"}
    row = backends._measure_pair(pair, 1, tmp_path, 1, lambda f, d: None)
    assert asked == [("low", None, "torch", True), ("low", None, "openvino", True)]
    assert len(row["torch_times"]) == len(row["openvino_times"]) == 1
    override = {**pair, "path": str(tmp_path / "override.pth")}
    backends._measure_pair(override, 1, tmp_path, 1, lambda f, d: None)
    assert asked[2:] == [("low", str(tmp_path / "override.pth"), "torch", False), ("low", str(tmp_path / "override.pth"), "openvino", False)]
    # a pair whose size the engine does not load is an error of that row, not a timing of another network
    with pytest.raises(RuntimeError, match="128 px"):
        backends._measure_pair({**pair, "size": 128}, 1, tmp_path, 1, lambda f, d: None)
