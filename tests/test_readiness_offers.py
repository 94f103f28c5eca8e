"""The cheapest fix first: every download worth offering, and every missing file named at once."""

from __future__ import annotations

import numpy as np
import pytest

from gpen_core.errors import WeightsError
from gpen_app import readiness, weights_view
from gpen_app.readiness import assess
from gpen_core.weights.lookup import REGISTRY

from .test_readiness import COMBOS, PLENTY, files_with, needs_cpu


def test_one_generator_present_offers_the_small_detector_before_the_large_one() -> None:
    files = files_with(COMBOS["512 only"])
    r = assess(files, needs_cpu(), PLENTY)
    assert [(o.files, o.enables) for o in r.offers] == [
        (("retinaface-mobilenet0.25",), ("balanced", "faces-only")),
        (("retinaface-resnet50",), ("quality",)),
    ]
    panel = weights_view.weights_markdown(r, files, "/models", mode=None)
    assert "choose **balanced** as Memory mode and Download fetches only MobileNet detector (1.8 MB)" in panel
    # the explicit mode's button then fetches exactly that
    assert weights_view.download_button_label(r, files, "balanced") == "Download MobileNet detector (1.8 MB) for balanced"


def test_an_empty_folder_offers_each_step_up_the_ladder_cheapest_first() -> None:
    files = files_with(())
    r = assess(files, needs_cpu(), PLENTY)
    assert [o.enables[0] for o in r.offers] == ["low", "balanced", "quality"]
    sizes = [sum(files[n].download_bytes or 0 for n in o.files) for o in r.offers]  # the sizes the panel shows
    assert sizes == sorted(sizes) and sizes[0] < 80_000_000  # GPEN-BFR-256 + the 1.8 MB detector
    assert r.offers[-1].files == r.download  # the Download button in auto: the recommended set


def test_nothing_is_offered_that_a_cheaper_offer_beats() -> None:
    # GPEN-BFR-256 + mobilenet present: low runs; GPEN-BFR-512 alone enables balanced
    files = files_with(("GPEN-BFR-256", "retinaface-mobilenet0.25"))
    r = assess(files, needs_cpu(), PLENTY)
    assert r.runs_now == "low"
    assert [o.files for o in r.offers] == [("GPEN-BFR-512",), ("GPEN-BFR-512", "retinaface-resnet50")]
    everything = assess(files_with(COMBOS["everything"]), needs_cpu(), PLENTY)
    assert everything.offers == ()


def test_the_mobilenet_is_not_rounded_to_2_mb() -> None:
    assert readiness.size_text(1_789_735, False) == "1.8 MB"
    assert readiness.size_text(109_497_761, False) == "109 MB"
    assert readiness.size_text(284_022_236, True) == "~284 MB"


def test_a_restore_names_every_missing_file_at_once(_isolated_models_home) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    photo = np.full((64, 64, 3), 128, np.uint8)
    with pytest.raises(WeightsError) as err:
        Restorer(models_dir=_isolated_models_home, device="cpu")(photo, RestoreOptions(mode="balanced", upscale=2))
    text = str(err.value)
    head, fix = text.split("\n")[:2]
    for name, size in (("GPEN-BFR-512", "~284 MB"), ("retinaface-mobilenet0.25", "1.8 MB"), ("realesrnet_x2", "size not published")):
        assert name in head and size in head
    assert "3 files" in head
    assert "`python -m gpen_core download GPEN-BFR-512 retinaface-mobilenet0.25 realesrnet_x2`" in fix
    assert str(_isolated_models_home) in fix


def test_offline_download_help_lists_every_file_still_to_get() -> None:
    text = weights_view.download_failed_text("GPEN-BFR-512 (GPEN-BFR-512.pth) is not reachable: offline.",
                                       ("GPEN-BFR-512", "retinaface-resnet50"), "/models")
    assert "GPEN-BFR-512.pth" in text and "detection\\_Resnet50\\_Final.pth" in text
    assert "`python -m gpen_core download GPEN-BFR-512 retinaface-resnet50`" in text
    assert "109 MB" in text


def test_a_generator_of_unpublished_size_still_gets_the_small_detector_offered_first() -> None:
    # GPEN-Colorization-1024 has no published size: every mode's set holds that one unknown,
    # and the detectors (1.8 MB against 109 MB) must still decide which set is cheaper.
    assert REGISTRY["GPEN-Colorization-1024"].size_bytes is None
    files = files_with(())
    r = assess(files, needs_cpu(), PLENTY, model="GPEN-Colorization-1024")
    assert [o.enables[0] for o in r.offers] == ["balanced", "quality"]
    assert r.offers[0].files == ("GPEN-Colorization-1024", "retinaface-mobilenet0.25")
    assert r.offers[1].files == ("GPEN-Colorization-1024", "retinaface-resnet50")
