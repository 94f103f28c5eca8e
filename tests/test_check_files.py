"""The hardware check's report names, for each mode it rates or recommends, the files the models
folder lacks and the one command that fetches them: the same files the weights panel and the
engine's failure name, so "use quality" never stands beside a missing quality detector."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine import budget
from gpen_core.engine.profile_records import ModeProfile, Profile, TaskRow
from gpen_core.errors import WeightsError
from gpen_core.hwcheck import report
from gpen_core.modes import MODES

PLENTY = budget.Free(ram_bytes=64 * 10**9, vram_bytes=None)  # every mode fits: only files can stand in the way


def _row(name: str, peak: int) -> ModeProfile:
    return ModeProfile(name, MODES[name].model, "synthetic", "float32", "given boxes", peak, None, None, peak,
                       0, None, 1.0, 1.0, 1.0, 0, None, None, None, ())


def _profile() -> Profile:
    """A check of all four modes, each needing a few hundred MB (memory is not what these tests are about)."""
    peaks = {"low": 300_000_000, "faces-only": 400_000_000, "balanced": 500_000_000, "quality": 600_000_000}
    return Profile("2026-01-01T00:00:00", "cpu", True, {}, {}, {}, True, (), {n: _row(n, p) for n, p in peaks.items()})


@pytest.fixture()
def half_a_folder(models_with_detector: Path) -> Path:
    """The 512 generator and the MobileNet detector are here; the 256 generator is not, and the
    ResNet-50 detector is a truncated download (corrupt counts as missing: it would fail to load)."""
    (models_with_detector / "GPEN-BFR-512.pth").write_bytes(b"a generator without a published checksum")
    (models_with_detector / "detection_Resnet50_Final.pth").write_bytes(b"cut short")
    return models_with_detector


def _table_row(table: str, mode: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| `{mode}`"))


def test_the_report_names_each_modes_missing_files_and_the_download(half_a_folder: Path) -> None:
    text = report.format_report(_profile(), PLENTY, models_dir=half_a_folder)
    rec = text.split("Recommendation: ", 1)[1]
    # Memory alone picks quality; the report must not leave it there while its detector is unusable.
    assert rec.startswith("use `quality`") and "every mode fits" in rec
    assert "retinaface-resnet50 (detection_Resnet50_Final.pth, 109 MB)" in rec
    assert "`python -m gpen_core download retinaface-resnet50`" in rec
    assert "until then `auto` runs `balanced`" in rec  # the best mode whose files are all here
    table = text.split("\n\n")[1]
    assert "files here?" in table.splitlines()[0]
    assert _table_row(table, "quality").rstrip(" |").endswith("`python -m gpen_core download retinaface-resnet50`")
    assert "no: missing GPEN-BFR-256 (GPEN-BFR-256.pth, ~76 MB)" in _table_row(table, "low")
    assert "`python -m gpen_core download GPEN-BFR-256`" in _table_row(table, "low")
    for mode in ("balanced", "faces-only"):
        assert _table_row(table, mode).rstrip(" |").endswith("| yes | yes"), mode


def test_a_task_row_names_the_tasks_generator_and_the_modes_detector(half_a_folder: Path) -> None:
    # colorize runs GPEN-Colorization-1024 on detected faces: in balanced with the MobileNet detector (here),
    # in quality with the ResNet-50 one (corrupt here). seg2face runs on aligned label maps only: no detector.
    rows = tuple(TaskRow(task, mode, model, "a photo", "synthetic", dtype="float32", backend="torch", peak_ram_bytes=10**8,
                         peak_bytes=10**8, seconds_per_face=1.0, ran_mode=mode)
                 for task, model in (("colorize", "GPEN-Colorization-1024"), ("seg2face", "GPEN-Seg2face-512"))
                 for mode in ("balanced", "quality"))
    prof = dataclasses.replace(_profile(), tasks=rows)
    table = report.tasks_table(prof, PLENTY, files=report.files_here(prof, half_a_folder))
    colorize = next(line for line in table.splitlines() if line.startswith("| `colorize`")).split(" | ")
    assert "`python -m gpen_core download GPEN-Colorization-1024`" in colorize[1]  # balanced
    assert "`python -m gpen_core download GPEN-Colorization-1024 retinaface-resnet50`" in colorize[2]  # quality
    seg2face = next(line for line in table.splitlines() if line.startswith("| `seg2face`"))
    assert seg2face.count("`python -m gpen_core download GPEN-Seg2face-512`") == 2


def test_with_every_file_here_the_report_names_none(half_a_folder: Path) -> None:
    (half_a_folder / "detection_Resnet50_Final.pth").unlink()
    (half_a_folder / "GPEN-BFR-256.pth").write_bytes(b"the 256 generator")
    files = report.files_here(_profile(), half_a_folder)
    assert set(files.modes) == set(MODES)
    assert files.modes["quality"] == ("retinaface-resnet50",)
    assert all(not lacking for mode, lacking in files.modes.items() if mode != "quality")
    rec = report.recommendation(_profile(), PLENTY, files)
    assert "gpen_core download" not in report.format_table(_profile(), PLENTY, files=files).split("`quality`")[0]
    assert rec.endswith("`python -m gpen_core download retinaface-resnet50` enables it; until then `auto` runs `balanced`"
                        " (measured with synthetic weights: the memory figures hold, the output would not be restored)")


def test_the_report_the_panel_and_the_failure_name_the_same_files() -> None:
    """An empty models folder: quality needs the 512 generator and the ResNet-50 detector, and all
    three places say so (the README's modes table: quality runs GPEN-BFR-512 with RetinaFace ResNet-50)."""
    from gpen_core.options import RestoreOptions
    from gpen_app import readiness
    from gpen_core.restorer import Restorer

    want = ("GPEN-BFR-512", "retinaface-resnet50")
    files = report.files_here(_profile())
    assert files.modes["quality"] == want
    cell = _table_row(report.format_table(_profile(), PLENTY, files=files), "quality")
    assert "`python -m gpen_core download GPEN-BFR-512 retinaface-resnet50`" in cell

    r, _ = readiness.current("cpu")
    assert r.modes["quality"].missing == want

    photo = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(WeightsError) as err:
        Restorer(device="cpu")(photo, RestoreOptions(mode="quality"))
    assert "`python -m gpen_core download GPEN-BFR-512 retinaface-resnet50`" in str(err.value)


def test_the_app_check_tab_names_the_missing_files(half_a_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import profile_store as store
    from gpen_app import checks

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(PLENTY.ram_bytes))
    prof = _profile()
    store.save_profile(Profile(**{**prof.__dict__, "fingerprint": store.fingerprint("cpu", synthetic=True)}))
    md = checks.saved_check("cpu", allowed=True).markdown
    memory_alone = next(line for line in md.splitlines() if line.startswith("Memory alone: "))
    assert memory_alone.startswith("Memory alone: use `quality`")
    assert "`python -m gpen_core download retinaface-resnet50` enables it; until then `auto` runs `balanced`" in memory_alone
    assert "no: missing GPEN-BFR-256" in _table_row(md, "low")
