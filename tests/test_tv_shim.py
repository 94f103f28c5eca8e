"""The torchvision stand-ins: same results as torchvision, and the restore path imports none of it.

Detections are compared between two fresh processes, one where facexlib gets the real
torchvision and one where it gets the stand-ins (a process that has imported the real
torchvision keeps using it, by design).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpen_core.compat import torchvision as tv_shim

from .conftest import ROOT, shared_path

HEAVY = ("torchvision", "torch._dynamo", "triton")


def _run(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env=None
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_nms_keeps_the_same_boxes_as_torchvision() -> None:
    tv_ops = pytest.importorskip("torchvision.ops")
    g = torch.Generator().manual_seed(0)
    checked = 0
    for trial in range(120):
        n = int(torch.randint(1, 200, (1,), generator=g))
        xy = torch.rand(n, 2, generator=g) * 100
        boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 40 + 0.5], 1)
        scores = torch.rand(n, generator=g)
        if trial % 3 == 0:  # many exact ties: the order among equals must match too
            scores = (scores * 4).round() / 4
        for th in (0.3, 0.4, 0.7):
            expected = tv_ops.nms(boxes, scores, th)
            got = tv_shim.nms(boxes, scores, th)
            assert got.dtype == torch.int64
            assert torch.equal(got, expected), (trial, th)
            checked += int(expected.numel() < n)  # something was suppressed
    assert checked > 100
    assert tv_shim.nms(torch.zeros(0, 4), torch.zeros(0), 0.4).numel() == 0


def test_resnet50_has_torchvisions_keys_and_computes_the_same() -> None:
    """As facexlib's RetinaFace uses it: the body up to layer4 (the classifier is never kept)."""
    tv_models = pytest.importorskip("torchvision.models")
    from torchvision.models._utils import IntermediateLayerGetter

    stages = {"layer2": 1, "layer3": 2, "layer4": 3}  # facexlib's return_layers for resnet50
    real = IntermediateLayerGetter(tv_models.resnet50(weights=None), stages).eval()
    ours = tv_shim.IntermediateLayerGetter(tv_shim.resnet50(pretrained=False), stages).eval()
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, v.shape) for k, v in real.state_dict().items()]
    ours.load_state_dict(real.state_dict())
    x = torch.randn(1, 3, 96, 80, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = ours(x), real(x)
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    with pytest.raises(ValueError, match="untrained"):
        tv_shim.resnet50(pretrained=True)


def test_intermediate_layer_getter_returns_named_stages_and_stops_after_the_last() -> None:
    net = tv_shim.resnet50()
    body = tv_shim.IntermediateLayerGetter(net, {"layer2": 1, "layer3": 2})
    assert list(body.keys()) == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3"]
    out = body.eval()(torch.randn(1, 3, 64, 64))
    assert list(out) == [1, 2] and out[1].shape == (1, 512, 8, 8) and out[2].shape == (1, 1024, 4, 4)
    with pytest.raises(ValueError, match="not present"):
        tv_shim.IntermediateLayerGetter(net, {"nope": "x"})


def test_context_removes_only_what_it_added() -> None:
    code = (
        "import sys\n"
        "from gpen_core.compat import torchvision as tv_shim\n"
        "with tv_shim.for_facexlib() as used:\n"
        "    import torchvision.models as m, torchvision.ops as o\n"
        "    inside = tv_shim.is_shim(m) and tv_shim.is_shim(o) and used\n"
        "left = [k for k in sys.modules if k.startswith('torchvision')]\n"
        "import torchvision\n"
        "with tv_shim.for_facexlib() as used2:\n"
        "    import torchvision.ops as o2\n"
        "print(inside, left, tv_shim.is_shim(torchvision), used2, tv_shim.is_shim(o2))\n"
    )
    if "torchvision" not in _installed():
        pytest.skip("torchvision is not installed: nothing to compare the stand-ins with")
    assert _run(code) == "True [] False False False"


def _installed() -> set[str]:
    import importlib.util

    return {n for n in ("torchvision",) if importlib.util.find_spec(n) is not None}


# One process per backend: "real" imports torchvision first, so facexlib gets it.
_DETECT = r"""
import json, sys
import numpy as np
if sys.argv[1] == "real":
    import torchvision  # noqa: F401
from PIL import Image
from gpen_core.compat import torchvision as tv_shim
from gpen_core.faces.detect import FaceDetector
with tv_shim.for_facexlib() as used:
    det = FaceDetector(sys.argv[2], "mobilenet0.25")
out = {"shim": used, "heavy": [m for m in ("torchvision", "torch._dynamo", "triton") if m in sys.modules]}
for path in sys.argv[3:]:
    rgb = np.asarray(Image.open(path).convert("RGB"))
    out[path] = [[list(d.box), d.score, d.landmarks.tolist()] for d in det.detect(rgb, threshold=0.5)]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_detections_on_real_photos_are_identical_with_the_stand_ins() -> None:
    pytest.importorskip("torchvision")
    weights = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    photos = [str(shared_path("faces", "Solvay_conference_1927.png"))]
    photos += [str(p) for p in sorted(Path(photos[0]).parent.glob("ffhq_*_512.png"))]
    real = json.loads(_run(_DETECT, "real", str(weights), *photos))
    shim = json.loads(_run(_DETECT, "shim", str(weights), *photos))
    assert real.pop("shim") is False and shim.pop("shim") is True
    assert "torchvision" in real.pop("heavy")
    assert shim.pop("heavy") == [], "the stand-in process still imported torchvision / dynamo / triton"
    assert len(real[photos[0]]) >= 20  # the Solvay photo: about 29 faces
    for p in photos:
        assert len(real[p]) >= 1, p
        assert shim[p] == real[p], f"detections differ on {p}"  # exact: same boxes, scores, landmarks


_RESNET = r"""
import sys, torch, json
if sys.argv[1] == "real":
    import torchvision  # noqa: F401
from gpen_core.compat import torchvision as tv_shim
with tv_shim.for_facexlib():
    from facexlib.detection.retinaface import RetinaFace
    net = RetinaFace(network_name="resnet50", half=False, phase="test", device="cpu").eval()
if sys.argv[1] == "real":
    torch.manual_seed(0)
    for p in net.parameters():  # small random weights: every layer matters
        p.data.normal_(0, 0.02)
    torch.save(net.state_dict(), sys.argv[2])
else:
    net.load_state_dict(torch.load(sys.argv[2], weights_only=True))
x = torch.load(sys.argv[3], weights_only=True)
with torch.no_grad():
    outs = net(x)
torch.save([o.clone() for o in outs], sys.argv[2] + "." + sys.argv[1])
print("ok")
"""


@pytest.mark.slow
def test_resnet50_retinaface_computes_the_same_through_the_stand_ins(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    from PIL import Image

    photo = shared_path("faces", "Solvay_conference_1927.png")
    rgb = np.asarray(Image.open(photo).convert("RGB").resize((332, 142)), dtype=np.float32)
    x = torch.from_numpy(rgb[..., ::-1].copy()).permute(2, 0, 1)[None] - torch.tensor([104.0, 117.0, 123.0]).view(1, 3, 1, 1)
    torch.save(x, tmp_path / "x.pt")
    sd = tmp_path / "sd.pt"
    _run(_RESNET, "real", str(sd), str(tmp_path / "x.pt"))
    _run(_RESNET, "shim", str(sd), str(tmp_path / "x.pt"))
    real = torch.load(str(sd) + ".real", weights_only=True)
    shim = torch.load(str(sd) + ".shim", weights_only=True)
    assert len(real) == len(shim) == 3
    for a, b in zip(real, shim):
        assert torch.equal(a, b)


def test_building_a_detector_imports_no_torchvision_dynamo_or_triton(models_with_detector: Path) -> None:
    """The restore path as the engine takes it: import_backends, then a detector, then one detection."""
    code = (
        "import sys, numpy as np\n"
        "from gpen_core.faces.detect import FaceDetector, import_backends\n"
        "import_backends()\n"
        f"det = FaceDetector({str(models_with_detector / 'detection_mobilenet0.25_Final.pth')!r}, 'mobilenet0.25')\n"
        "det.detect(np.zeros((64, 64, 3), np.uint8))\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    assert _run(code) == "[]"
