"""gpen_app.readiness: one answer to "what will run" for the panel, Download, auto and the check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpen_core.engine import budget, fit
from gpen_app import readiness
from gpen_core.modes import MODES
from gpen_core.options import DETECTOR_WEIGHTS
from gpen_app.readiness import FileState, assess, summary
from gpen_core.weights.lookup import REGISTRY

GB = 1_000_000_000
PLENTY = 64 * GB
PHOTO = readiness.PANEL_PHOTO
# The combinations a newcomer meets, by registry name of the files present (all verified).
COMBOS = {
    "nothing": (),
    "256 only": ("GPEN-BFR-256",),
    "512 only": ("GPEN-BFR-512",),
    "512 + mobilenet": ("GPEN-BFR-512", "retinaface-mobilenet0.25"),
    "everything": tuple(REGISTRY),
}


def files_with(present: tuple[str, ...], corrupt: tuple[str, ...] = ()) -> dict[str, FileState]:
    class Row:
        def __init__(self, name: str) -> None:
            self.name = name
            self.present = name in present or name in corrupt
            self.verified = None if not self.present else name not in corrupt
            self.size_bytes = REGISTRY[name].size_bytes if not self.present else 123

    return readiness.files_from_status(Row(n) for n in REGISTRY)


def needs_cpu() -> dict[str, int]:
    return {n: budget.estimate_peak(m, "cpu", PHOTO)[0] for n, m in MODES.items()}


def test_each_mode_names_its_generator_and_detector_files() -> None:
    # The modes table of the README: low runs the 256 generator, the others the 512 one; only
    # quality runs the ResNet-50 detector. An aligned face skips detection.
    assert {n: readiness.mode_files(m) for n, m in MODES.items()} == {
        "low": ("GPEN-BFR-256", "retinaface-mobilenet0.25"),
        "faces-only": ("GPEN-BFR-512", "retinaface-mobilenet0.25"),
        "balanced": ("GPEN-BFR-512", "retinaface-mobilenet0.25"),
        "quality": ("GPEN-BFR-512", "retinaface-resnet50"),
    }
    assert readiness.mode_files(MODES["quality"], aligned=True) == ("GPEN-BFR-512",)
    assert readiness.mode_files(MODES["low"], detector="resnet50") == ("GPEN-BFR-256", DETECTOR_WEIGHTS["resnet50"])


def test_a_mode_fits_up_to_four_fifths_of_the_free_memory_and_nothing_fits_in_none() -> None:
    # 1000 bytes free: 800 usable (a fifth kept for other programs and allocator slack)
    r = fit.rank({"low": 800, "balanced": 801, "quality": 5000, "faces-only": 1}, 1000)
    assert [(m.mode, m.fits, m.short_bytes) for m in r.modes] == [("quality", False, 4200), ("balanced", False, 1), ("low", True, 0)]
    assert r.best is not None and r.best.mode == "low"  # faces-only crops only: never ranked
    assert fit.rank({"low": 0}, 0).best is None


@pytest.mark.parametrize("step", [-1, 1])
def test_the_panel_auto_and_the_report_agree_at_each_boundary(step: int) -> None:
    from gpen_core.engine.profile_records import ModeProfile, Profile
    from gpen_core.hwcheck import report

    def row(name: str, peak: int) -> ModeProfile:  # measured on the panel's photo: its peak is the need
        r = ModeProfile(name, MODES[name].model, "synthetic", "float32", "given boxes", peak, None, None, peak,
                        0, None, 1.0, 1.0, 1.0, 0, None, None, None, ())
        return replace(r, covered_pixels=PHOTO[0] * PHOTO[1])

    needs = needs_cpu()
    files = files_with(COMBOS["everything"])
    prof = Profile("", "cpu", True, {}, {}, {}, True, (), {n: row(n, needs[n]) for n in MODES})
    for name in ("low", "balanced", "quality"):
        free = int(needs[name] / 0.8) + step  # a byte or so either side of the mode's boundary
        panel = assess(files, needs, free).runs_now
        auto = budget.choose("cpu", PHOTO, free=budget.Free(free, None)).mode.name
        hw = report.ranking(prof, budget.Free(free, None)).chosen.mode
        assert panel == auto == hw
        assert (panel == name) == (step > 0) or name == "low"


def test_auto_runs_the_lightest_mode_with_its_weights_when_none_fits() -> None:
    # only the quality files are here and nothing fits: auto runs quality (it says it may not fit), as the panel
    # does, not low, whose weights would be missing
    files = files_with(COMBOS["everything"])
    have = {"quality"}
    choice = budget.choose("cpu", PHOTO, free=budget.Free(10_000_000, None), available=lambda m: m.name in have)
    assert choice.mode.name == "quality" and "the lightest mode" in choice.reason
    assert files  # the panel side is test_nothing_fits_runs_the_lightest_with_files_and_says_it_may_not_fit


@pytest.mark.parametrize(
    ("combo", "runs_now", "download", "sentence"),
    [
        ("nothing", None, ("GPEN-BFR-512", "retinaface-resnet50"),
         "nothing can run yet; download GPEN-BFR-256 (~76 MB) and MobileNet detector (1.8 MB) to enable low, "
         "or GPEN-BFR-512 (~284 MB) and MobileNet detector (1.8 MB) to enable balanced and faces-only, "
         "or GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB) to enable quality"),
        ("256 only", None, ("GPEN-BFR-512", "retinaface-resnet50"),
         "nothing can run yet; download MobileNet detector (1.8 MB) to enable low, "
         "or GPEN-BFR-512 (~284 MB) and MobileNet detector (1.8 MB) to enable balanced and faces-only, "
         "or GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB) to enable quality"),
        ("512 only", None, ("retinaface-resnet50",),
         "nothing can run yet; download MobileNet detector (1.8 MB) to enable balanced and faces-only, "
         "or ResNet-50 detector (109 MB) to enable quality"),
        ("512 + mobilenet", "balanced", ("retinaface-resnet50",),
         "auto will use balanced; download ResNet-50 detector (109 MB) to enable quality"),
        ("everything", "quality", (),
         "auto will use quality, the best mode that fits this machine; all its files are here"),
    ],
)
def test_the_five_combinations_with_plenty_of_memory(combo: str, runs_now: str | None, download: tuple[str, ...], sentence: str) -> None:
    files = files_with(COMBOS[combo])
    r = assess(files, needs_cpu(), PLENTY)
    assert (r.runs_now, r.recommended, r.download) == (runs_now, "quality", download)
    assert summary(r, files) == sentence
    # auto's own rule, fed the same files and memory, runs the same mode
    if runs_now is not None:
        choice = budget.choose("cpu", PHOTO, free=budget.Free(PLENTY, None), available=lambda m: r.modes[m.name].ready)
        assert choice.mode.name == runs_now


def test_little_memory_recommends_what_fits_and_downloads_only_that() -> None:
    needs = needs_cpu()
    free = int((needs["low"] + 1) / fit.SAFETY_MARGIN)  # low fits, balanced does not
    assert needs["balanced"] > free * fit.SAFETY_MARGIN
    files = files_with(())
    r = assess(files, needs, free)
    assert r.recommended == "low" and r.download == ("GPEN-BFR-256", "retinaface-mobilenet0.25")
    assert summary(r, files).endswith("to enable low")
    files = files_with(COMBOS["everything"])
    r = assess(files, needs, free)
    assert (r.runs_now, r.recommended, r.download) == ("low", "low", ())
    assert budget.choose("cpu", PHOTO, free=budget.Free(free, None), available=lambda m: r.modes[m.name].ready).mode.name == "low"


def test_nothing_fits_runs_the_lightest_with_files_and_says_it_may_not_fit() -> None:
    files = files_with(COMBOS["everything"])
    r = assess(files, needs_cpu(), 10_000_000)
    assert r.runs_now == "low" and not r.runs_now_fits
    assert "may not fit" in summary(r, files)


def test_a_corrupt_file_counts_as_missing_and_is_offered_again() -> None:
    files = files_with(COMBOS["everything"], corrupt=("retinaface-resnet50",))
    assert files["retinaface-resnet50"].state == "corrupt" and files["retinaface-resnet50"].download_bytes == 109497761
    r = assess(files, needs_cpu(), PLENTY)
    assert (r.runs_now, r.download, r.corrupt) == ("balanced", ("retinaface-resnet50",), ("retinaface-resnet50",))
    assert "ResNet-50 detector (corrupt, 109 MB)" in summary(r, files)


def test_explicit_mode_and_overrides() -> None:
    files = files_with(COMBOS["512 + mobilenet"])
    r = assess(files, needs_cpu(), PLENTY)
    assert readiness.download_for(r, "low") == ("GPEN-BFR-256",)
    assert readiness.download_for(r, "faces-only") == ()
    r = assess(files, needs_cpu(), PLENTY, aligned=True)  # an aligned crop needs no detector
    assert r.modes["quality"].ready and r.runs_now == "quality"
    r = assess(files, needs_cpu(), PLENTY, detector="mobilenet0.25")
    assert r.runs_now == "quality"


def test_current_reads_the_models_folder(_isolated_models_home, monkeypatch: pytest.MonkeyPatch) -> None:
    (_isolated_models_home / "detection_Resnet50_Final.pth").write_bytes(b"not the detector")
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(PLENTY))
    r, files = readiness.current("cpu")
    assert files["retinaface-resnet50"].state == "corrupt" and files["GPEN-BFR-512"].state == "missing"
    assert r.runs_now is None and r.download == ("GPEN-BFR-512", "retinaface-resnet50")


def test_auto_in_the_engine_passes_over_a_corrupt_file_as_the_panel_does(models_with_detector) -> None:
    """auto in the engine passes over a corrupt detector, as the panel does (it must never call it "present")."""
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.options import RestoreOptions

    home = models_with_detector
    (home / "GPEN-BFR-512.pth").write_bytes(b"stand-in: verified by first use")
    (home / "detection_Resnet50_Final.pth").write_bytes(b"truncated")
    cache = ModelCache(models_dir=home)
    assert cache.weights_present(MODES["balanced"], RestoreOptions(), False)
    assert not cache.weights_present(MODES["quality"], RestoreOptions(), False)
    r, _ = readiness.current("cpu", home)
    assert r.modes["balanced"].ready and not r.modes["quality"].ready


def test_a_gpu_checks_report_weighs_ram_where_free_vram_is_unknown_as_auto_and_the_panel_do() -> None:
    from gpen_core.engine.profile_records import ModeProfile, Profile
    from gpen_core.hwcheck import report

    def row(name: str, peak: int) -> ModeProfile:
        r = ModeProfile(name, MODES[name].model, "synthetic", "float16", "given boxes", peak, peak, peak, peak,
                        0, None, 1.0, 1.0, 1.0, 0, 0, None, None, ())
        return replace(r, covered_pixels=PHOTO[0] * PHOTO[1])

    raw = {"low": 300_000_000, "faces-only": 400_000_000, "balanced": 500_000_000, "quality": 1_600_000_000}
    prof = Profile("", "cuda:0", True, {}, {}, {}, True, (), {n: row(n, p) for n, p in raw.items()})
    # auto's need on a GPU: the measured peak and the float32 copy a float16 overflow loads
    peaks = {n: budget.estimate_peak(MODES[n], "cuda:0", PHOTO, profile=prof)[0] for n in raw}
    assert all(peaks[n] > raw[n] for n in ("low", "balanced"))
    # ZeroGPU outside a GPU call: free VRAM cannot be read, RAM binds (budget.free_memory's None)
    ram_only = budget.Free(ram_bytes=int(peaks["balanced"] / 0.8) + 1, vram_bytes=None)
    assert ram_only.binding("cuda:0") == budget.Binding("RAM", ram_only.ram_bytes)
    ranked = report.ranking(prof, ram_only)
    assert ranked.binding == "RAM" and ranked.free_bytes == ram_only.ram_bytes and ranked.chosen.mode == "balanced"
    rec = report.recommendation(prof, ram_only)
    assert rec.startswith("use `balanced`") and "more RAM than you have free" in rec and "VRAM" not in rec
    table = report.format_table(prof, ram_only)
    assert "| `balanced` |" in table and "no (" in table  # quality is short of RAM, said in bytes
    known = budget.Free(ram_bytes=10**12, vram_bytes=int(peaks["low"] / 0.8) + 1)
    assert known.binding("cuda:0") == budget.Binding("VRAM", known.vram_bytes) and known.binding("cpu").name == "RAM"
    assert report.ranking(prof, known).chosen.mode == "low" and "VRAM" in report.recommendation(prof, known)


def test_the_checks_memory_reading_weighs_the_need_the_verdict_weighs(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hardware check tab shows the verdict (readiness, auto's need for a 1 MP photo) above "Memory alone"
    (the report): both weigh one need, so a mode whose peak fits only for the check's small photos is not
    recommended by one and refused by the other."""
    from dataclasses import replace

    from gpen_core.engine import profile_store
    from gpen_core.engine.profile_records import ModeProfile, Profile
    from gpen_core.hwcheck import report

    def row(name: str, peak: int) -> ModeProfile:
        r = ModeProfile(name, MODES[name].model, "synthetic", "float32", "given boxes", peak, peak, peak, peak,
                        0, None, 1.0, 1.0, 1.0, 0, 0, None, None, ())
        return replace(r, covered_pixels=320 * 240, bytes_per_pixel=200.0)  # a 1 MP photo adds ~190 MB

    peaks = {"low": 300_000_000, "faces-only": 400_000_000, "balanced": 500_000_000, "quality": 600_000_000}
    prof = Profile("2026-12-06T12:00", "cpu", True, profile_store.fingerprint("cpu", tmp_path, True), {}, {}, True, (),
                   {n: row(n, p) for n, p in peaks.items()})
    profile_store.save_profile(prof, tmp_path)
    free = budget.Free(ram_bytes=int(peaks["balanced"] / 0.8) + 1, vram_bytes=None)  # balanced's bare peak fits
    monkeypatch.setattr(budget, "free_memory", lambda device: free)
    verdict, _ = readiness.current("cpu", tmp_path)
    assert verdict.recommended == "low"  # with the photo's growth balanced does not fit
    assert report.recommendation(prof, free).startswith("use `low`")
