"""auto before any measurement on this machine: the recorded per-CPU-kind choice, said as assumed."""

from __future__ import annotations

import pytest

from gpen_core.runtimes.openvino import defaults, generator

AMX = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = {"avx2", "avx512f", "avx512_bf16"}
AVX2 = {"avx2", "fma"}


@pytest.mark.parametrize(("flags", "kind"), [(AMX, "amx"), (ZEN4, "avx512_bf16"), (AVX2, "avx2"), ({"neon"}, None), (set(), None)])
def test_cpu_kind_from_flags(flags: set[str], kind: str | None) -> None:
    assert defaults.cpu_kind(flags) == kind


def test_every_default_names_its_cpu_and_command() -> None:
    for kind, table in defaults.DEFAULTS.items():
        assert kind in defaults.KIND_NAMES
        for key, m in table.items():
            assert m.torch_s > 0 and m.openvino_s > 0, key
            assert "EPYC" in m.source or "Xeon" in m.source, f"{kind} {key}: the source must name the CPU"
            assert "benchmarks/" in m.source or "python -m gpen_core" in m.source, f"{kind} {key}: and the command"


@pytest.mark.parametrize("flags", [AMX, ZEN4, AVX2], ids=["amx", "zen4", "avx2"])
def test_each_defaults_reason_names_its_cpu_whole(monkeypatch: pytest.MonkeyPatch, flags: set[str]) -> None:
    # a CPU named with a comma inside its brackets must not be cut there: "on an AMD EPYC Zen 4 (AVX-512 BF16" read
    # as a sentence with an open bracket in every result's notes
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    for key in defaults.DEFAULTS[defaults.cpu_kind(flags) or ""]:
        reason = defaults.default_choice(key, flags).reason  # type: ignore[union-attr]
        assert reason.count("(") == reason.count(")"), reason
        assert reason.endswith(("no AMX)", "AVX2 only, family 23 model 49)", "Intel Xeon with AMX")), reason


def test_zen4_runs_the_512_generator_on_openvino_and_says_it_was_measured_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    choice = defaults.default_choice("512-bfloat16", ZEN4)
    assert choice is not None
    assert choice.runtime == "openvino"
    assert "0.82 s vs torch 1.23 s" in choice.reason and "Zen 4" in choice.reason
    # measured elsewhere: said apart from the reason, so a caller can build on the reason alone
    assert "not yet measured on this machine" in choice.caveat and "not yet measured" not in choice.reason
    assert choice.why == f"{choice.reason}; {choice.caveat}"


@pytest.mark.parametrize(("flags", "cpu"), [(ZEN4, "AMD EPYC Zen 4 (AVX-512 BF16, no AMX)"), (AVX2, "AMD EPYC Zen 2 (AVX2 only, family 23 model 49)")])
def test_the_reason_names_the_whole_cpu_its_brackets_closed(monkeypatch: pytest.MonkeyPatch, flags: set[str], cpu: str) -> None:
    # every result's notes read "... per call on an AMD EPYC Zen 4 (AVX-512 BF16; not yet measured ...": a bracket never closed
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    reason = defaults.default_choice("512-float32", flags).reason  # type: ignore[union-attr]
    assert reason.endswith(f" per call on an {cpu}"), reason


def test_zen4_runs_the_512_float32_generator_on_openvino_before_any_measurement_here(monkeypatch: pytest.MonkeyPatch) -> None:
    # what a fresh install's quality mode runs (auto, exact float32) on a Zen 4
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    choice = defaults.default_choice("512-float32", ZEN4)  # type: ignore[misc]
    backend, why = choice.runtime, choice.why
    assert backend == "openvino" and "Zen 4" in why and "not yet measured on this machine" in why


def test_zen4_keeps_torch_for_the_256_float32_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    # within 5 % either way in three quiet runs, torch ahead in the latest: low stays on torch
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    choice = defaults.default_choice("256-float32", ZEN4)  # type: ignore[misc]
    backend, why = choice.runtime, choice.why
    assert backend == "torch" and "0.127 s vs OpenVINO 0.133 s per call" in why  # not "0.13 s vs 0.13 s"


