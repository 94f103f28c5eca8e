"""One runtime decision for every network (engine.runtime_choice.decide_runtime), and its rule
that a conversion happens inside a request only when the work ahead repays it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine.runtime_choice import RuntimeFacts, decide_runtime
from gpen_core.runtimes.openvino import generator as ov_backend

MB = 2**20
# OpenVINO measured faster for a generator not converted yet, with room to convert it, in a resident cache.
FIRST_USE = RuntimeFacts(
    network="generator", what="the generator GPEN-BFR-256", requested="auto",
    measured=("openvino", "measured faster here: 0.10 s vs torch 0.20 s per face"), torch_dtype="bfloat16",
    openvino_dtype="float32", converted=False, convert_ram=757 * MB, free_ram=8000 * MB, converting="GPEN-BFR-256.pth",
)


def test_the_measured_choice_stands_while_nothing_needs_converting() -> None:
    torch_ = decide_runtime(replace(FIRST_USE, measured=("torch", "asked for")))
    assert (torch_.runtime, torch_.dtype, torch_.reason, torch_.note) == ("torch", "bfloat16", "asked for", None)
    done = decide_runtime(replace(FIRST_USE, converted=True, free_ram=0, conversion_pays=False))
    assert (done.runtime, done.dtype, done.note) == ("openvino", "float32", None)  # converted: no first-use concern
    resident = decide_runtime(FIRST_USE)  # a resident cache with room converts it once, in the request
    assert resident.runtime == "openvino" and resident.reason.startswith("measured faster here")


def test_auto_runs_torch_when_the_conversion_does_not_fit_does_not_pay_or_is_under_way() -> None:
    tight = decide_runtime(replace(FIRST_USE, free_ram=100 * MB))
    assert tight.runtime == "torch" and tight.dtype == "bfloat16"
    assert tight.note == tight.reason and "converting GPEN-BFR-256.pth" in tight.note and "is free" in tight.note
    one_shot = decide_runtime(replace(FIRST_USE, conversion_pays=False))
    assert one_shot.runtime == "torch" and one_shot.note
    assert "`python -m gpen_core download`" in one_shot.note and "the generator GPEN-BFR-256" in one_shot.note
    busy = decide_runtime(replace(FIRST_USE, busy="being converted in the background"))
    assert busy.runtime == "torch" and busy.note == "being converted in the background"
    # An explicit openvino converts as asked, whatever the memory, the lifetime or another thread.
    asked = decide_runtime(replace(FIRST_USE, requested="openvino", measured=("openvino", "asked for"), free_ram=0,
                                   conversion_pays=False, busy="busy"))
    assert (asked.runtime, asked.reason, asked.note) == ("openvino", "asked for", None)


needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")


@pytest.fixture()
def home(tmp_path: Path, gen256: Path) -> Path:
    """A models folder with a GPEN-BFR-256 checkpoint put there by hand (never converted), where
    OpenVINO was measured faster for it in every dtype."""
    (tmp_path / "GPEN-BFR-256.pth").symlink_to(gen256)
    for dtype in ("float32", "bfloat16"):
        ov_backend.record_speed(256, dtype, torch_s=0.2, openvino_s=0.1, models_dir=tmp_path, source="test")
    return tmp_path


@needs_openvino
def test_a_one_photo_request_runs_torch_instead_of_converting_and_says_how_to_convert_ahead(home: Path, one_thread: None) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    crop = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    opts = RestoreOptions(mode="balanced", model=str(home / "GPEN-BFR-256.pth"), aligned=True)
    res = Restorer(models_dir=home, device="cpu", one_shot=True)(crop, opts)
    assert res.backend == "torch" and "python -m gpen_core download" in res.backend_reason
    assert any("python -m gpen_core download" in n for n in res.notes), res.notes
    generator = [r for r in res.runtimes if r.network == "generator"]
    assert len(generator) == 1 and generator[0].runtime == "torch" and generator[0].reason == res.backend_reason
    assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # nothing was converted
    assert res.image.shape == crop.shape
