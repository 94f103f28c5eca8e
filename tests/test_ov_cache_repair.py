"""The OpenVINO cache when it cannot be written, when an entry is damaged, and what its sweep may touch.

Tests run as root, whom chmod does not stop: a read-only cache is simulated the way a user
meets it without a read-only mount, a *file* named ``openvino`` where the cache folder should
be (mkdir there fails with NotADirectoryError / FileExistsError, as on a read-only mount with EROFS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpen_core.runtimes.openvino.choice import BackendChoice
import torch

from gpen_core.runtimes.openvino import base

from .conftest import shared_path
from .fixtures_openvino import ConvertedIRs

pytestmark = pytest.mark.skipif(base.openvino_version() is None, reason="needs OpenVINO (requirements.txt)")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _tiny_model(seed: float = 1.0):
    """An OpenVINO model with a weight constant (so model.bin has bytes to lose)."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 64], np.float32, name="x")
    w = ops.constant(np.full((64, 64), seed, np.float32))
    return ov.Model([ops.matmul(x, w, False, False)], [x], "tiny")


def _tiny_checkpoint(tmp_path: Path) -> Path:
    ref = torch.load(shared_path("reference", "gpen_tiny64.pt"), weights_only=True)
    ckpt = tmp_path / "gpen_tiny64.pth"
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    return ckpt


# ---------------------------------------------------------------- the sweep and save_ir


