"""One meaning per name: the callbacks and records that several rooms share are defined once."""

from __future__ import annotations

import re

from .conftest import ROOT

PKG = ROOT / "gpen_core"


def _definitions(name: str) -> list[str]:
    """Where ``name`` is defined at a module's top level (a class, or an assignment of a type alias)."""
    pattern = re.compile(rf"^(class {name}\b|{name}\s*(:[^=]*)?=)", re.M)
    files = [*PKG.rglob("*.py"), *(ROOT / "gpen_app").rglob("*.py")]  # the app's parts mean the same
    return sorted(str(p.relative_to(ROOT)) for p in files if pattern.search(p.read_text(encoding="utf-8")))


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
    assert _definitions("DecodedFrame") == ["gpen_core/video/stream.py"]


def test_photos_and_frames_choose_their_mode_through_one_function() -> None:
    # auto's choice and the asked mode's fit, for a photo (engine/pipeline) and a clip's frames (engine/frames)
    callers = sorted(str(p.relative_to(ROOT)) for p in (PKG / "engine").glob("*.py")
                     if re.search(r"\bbudget\.(choose|check_fits)\(", p.read_text(encoding="utf-8")))
    assert callers == [], callers  # both go through budget.mode_to_start (the app's previews may still ask choose)
    users = sorted(str(p.relative_to(ROOT)) for p in (PKG / "engine").glob("*.py")
                   if "mode_to_start(" in p.read_text(encoding="utf-8"))
    assert users == ["gpen_core/engine/budget.py", "gpen_core/engine/frames.py", "gpen_core/engine/pipeline.py"]


def test_the_hardware_check_loads_the_networks_it_times_as_a_request_does() -> None:
    # One rule decides how a network is loaded: the engine's ModelCache (path, verification, plan, runtime, OpenVINO
    # cache). The check times what a request loads, so no module of it builds a detector, parser or generator itself;
    # the self-check's subject is building each network on a device, and the tips' child times the official
    # computation (a random GPEN as yangxy/GPEN builds it), not a request's load.
    import ast

    builders = {"FaceDetector", "build_retinaface", "ParsingMasker", "FaceParser", "ParseNet", "load_generator",
                "load_torch_generator", "load_openvino_generator", "openvino_detector", "openvino_masker",
                "random_generator", "load_upscaler", "random_upscaler"}
    runtime_modules = {"ov_detect", "ov_parse", "ov_backend", "detector", "parser", "generator"}  # their load(): a build

    def built(path) -> list[str]:
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
                if node.attr == "load" and isinstance(node.value, ast.Name) and node.value.id in runtime_modules:
                    names.add(f"{node.value.id}.load")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpen_core.runtimes"):
                names.update(f"{node.module}.{a.name}" for a in node.names if a.name == "load")
            elif isinstance(node, ast.alias):
                names.add(node.name.rsplit(".", 1)[-1])
        return sorted(n for n in names if n in builders or n.endswith(".load"))

    found = {str(p.relative_to(ROOT)): b for p in sorted((PKG / "hwcheck").glob("*.py")) if (b := built(p))}
    assert found.pop("gpen_core/hwcheck/advice_child.py", None) == ["random_generator"]
    assert "gpen_core/hwcheck/selfcheck.py" in found  # it does build them (the check above can see a build)
    del found["gpen_core/hwcheck/selfcheck.py"]
    assert found == {}, found