def test_avx2_follows_its_measurements_and_low_keeps_torch(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    assert defaults.default_choice("512-float32", AVX2).runtime == "openvino"  # type: ignore[index]
    # the Zen 2 measured OpenVINO faster at 256 px; low, the one mode at 256 px, keeps to torch under auto
    assert defaults.default_choice("256-float32", AVX2).runtime == "openvino"  # type: ignore[index]
    pytest.importorskip("openvino")
    from gpen_core.modes import MODES

    monkeypatch.setattr(defaults, "cpu_flags", lambda: set(AVX2))
    choice = generator.choose_mode_backend(MODES["low"], "auto", 256, "float32", models_dir=tmp_path)
    backend, why = choice.runtime, choice.why
    assert backend == "torch" and "keeps to PyTorch under auto" in why and "AVX2" in why


def test_a_network_or_kind_without_an_entry_has_no_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    assert defaults.default_choice("1024-float32", AVX2) is None
    assert defaults.default_choice("512-float32", {"neon"}) is None


def test_the_switch_turns_the_defaults_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "0")
    assert defaults.default_choice("512-bfloat16", ZEN4) is None


def test_auto_uses_the_default_without_a_record_and_the_record_once_there(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pytest.importorskip("openvino")
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    monkeypatch.setattr(defaults, "cpu_flags", lambda: set(ZEN4))
    choice = generator.choose_backend("auto", 512, "bfloat16", models_dir=tmp_path)
    backend, why = choice.runtime, choice.why
    assert backend == "openvino" and "not yet measured on this machine" in why
    # a measurement made here wins over the kind's, even when it disagrees
    generator.record_speed(512, "bfloat16", 0.30, 0.50, models_dir=tmp_path, source="test")
    choice = generator.choose_backend("auto", 512, "bfloat16", models_dir=tmp_path)
    backend, why = choice.runtime, choice.why
    assert backend == "torch" and "measured faster here" in why


def test_zen4_runs_the_1024_task_generators_on_openvino_from_the_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPEN-Colorization-1024 / GPEN-Inpainting-1024 (one architecture): measured here in CPU seconds
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    for key in ("1024-float32", "1024-bfloat16"):
        m = defaults.DEFAULTS["avx512_bf16"][key]
        assert "benchmarks/ov_1024.py" in m.source and "CPU seconds" in m.source
        choice = defaults.default_choice(key, ZEN4)  # type: ignore[misc]
        backend, why = choice.runtime, choice.why
        assert backend == "openvino" and "not yet measured on this machine" in why
    assert defaults.default_choice("1024-bfloat16", AMX) is None  # not measured on that kind: torch until it is


def test_converting_a_1024_generator_has_a_measured_ram_figure(tmp_path) -> None:
    # measured, not estimated from the file (which does not exist: an estimate would read its size)
    need, measured = generator.conversion_ram(1024, tmp_path / "never-read.pth")
    assert measured
    # the larger network needs more than the smaller ones (a measurement typed in wrong shows here)
    assert need > generator.conversion_ram(512, tmp_path / "never-read.pth")[0] > generator.conversion_ram(256, tmp_path / "x")[0]


def test_a_mode_that_keeps_to_torch_words_its_note_from_the_choices_parts(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from gpen_core.modes import MODES
    from gpen_core.runtimes.openvino.choice import BackendChoice

    # a reason with its own "; " and a caveat of any wording: nothing is split back out of a sentence
    elsewhere = BackendChoice("openvino", "measured faster on a Xeon; 0.5 s vs torch 0.9 s", "measured elsewhere only")
    monkeypatch.setattr(generator, "choose_backend", lambda *a, **k: elsewhere)
    low = generator.choose_mode_backend(MODES["low"], "auto", 256, "float32", models_dir=tmp_path)
    assert low.runtime == "torch" and low.caveat == ""
    assert "although OpenVINO was measured faster on a Xeon; 0.5 s vs torch 0.9 s; OpenVINO's runtime adds" in low.reason
    assert "measured elsewhere only" not in low.why
    assert generator.choose_mode_backend(MODES["quality"], "auto", 512, "float32", models_dir=tmp_path) == elsewhere
