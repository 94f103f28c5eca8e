"""RetinaFace on OpenVINO (gpen_core.runtimes.openvino.detector): the same detections as torch, cached, chosen by measurement."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from gpen_core.runtimes.openvino import base as ov_runtime

from .conftest import shared_path
from .fixtures_openvino import ConvertedIRs

pytestmark = pytest.mark.skipif(ov_runtime.openvino_version() is None, reason="needs OpenVINO (pip install openvino)")

MOBILENET = ("weights", "detection_mobilenet0.25_Final.pth")


def _rgb(name: str) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(shared_path("faces", name))), cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    """(torch detector, OpenVINO detector) with the real mobilenet0.25 weights."""
    from gpen_core.engine.network_loads import openvino_detector
    from gpen_core.faces.detect import FaceDetector

    weights = shared_path(*MOBILENET)
    models = tmp_path_factory.mktemp("ov_models")
    return FaceDetector(weights, "mobilenet0.25"), openvino_detector(weights, "mobilenet0.25", models_dir=models)


def _assert_same(a: list, b: list, what: str) -> None:
    assert len(a) == len(b), f"{what}: torch found {len(a)} faces, OpenVINO {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.abs(np.subtract(x.box, y.box)).max() <= 0.5, f"{what} face {i}: boxes {x.box} vs {y.box}"
        assert np.abs(x.landmarks - y.landmarks).max() <= 0.5, f"{what} face {i}: landmarks moved"
        assert abs(x.score - y.score) <= 1e-4, f"{what} face {i}: scores {x.score} vs {y.score}"


@pytest.mark.parametrize(
    ("photo", "max_side", "min_faces"),
    [("Solvay_conference_1927.png", 1000, 20), ("Solvay_conference_1927.png", 640, 10), ("ffhq_00000_512.png", 1000, 1),
     ("ffhq_00001_512.png", 333, 1)],
)
def test_openvino_finds_the_same_faces_as_torch_on_real_photos(pair, photo: str, max_side: int, min_faces: int) -> None:
    torch_det, ov_det = pair
    rgb = _rgb(photo)
    a = torch_det.detect(rgb, max_side=max_side)
    b = ov_det.detect(rgb, max_side=max_side)
    assert len(a) >= min_faces  # the photo really has faces: the comparison is not of two empty lists
    _assert_same(a, b, f"{photo} at {max_side} px")
    # The second look runs the detector on a mosaic of another size (the IR's dynamic H and W).
    sa, sb = torch_det.screen(rgb, a), ov_det.screen(rgb, b)
    _assert_same(list(sa.kept), list(sb.kept), f"{photo} second look")
    assert len(sa.rejected) == len(sb.rejected)


def test_openvino_finds_nothing_where_torch_finds_nothing(pair) -> None:
    torch_det, ov_det = pair
    gray = np.full((300, 400, 3), 128, np.uint8)
    assert torch_det.detect(gray) == [] and ov_det.detect(gray) == []


def test_a_detector_from_the_cache_keeps_the_weights_variant(pair) -> None:
    """These weights are the 1MB variant (ReLU, its own anchors): the cached IR and meta keep both."""
    from gpen_core.engine.network_loads import openvino_detector

    torch_det, ov_det = pair
    assert torch_det.variant == ov_det.variant == "1mb"
    cached = openvino_detector(ov_det.weights_path, "mobilenet0.25", models_dir=ov_det._ov.ir_dir.parents[2])
    assert cached.convert_s is None and cached.variant == "1mb"
    rgb = _rgb("ffhq_00002_512.png")
    found = torch_det.detect(rgb)
    assert len(found) >= 1
    _assert_same(found, cached.detect(rgb), "from the cache")


@pytest.mark.slow  # ResNet-50 build + conversion: ~30 s on 2 busy cores
def test_resnet50_raw_outputs_match_torch(tmp_path: Path) -> None:
    """Random weights, class head included (weights_path=None zeroes it; here it is random)."""
    import torch

    from gpen_core.runtimes.openvino import detector as ov_detect
    from gpen_core.faces.detect import build_retinaface

    torch.manual_seed(0)
    net, _ = build_retinaface(None, "resnet50")
    with torch.no_grad():  # random features reach ~1e3: a small head keeps the logits O(1) (softmax not saturated)
        for p in net.ClassHead.parameters():
            p.normal_(0, 5e-4)
    ckpt = tmp_path / "r50-random.pth"
    torch.save({k: v.contiguous() for k, v in net.state_dict().items()}, ckpt)
    ov = ov_detect.load(ckpt, "resnet50", lambda p: build_retinaface(p, "resnet50"), models_dir=tmp_path)
    assert ov.convert_s is not None
    for h, w in ((240, 320), (200, 336)):  # not multiples of 32: FPN's upsampling sizes differ per level
        x = (torch.rand(1, 3, h, w) * 255 - 117).contiguous()
        with torch.inference_mode():
            ref = [t.numpy() for t in net(x)]
        got = ov.forward(x.numpy())
        for name, r, g in zip(("loc", "conf", "landmarks"), ref, got):
            assert g.shape == r.shape, f"{name} at {h}×{w}: {g.shape} vs {r.shape}"
            rel = float(np.abs(g - r).max() / np.abs(r).max())
            assert rel <= 1e-4, f"{name} at {h}×{w}: relative error {rel:.2e}"
        assert float(np.ptp(ref[1][0, :, 1])) > 1e-3  # the class scores vary: the comparison can fail


def test_the_cache_is_reused_without_torch_network(tmp_path: Path) -> None:
    from gpen_core.runtimes.openvino import detector as ov_detect
    from gpen_core.faces.detect import build_retinaface

    built: list[Path | None] = []

    def build(p: Path | None):
        built.append(p)
        return build_retinaface(p, "mobilenet0.25")

    first = ov_detect.load(None, "mobilenet0.25", build, models_dir=tmp_path)  # synthetic: random weights, written once
    assert first.convert_s is not None and len(built) == 2  # the random checkpoint, then the network converted from it
    key = first.key
    compiled = key.compiled_dir(ov_runtime.cache_root(tmp_path))
    assert ov_runtime.is_cached(key, tmp_path) and any(compiled.iterdir()), "no IR or compiled blob in the cache"
    again = ov_detect.load(None, "mobilenet0.25", build, models_dir=tmp_path)
    assert again.convert_s is None and len(built) == 2, "the second load converted again"
    x = np.random.default_rng(0).normal(0, 50, (1, 3, 96, 128)).astype(np.float32)
    for a, b in zip(first.forward(x), again.forward(x)):
        np.testing.assert_array_equal(a, b)


def test_auto_follows_the_recorded_measurement(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    from gpen_core.runtimes.openvino import generator as ov_backend
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.options import RestoreOptions

    converted_ir.seed("synthetic-mobilenet0.25", tmp_path)  # the conversion is the test above's subject, not this one's
    cache = ModelCache(tmp_path, synthetic_weights=True)
    auto = RestoreOptions(backend="auto")
    notes: list[str] = []
    assert cache.detector("mobilenet0.25", "cpu", auto, notes).backend == "torch" and notes == []
    net = "retinaface-mobilenet0.25"
    ov_backend.record_speed(1000, "float32", 0.30, 0.10, models_dir=tmp_path, source="test", network=net)
    det = cache.detector("mobilenet0.25", "cpu", auto, notes)
    assert det.backend == "openvino"
    assert any("mobilenet0.25 on OpenVINO" in n and "measured faster" in n for n in notes), notes
    assert det.detect(np.full((120, 160, 3), 90, np.uint8)) == []  # synthetic: runs, finds nothing
    ov_backend.record_speed(1000, "float32", 0.10, 0.30, models_dir=tmp_path, source="test", network=net)
    assert cache.detector("mobilenet0.25", "cpu", auto, []).backend == "torch"
    # The generator's record is not the detector's.
    assert ov_backend.choose_backend("auto", 1000, "float32", models_dir=tmp_path, network="retinaface-resnet50").runtime == "torch"


def test_openvino_detector_refuses_a_gpu_device() -> None:
    from gpen_core.faces.detect import FaceDetector

    with pytest.raises(ValueError, match="CPU only"):
        FaceDetector(None, "mobilenet0.25", "cuda:0", runner=object())


def test_low_loads_no_openvino_runtime_under_auto(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    """``low`` keeps a faster-on-OpenVINO detector and generator on torch under ``auto``
    (OpenVINO's runtime costs more memory than this mode trades for speed) and says why; the
    other modes follow each network's own measurement; asked for by name, OpenVINO runs in low too."""
    from gpen_core.runtimes.openvino import generator as ov_backend
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.modes import MODES
    from gpen_core.options import RestoreOptions

    converted_ir.seed("synthetic-mobilenet0.25", tmp_path)
    cache = ModelCache(tmp_path, synthetic_weights=True)
    auto = RestoreOptions(backend="auto")
    ov_backend.record_speed(1000, "float32", 0.30, 0.10, models_dir=tmp_path, source="test", network="retinaface-mobilenet0.25")
    ov_backend.record_speed(256, "float32", 0.30, 0.10, models_dir=tmp_path, source="test")
    assert cache.detector("mobilenet0.25", "cpu", auto, [], mode=MODES["low"]).backend == "torch"
    assert cache.detector("mobilenet0.25", "cpu", auto, [], mode=MODES["balanced"]).backend == "openvino"
    decision = cache.generator_decision(MODES["low"], RestoreOptions(mode="low", backend="auto"), "cpu")
    backend, why = decision.runtime, decision.reason
    assert backend == "torch" and "the low mode keeps to PyTorch under auto" in why and "0.10 s vs torch 0.30 s" in why
    asked = RestoreOptions(backend="openvino")
    assert cache.detector("mobilenet0.25", "cpu", asked, [], mode=MODES["low"]).backend == "openvino"
    asked_low = RestoreOptions(mode="low", backend="openvino")
    assert cache.generator_decision(MODES["low"], asked_low, "cpu").runtime == "openvino"
    # the same 256 px float32 measurement in a mode without the rule: OpenVINO
    assert ov_backend.choose_mode_backend(MODES["balanced"], "auto", 256, "float32", models_dir=tmp_path).runtime == "openvino"
