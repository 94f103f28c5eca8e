"""One meaning per name: the callbacks and records that several rooms share are defined once."""

from __future__ import annotations

import re

from .conftest import ROOT

PKG = ROOT / "gpen_core"


def _definitions(name: str) -> list[str]:
    """Where ``name`` is defined at a module's top level (a class, or an assignment of a type alias)."""
    pattern = re.compile(rf"^(class {name}\b|{name}\s*(:[^=]*)?=)", re.M)
    return sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8")))


def test_progress_is_defined_once_for_each_thing_it_counts() -> None:
    assert _definitions("Progress") == ["gpen_core/progress.py"]
    assert _definitions("CountProgress") == ["gpen_core/progress.py"]


def test_prepared_means_one_thing() -> None:
    assert _definitions("Prepared") == ["gpen_core/engine/stages.py"]  # a decoded photo; a conversion's outcome is ConversionOutcome


def test_network_means_a_networks_part_in_a_request() -> None:
    # The detector's architecture names (mobilenet0.25, resnet50) are a DetectorName, not a Network.
    assert _definitions("Network") == ["gpen_core/engine/lifetime.py"]
    assert _definitions("DetectorName") == ["gpen_core/faces/detect.py"]


def test_scale_out_and_the_cli_share_one_list_of_photo_suffixes_and_one_worker_name() -> None:
    assert _definitions("IMAGE_SUFFIXES") == ["gpen_core/images/limits.py"]
    assert _definitions("SUFFIX_BY_FORMAT") == ["gpen_core/images/outputs.py"]
    assert _definitions("MANIFEST") == ["gpen_core/scaleout/batch.py"]
    workers = re.compile(r"^def (worker_name|_worker_id)\b", re.M)
    assert sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if workers.search(p.read_text(encoding="utf-8"))) == \
        ["gpen_core/scaleout/runtime.py"]


def test_a_clips_threads_hand_each_other_typed_items_not_tuples_read_by_position() -> None:
    text = (PKG / "video" / "stream.py").read_text(encoding="utf-8")
    assert not re.search(r"\bitem\[\d\]", text), "video/stream.py reads a queue item by position"
    assert _definitions("DecodedFrame") == ["gpen_core/video/queue_items.py"]


def test_photos_and_frames_choose_their_mode_through_one_function() -> None:
    # auto's choice and the asked mode's fit, for a photo (engine/pipeline) and a clip's frames (engine/frames)
    callers = sorted(str(p.relative_to(ROOT)) for p in (PKG / "engine").glob("*.py")
                     if re.search(r"\bbudget\.(choose|check_fits)\(", p.read_text(encoding="utf-8")))
    assert callers == [], callers  # both go through budget.mode_to_start (the app's previews may still ask choose)
    users = sorted(str(p.relative_to(ROOT)) for p in (PKG / "engine").glob("*.py")
                   if "mode_to_start(" in p.read_text(encoding="utf-8"))
    assert users == ["gpen_core/engine/budget.py", "gpen_core/engine/frames.py", "gpen_core/engine/pipeline.py"]
