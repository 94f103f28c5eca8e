"""The engine end to end: detection, restore, paste-back, modes, meter, cache, fallbacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpen_core.errors import InputError, WeightsError
from gpen_core.restorer import Restorer, RestoreOptions

from .conftest import shared_path


def _solvay_rgb() -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(shared_path("faces", "Solvay_conference_1927.png")).convert("RGB"))


def test_group_photo_every_face_restored_and_measured(models_with_detector: Path, gen256_narrow: Path) -> None:
    rgb = _solvay_rgb()
    r = Restorer()
    res = r(rgb, RestoreOptions(mode="low", model=str(gen256_narrow)))
    assert len(res.faces) >= 10
    assert res.mode.name == "low" and res.requested_mode == "low" and res.detector == "mobilenet0.25"
    assert res.image.shape == rgb.shape and res.image.dtype == np.uint8
    changed = np.any(res.image != rgb, axis=2)
    # every face box got pasted into; far from every face nothing changed
    for f in res.faces:
        x0, y0, x1, y1 = (int(v) for v in f.box)
        assert changed[max(y0, 0) : y1, max(x0, 0) : x1].mean() > 0.3
        assert f.crop.shape == f.restored.shape == (256, 256, 3)
    assert changed.mean() < 0.5
    p = res.peaks
    assert p.rss_bytes > p.baseline_rss_bytes > 0
    assert p.method in ("vmhwm", "sampling")
    t = res.timings
    assert t.total_s >= t.detect_s + t.restore_s > 0
    assert res.output_format == "jpeg" and res.encoded[:2] == b"\xff\xd8"


def test_aligned_input_skips_detection(gen256: Path) -> None:
    from PIL import Image

    rgb = np.asarray(Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB"))
    res = Restorer()(rgb, RestoreOptions(mode="low", model=str(gen256), aligned=True))
    assert res.detector == "none" and len(res.faces) == 1
    assert res.image.shape == rgb.shape
    assert not np.array_equal(res.image, rgb)


def test_photo_without_face_comes_back_unchanged_with_a_note(models_with_detector: Path, gen256: Path) -> None:
    rgb = np.full((300, 400, 3), 128, np.uint8)
    res = Restorer()(rgb, RestoreOptions(mode="low", model=str(gen256)))
    assert res.faces == ()
    assert np.array_equal(res.image, rgb)
    assert any("no face" in n for n in res.notes)


def test_face_cap_is_reported(models_with_detector: Path, gen256_narrow: Path) -> None:
    res = Restorer()(_solvay_rgb(), RestoreOptions(mode="low", model=str(gen256_narrow), max_faces=3))
    assert len(res.faces) == 3
    assert any("the 3 with the highest detection scores" in n for n in res.notes)
    scores = [f.score for f in res.faces]
    assert scores == sorted(scores, reverse=True)  # the official order


def _record_connections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every TCP connection attempted from now on, refused instead of made."""
    import socket

    tried: list[object] = []

    def refuse(address: object, *a: object, **k: object) -> None:
        tried.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried


