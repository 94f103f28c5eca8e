"""``auto`` and the explicit-mode check count what background upscaling adds.

The extra is the figure the app shows beside the Upscale radio (``tiles.preview``), added to
every mode's peak before choosing; the reason says so. Built-in estimates only (each test's
models folder is empty, so no saved hardware profile), free memory given explicitly.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine import budget
from gpen_core.upscale import tiles
from gpen_core.platform.meter import format_bytes
from gpen_core.modes import MODES

PHOTO = (3000, 2000)  # 6 MP: ×4 makes a 12000×8000 result, under the 100 MP cap


def _need(mode: str, tmp_path: Path, upscale: int = 1, tile: int | None = None) -> int:
    return budget.estimate_peak(MODES[mode], "cpu", PHOTO, tmp_path, work=budget.Work(upscale=upscale, tile=tile))[0]


def _free_fitting_balanced_but_not_quality(tmp_path: Path) -> budget.Free:
    """Free RAM in which balanced fits without upscaling and quality does not (the old ``auto`` picks balanced)."""
    balanced, quality = _need("balanced", tmp_path), _need("quality", tmp_path)
    assert balanced < quality
    return budget.Free(int((balanced + quality) / 2 / budget.SAFETY_MARGIN), None)


def test_the_extra_is_the_apps_figure_for_each_mode(tmp_path: Path) -> None:
    for name in ("low", "balanced", "quality"):
        for factor in (2, 4):
            extra = _need(name, tmp_path, factor) - _need(name, tmp_path)
            assert extra == tiles.preview(*PHOTO, factor, name).extra_bytes > 0, (name, factor)
    # low pre-shrinks to 2048 px: it upscales (and pays for) fewer pixels
    assert _need("low", tmp_path, 4) - _need("low", tmp_path) < _need("balanced", tmp_path, 4) - _need("balanced", tmp_path)
    # no upscaling: nothing added; faces-only returns crops and never upscales
    assert budget.upscale_extra_bytes(MODES["balanced"], PHOTO, 1) == 0
    assert budget.upscale_extra_bytes(MODES["faces-only"], PHOTO, 4) == 0
    # the user's tile is counted: a 1024 px tile costs more than the mode's own
    assert _need("balanced", tmp_path, 2, tile=1024) > _need("balanced", tmp_path, 2)
    _, src = budget.estimate_peak(MODES["balanced"], "cpu", PHOTO, tmp_path, work=budget.Work(upscale=4))
    assert "built-in estimate" in src and "estimated for upscaling ×4" in src


def test_auto_steps_down_when_upscaling_does_not_fit(tmp_path: Path) -> None:
    free = _free_fitting_balanced_but_not_quality(tmp_path)
    plain = budget.choose("cpu", PHOTO, tmp_path, free)
    assert plain.mode.name == "balanced"  # what auto picked before it counted the upscaler
    assert "upscaling" not in plain.reason

    up = budget.choose("cpu", PHOTO, tmp_path, free, work=budget.Work(upscale=4))
    assert up.mode.name == "low", up.reason
    extra = tiles.preview(*PHOTO, 4, "low").extra_bytes
    assert f"~{format_bytes(extra)} of it estimated for upscaling ×4" in up.reason, up.reason
    assert f"~{format_bytes(_need('low', tmp_path, 4))} RAM" in up.reason, up.reason
    # the reason says why balanced was passed over, with both figures
    assert "passed over balanced (needs" in up.reason and "it fits only without upscaling ×4" in up.reason, up.reason
    assert f"~{format_bytes(_need('balanced', tmp_path, 4))} with upscaling" in up.reason, up.reason
    assert f"~{format_bytes(_need('balanced', tmp_path))} without" in up.reason, up.reason
    assert "quality" not in up.reason  # quality does not fit even without upscaling: not named

    # with plenty of memory, upscaling changes nothing but the figure
    roomy = budget.choose("cpu", PHOTO, tmp_path, budget.Free(64 * 10**9, None), work=budget.Work(upscale=4))
    assert roomy.mode.name == "quality" and "passed over" not in roomy.reason


def test_nothing_fits_with_upscaling_says_to_choose_a_smaller_upscale(tmp_path: Path) -> None:
    low_plain, low_up = _need("low", tmp_path), _need("low", tmp_path, 4)
    free = budget.Free(int((low_plain + low_up) / 2 / budget.SAFETY_MARGIN), None)
    assert budget.choose("cpu", PHOTO, tmp_path, free).reason.startswith("auto chose low: needs")
    c = budget.choose("cpu", PHOTO, tmp_path, free, work=budget.Work(upscale=4))
    assert c.mode.name == "low" and "the lightest mode: even it may need" in c.reason
    assert "would fit without upscaling ×4: choose a smaller upscale" in c.reason, c.reason


def test_an_explicit_mode_that_fits_only_without_upscaling_steps_down(tmp_path: Path) -> None:
    free = _free_fitting_balanced_but_not_quality(tmp_path)
    assert budget.check_fits(MODES["balanced"], "cpu", PHOTO, tmp_path, free) is None
    step = budget.check_fits(MODES["balanced"], "cpu", PHOTO, tmp_path, free, work=budget.Work(upscale=4))
    assert step is not None and step.mode.name == "low", step
    assert step.reason.startswith(f"balanced needs ~{format_bytes(_need('balanced', tmp_path, 4))} RAM")
    assert "estimated for upscaling ×4" in step.reason and "ran low instead" in step.reason


class _Models:
    """What pipeline.start asks of the model cache: where the profile lives, which weights are present."""

    def __init__(self, folder: Path) -> None:
        self.models_dir = folder

    def weights_present(self, mode, opts, boxes_given) -> bool:
        return True


@pytest.mark.parametrize("mode", ["auto", "balanced"])
def test_a_request_to_upscale_is_budgeted_with_the_upscaler(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import pipeline
    from gpen_core.options import RestoreOptions

    free = _free_fitting_balanced_but_not_quality(tmp_path)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(free.ram_bytes))
    photo = np.zeros((PHOTO[1], PHOTO[0], 3), np.uint8)
    plain = pipeline.start(photo, RestoreOptions(mode=mode), _Models(tmp_path), "cpu", False, time.perf_counter())
    assert plain.mode.name == "balanced", plain.reason
    up = pipeline.start(photo, RestoreOptions(mode=mode, upscale=4), _Models(tmp_path), "cpu", False, time.perf_counter())
    assert up.mode.name == "low" and "upscaling ×4" in up.reason, up.reason
    if mode == "balanced":  # the step down is a note in the result
        assert any("ran low instead" in n for n in up.notes), up.notes