def test_the_sweep_never_follows_a_link_out_of_the_cache(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "models" / "openvino", tmp_path / "elsewhere"
    root.mkdir(parents=True)
    victim = elsewhere / f".convert-{_dead_pid()}-abc"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("not the cache's")
    (root / "evil").symlink_to(elsewhere)
    own = root / "model-1" / f".convert-{_dead_pid()}-def"
    own.mkdir(parents=True)

    removed = base.clean_stale_conversions(root)
    assert removed == [own]
    assert (victim / "keep.txt").read_text() == "not the cache's"


def test_save_ir_keeps_another_process_finished_copy_and_replaces_an_older_one(tmp_path: Path) -> None:
    final = tmp_path / "openvino" / "tiny-1111" / "ov-test"
    base.save_ir(_tiny_model(), final, {"graph": 3, "checkpoint": "/a/x.pth"}, time.perf_counter())
    theirs = (final / "model.bin").stat().st_ino
    # the same conversion finished by another process (another path to the same weights): kept as it is
    base.save_ir(_tiny_model(), final, {"graph": 3, "checkpoint": "/b/x.pth"}, time.perf_counter())
    assert (final / "model.bin").stat().st_ino == theirs
    assert json.loads((final / "meta.json").read_text())["checkpoint"] == "/a/x.pth"
    # an entry of an older export is replaced
    base.save_ir(_tiny_model(2.0), final, {"graph": 4, "checkpoint": "/a/x.pth"}, time.perf_counter())
    assert json.loads((final / "meta.json").read_text())["graph"] == 4
    assert sorted(p.name for p in final.parent.iterdir()) == ["ov-test"]  # nothing set aside stays


def test_save_ir_records_each_file_size_and_sha256(tmp_path: Path) -> None:
    import hashlib

    final = tmp_path / "openvino" / "tiny-1111" / "ov-test"
    base.save_ir(_tiny_model(), final, {"what": "test"}, time.perf_counter())
    files = json.loads((final / "meta.json").read_text())["files"]
    data = (final / "model.bin").read_bytes()
    assert files["model.bin"] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert files["model.xml"]["size"] == (final / "model.xml").stat().st_size


# ---------------------------------------------------------------- a damaged entry


@pytest.mark.parametrize("recorded", [True, False], ids=["sizes-recorded", "older-entry"])
def test_a_truncated_bin_is_set_aside_not_loaded_forever(tmp_path: Path, recorded: bool) -> None:
    final = tmp_path / "openvino" / "tiny-1111" / "ov-test"
    base.save_ir(_tiny_model(), final, {"what": "test"}, time.perf_counter())
    if not recorded:  # an entry written before sizes were recorded: its load failure is what tells
        meta = json.loads((final / "meta.json").read_text())
        del meta["files"]
        (final / "meta.json").write_text(json.dumps(meta))
    with open(final / "model.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(base.CacheDamaged, match="damaged.*converted again"):
        base.compile_entry(final, final / "compiled", {})
    assert not final.exists()
    assert sorted(p.name for p in final.parent.iterdir()) == []


def test_restorer_runs_torch_once_on_a_damaged_entry_then_converts_again(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    ckpt, models = _tiny_checkpoint(tmp_path), tmp_path / "models"
    converted_ir.seed("gpen_tiny64", models)  # a sound entry first, as a first use leaves it
    face = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    opts = RestoreOptions(backend="openvino", mode="low", aligned=True, model=str(ckpt))
    assert Restorer(models_dir=models)(face, opts).backend == "openvino"
    [bin_file] = (models / "openvino").rglob("model.bin")
    with open(bin_file, "r+b") as f:
        f.truncate(bin_file.stat().st_size // 2)

    hurt = Restorer(models_dir=models)(face, opts)
    assert hurt.backend == "torch"
    assert any("damaged" in n and "this request ran the generator" in n and n.endswith("on torch") for n in hurt.notes), hurt.notes
    assert not bin_file.exists()
    again = Restorer(models_dir=models)(face, opts)
    assert again.backend == "openvino"
    assert any("converted the generator to OpenVINO on first use" in n for n in again.notes)


# ---------------------------------------------------------------- a cache that cannot be written


def _read_only_models(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "openvino").write_text("not a folder")  # as root, the one sure way to refuse writes here
    return models


def test_an_unwritable_cache_is_found_before_converting(tmp_path: Path) -> None:
    models = _read_only_models(tmp_path)
    why = base.unwritable_reason(base.cache_root(models))
    assert why and "cannot be written" in why and "--backend torch" in why
    assert base.unwritable_reason(base.cache_root(tmp_path / "fresh")) is None
    with pytest.raises(base.CacheUnwritable):
        base.save_ir(_tiny_model(), base.cache_root(models) / "tiny-1111" / "ov-test", {}, time.perf_counter())


@pytest.mark.parametrize("backend", ["openvino", "auto"])
def test_restorer_on_an_unwritable_cache_runs_torch_and_says_so(tmp_path: Path, backend: str, monkeypatch) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.runtimes.openvino import generator as ov_generator

    if backend == "auto":  # auto picks OpenVINO for this generator, as a measurement on this CPU would
        monkeypatch.setattr(ov_generator, "choose_mode_backend", lambda *a, **k: BackendChoice("openvino", "measured faster here"))
    ckpt, models = _tiny_checkpoint(tmp_path), _read_only_models(tmp_path)
    face = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    r = Restorer(models_dir=models)
    for _ in range(2):  # every request, not only the first
        res = r(face, RestoreOptions(backend=backend, mode="low", aligned=True, model=str(ckpt)))
        assert res.backend == "torch"
        assert sum("cannot be written" in n and "on torch" in n for n in res.notes) == 1, res.notes


def test_the_detector_on_an_unwritable_cache_runs_torch_and_says_so(tmp_path: Path) -> None:
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.options import RestoreOptions

    models = _read_only_models(tmp_path)
    (models / "detection_mobilenet0.25_Final.pth").symlink_to(shared_path("weights", "detection_mobilenet0.25_Final.pth"))
    notes: list[str] = []
    det = ModelCache(models).detector("mobilenet0.25", "cpu", RestoreOptions(backend="openvino"), notes)
    assert det.backend == "torch"
    assert any("cannot be written" in n and "mobilenet0.25 detector ran on torch" in n for n in notes), notes


def test_download_reports_an_unconvertible_cache_and_exits_non_zero(tmp_path: Path, capsys, monkeypatch) -> None:
    from gpen_core import cli
    from gpen_core.runtimes.openvino import generator as ov_generator

    monkeypatch.setattr(ov_generator, "choose_mode_backend", lambda *a, **k: BackendChoice("openvino", "measured faster here"))
    models = _read_only_models(tmp_path)
    (models / "detection_mobilenet0.25_Final.pth").symlink_to(shared_path("weights", "detection_mobilenet0.25_Final.pth"))
    rc = cli.main(["download", "--models-dir", str(models), "retinaface-mobilenet0.25"])
    out = capsys.readouterr()
    assert rc == 4, out
    assert "could not convert" in out.err and "cannot be written" in out.err
    assert "ready" not in out.out + out.err and "Traceback" not in out.err