def test_missing_weights_fail_fast_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast: before any model loads, and without a download try (benchmarks/bench.py --refusals times it)."""
    tried = _record_connections(monkeypatch)
    r = Restorer()
    with pytest.raises(WeightsError) as e:
        r(np.zeros((64, 64, 3), np.uint8), RestoreOptions(mode="low"))
    assert "GPEN-BFR-256" in str(e.value) and "python -m gpen_core download" in str(e.value)
    assert tried == [] and set(r.loaded().values()) == {None}


def test_bad_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="alpha"):
        RestoreOptions(alpha=2).validated()
    with pytest.raises(InputError, match="unknown memory mode"):
        RestoreOptions(mode="turbo").validated()
    with pytest.raises(InputError, match="RGB uint8"):
        Restorer()(np.zeros((4, 4), np.float32), RestoreOptions(mode="low"))


def test_larger_model_measures_larger_peak_and_switching_frees_the_old_one(gen256: Path, gen512: Path) -> None:
    face = np.asarray(np.random.default_rng(0).integers(0, 256, (512, 512, 3)), np.uint8)
    r = Restorer()
    small = r(face, RestoreOptions(mode="quality", model=str(gen256), aligned=True))
    big = r(face, RestoreOptions(mode="quality", model=str(gen512), aligned=True))
    assert big.checkpoint == str(gen512) and r.loaded()["generator"] == str(gen512)
    assert big.peaks.rss_bytes - big.peaks.baseline_rss_bytes > small.peaks.rss_bytes - small.peaks.baseline_rss_bytes
    # back to the small model: the 512 weights (~284 MB) are freed before the 256 ones load
    again = r(face, RestoreOptions(mode="quality", model=str(gen256), aligned=True))
    assert r.loaded()["generator"] == str(gen256)
    assert again.peaks.rss_bytes < big.peaks.rss_bytes + 50_000_000
    assert again.peaks.baseline_rss_bytes > 0


def test_failed_switch_rolls_back_to_the_working_model(gen256: Path, tmp_path: Path) -> None:
    face = np.zeros((256, 256, 3), np.uint8)
    r = Restorer()
    r(face, RestoreOptions(mode="low", model=str(gen256), aligned=True))
    bad = tmp_path / "broken.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError):
        r(face, RestoreOptions(mode="low", model=str(bad), aligned=True))
    assert r.loaded()["generator"] is not None
    assert Path(r.loaded()["generator"]).name == gen256.name or r.loaded()["generator"] == gen256.stem


def test_a_failed_roll_back_is_reported_beside_the_first_failure(gen256: Path, tmp_path: Path) -> None:
    """When the model that worked cannot be reloaded either (its file gone meanwhile), the
    first failure is raised, says so, and nothing stays loaded."""
    import shutil

    face = np.zeros((256, 256, 3), np.uint8)
    working = tmp_path / "working-256.pth"
    shutil.copyfile(gen256, working)
    r = Restorer()
    r(face, RestoreOptions(mode="low", model=str(working), aligned=True))
    working.unlink()
    bad = tmp_path / "broken.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError) as info:
        r(face, RestoreOptions(mode="low", model=str(bad), aligned=True))
    assert "broken.pth" in str(info.value)
    assert any("working-256 could not be reloaded either" in n for n in getattr(info.value, "__notes__", [])), info.value
    assert r.loaded()["generator"] is None


def test_auto_steps_down_when_little_memory_is_free(monkeypatch: pytest.MonkeyPatch, gen256: Path) -> None:
    face = np.zeros((256, 256, 3), np.uint8)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(400e6))
    res = Restorer(device="cpu")(face, RestoreOptions(mode="auto", model=str(gen256), aligned=True))
    assert res.mode.name == "low" and "auto chose low" in res.mode_reason
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    res = Restorer(device="cpu")(face, RestoreOptions(mode="auto", model=str(gen256), aligned=True))
    assert res.mode.name == "quality"


def test_explicit_mode_that_does_not_fit_steps_down_openly(monkeypatch: pytest.MonkeyPatch, gen256: Path) -> None:
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(500e6))
    res = Restorer(device="cpu")(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="quality", model=str(gen256), aligned=True))
    assert res.mode.name != "quality" and res.requested_mode == "quality"
    assert any("ran" in n and "instead" in n for n in res.notes)


def test_auto_prefers_modes_whose_weights_are_present(models_with_detector: Path, gen256: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only GPEN-BFR-256 and the mobilenet detector are present: auto must pick low, not quality.
    (models_with_detector / "GPEN-BFR-256.pth").symlink_to(gen256)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    res = Restorer(device="cpu")(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="auto", aligned=True))
    assert res.mode.name == "low"
    assert "weights not downloaded" in res.mode_reason


def test_get_restorer_refuses_arguments_it_cannot_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process-wide instance is made once: a later call with other arguments raises instead of
    silently returning an instance with the first call's models folder or device."""
    from gpen_core import restorer as restorer_module

    monkeypatch.setattr(restorer_module, "_INSTANCE", None)  # this test's own process-wide instance
    (tmp_path / "models").mkdir()
    first = restorer_module.get_restorer(models_dir=tmp_path / "models", device="cpu")
    assert restorer_module.get_restorer() is first  # no arguments: the instance as it is
    assert restorer_module.get_restorer(models_dir=str(tmp_path / "x" / ".." / "models"), device="cpu") is first  # same folder
    with pytest.raises(ValueError, match=r"device='meta'.*already made with device='cpu'"):
        restorer_module.get_restorer(device="meta")
    with pytest.raises(ValueError, match=r"models_dir=.*other.*already made with models_dir=.*models"):
        restorer_module.get_restorer(models_dir=tmp_path / "other")
    assert first.models_dir == tmp_path / "models"  # unchanged by the refused calls
