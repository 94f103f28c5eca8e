"""One-shot requests (the CLI with one photo): each network is loaded when its stage starts
and dropped when it ends, so the process's peak is the largest stage's, not the sum of the
networks. A server (the default) keeps every network loaded for the next request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpen_core.engine.lifetime import Lifetime

from .conftest import ROOT

ONE_SHOT, RESIDENT = Lifetime.ONE_SHOT, Lifetime.RESIDENT

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"


def _spy_loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Record, at every load call, which models were resident just before it."""
    from gpen_core.engine.model_cache import ModelCache

    seen: list[tuple[str, dict[str, Any]]] = []
    for kind in ("detector", "generator", "parser"):
        original = getattr(ModelCache, kind)

        def spy(self: ModelCache, *a: Any, _original: Any = original, _kind: str = kind, **k: Any) -> Any:
            seen.append((_kind, self.loaded()))
            return _original(self, *a, **k)

        monkeypatch.setattr(ModelCache, kind, spy)
    return seen


def _request(models: Path, gen256: Path, one_shot: bool):
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    # balanced: detector, generator and a parsing mask (synthetic ParseNet weights), all on torch
    r = Restorer(models_dir=models, device="cpu", synthetic_weights=True, lifetime=ONE_SHOT if one_shot else RESIDENT)
    res = r(EXAMPLE, RestoreOptions(mode="balanced", model=str(gen256), backend="torch"))
    return r, res


def test_one_shot_holds_one_network_at_a_time_and_gives_the_same_photo(
    monkeypatch: pytest.MonkeyPatch, models_with_detector: Path, gen256: Path, one_thread: None
) -> None:
    import torch

    from gpen_core.faces import parse

    # The synthetic parser takes random weights from torch's generator, which the two load orders
    # leave in different states: seed it, so both requests run the same parser.
    unseeded = parse.ParsingMasker.__init__

    def seeded(self: Any, *a: Any, **k: Any) -> None:
        torch.manual_seed(0)
        unseeded(self, *a, **k)

    monkeypatch.setattr(parse.ParsingMasker, "__init__", seeded)
    seen = _spy_loads(monkeypatch)
    from gpen_core.faces import photo

    restoring: list[dict[str, Any]] = []
    unwrapped = photo.restore_photo

    def restore_photo(*a: Any, **k: Any) -> Any:
        restoring.append(r.loaded())
        return unwrapped(*a, **k)

    monkeypatch.setattr(photo, "restore_photo", restore_photo)
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    r = Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True, lifetime=ONE_SHOT)
    res = r(EXAMPLE, RestoreOptions(mode="balanced", model=str(gen256), backend="torch"))
    assert res.faces, res.notes
    order = [kind for kind, _ in seen]
    assert order == ["generator", "detector", "parser"], order
    # The faces are restored with the generator alone: the detector went after detecting, the
    # parser comes at the first mask, once the generator is gone.
    assert restoring == [{"generator": restoring[0]["generator"], "detector": None, "parser": None, "upscaler": None}]
    assert restoring[0]["generator"] is not None
    assert dict(seen)["parser"]["generator"] is None and dict(seen)["parser"]["detector"] is None
    assert r.loaded() == {"generator": None, "detector": None, "parser": None, "upscaler": None}
    assert any("face-parsing mask" in n for n in res.notes), res.notes  # the parser did run
    assert not any("feathered-rectangle" in n for n in res.notes), res.notes

    seen.clear()
    r2, kept = _request(models_with_detector, gen256, one_shot=False)
    # A server loads everything up front and keeps it for the next request.
    assert [kind for kind, _ in seen] == ["generator", "parser", "detector"]
    assert all(v is not None for k, v in r2.loaded().items() if k != "upscaler"), r2.loaded()
    np.testing.assert_array_equal(res.image, kept.image)  # same networks, same photo


def test_the_cli_asks_for_one_shot_only_for_a_single_photo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gen256: Path,
                                                          models_with_detector: Path) -> None:
    from gpen_core import restorer as restorer_mod
    from gpen_core.cli import main

    asked: list[bool] = []

    class Spy(restorer_mod.Restorer):
        def __init__(self, *a: Any, **k: Any) -> None:
            asked.append(k.get("lifetime") is ONE_SHOT)
            super().__init__(*a, **k)

    monkeypatch.setattr(restorer_mod, "Restorer", Spy)
    src = tmp_path / "in"
    src.mkdir()
    crop = tmp_path / "face.png"
    from gpen_core.images.decode import encode_image

    crop.write_bytes(encode_image(np.full((64, 64, 3), 128, np.uint8), "png"))
    args = ["--mode", "low", "--model", str(gen256), "--aligned", "--models-dir", str(models_with_detector)]
    assert main(["restore", str(crop), "-o", str(tmp_path / "one.png"), *args]) == 0
    for i in range(2):
        (src / f"f{i}.png").write_bytes(crop.read_bytes())
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), *args]) == 0
    assert asked == [True, False]


def test_a_lazy_parser_without_weights_masks_with_the_feathered_rectangle() -> None:
    from gpen_core.engine.model_cache import LazyParser
    from gpen_core.faces.masks import rectangle_mask

    loads: list[int] = []
    lazy = LazyParser(lambda: loads.append(1))  # returns None: no parser for this request
    assert lazy.parsed is None  # no face asked for a mask yet: nothing to claim
    crop = np.zeros((64, 64, 3), np.uint8)
    np.testing.assert_array_equal(lazy(crop), rectangle_mask(64))
    lazy(crop)
    assert loads == [1] and lazy.parsed is False  # loaded once; the result says the rectangle was used


def test_a_face_restored_once_more_than_counted_reloads_the_generator(
    monkeypatch: pytest.MonkeyPatch, models_with_detector: Path, gen256: Path, one_thread: None
) -> None:
    """The one-shot pipeline drops the generator after the faces it counted; a face restored
    again after that (a caller retrying one) loads it again instead of failing."""
    from gpen_core.faces import photo

    unwrapped = photo.restore_photo

    def restore_photo(*a: Any, **k: Any) -> Any:
        res = unwrapped(*a, **k)
        crop = np.full((256, 256, 3), 120, np.uint8)
        again = k["restore_fn"](crop)  # after the counted faces: the generator has been dropped
        assert again.shape == crop.shape
        return res

    monkeypatch.setattr(photo, "restore_photo", restore_photo)
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    r = Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True, lifetime=ONE_SHOT)
    res = r(EXAMPLE, RestoreOptions(mode="low", model=str(gen256), backend="torch"))
    assert res.faces, res.notes
    assert r.loaded()["generator"] is None  # and still dropped at the end


def test_an_openvino_generator_loads_after_the_detector_is_gone(
    monkeypatch: pytest.MonkeyPatch, models_with_detector: Path, gen256: Path, one_thread: None
) -> None:
    """One-shot, a generator on OpenVINO (its own allocations: no heap to share with torch) is
    loaded once detection is over, so it and the detector are never resident together; a torch
    one still loads first (the test above)."""
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.engine.runtime_choice import RuntimeDecision
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    # the decision only: the generator that loads is still torch's (no conversion in this test)
    openvino = RuntimeDecision("openvino", "float32", "measured faster")
    monkeypatch.setattr(ModelCache, "generator_decision", lambda self, mode, opts, device: openvino)
    seen = _spy_loads(monkeypatch)
    r = Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True, lifetime=ONE_SHOT)
    res = r(EXAMPLE, RestoreOptions(mode="balanced", model=str(gen256), backend="torch"))
    assert res.faces, res.notes
    assert [kind for kind, _ in seen] == ["detector", "generator", "parser"]
    at_load = dict(seen)["generator"]
    assert at_load["detector"] is None and at_load["generator"] is None
    # the deferred load is counted as loading, and the result still names the checkpoint and dtype
    assert res.timings.load_s > 0 and res.checkpoint == str(gen256) and res.dtype in ("bfloat16", "float32")
    # a server (not one-shot) keeps the up-front order whatever the runtime
    seen.clear()
    Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True)(
        EXAMPLE, RestoreOptions(mode="balanced", model=str(gen256), backend="torch"))
    assert [kind for kind, _ in seen][0] == "generator"


_DETECTOR_LOAD = """
import json, sys
from dataclasses import replace
from pathlib import Path

import torch

from gpen_core.engine.pipeline import import_engine
from gpen_core.engine.model_cache import ModelCache
from gpen_core.faces.detect import build_retinaface
from gpen_core.platform.meter import current_rss
from gpen_core.weights.registry import REGISTRY

import_engine()
models = Path(sys.argv[1])
net, _ = build_retinaface(None, "resnet50")  # random weights of the released network, as its file
torch.save({k: v.contiguous() for k, v in net.state_dict().items()}, models / "detection_Resnet50_Final.pth")
weights = sum(t.numel() * t.element_size() for t in net.state_dict().values())
del net
# The registry pins the released file's sha256: this stand-in is checked as an unpinned file is.
REGISTRY["retinaface-resnet50"] = replace(REGISTRY["retinaface-resnet50"], sha256=None, size_bytes=None)
cache = ModelCache(models)
cache.detector("resnet50", "cpu")  # hashes the file (once per process), and warms the allocator
cache.drop("detector", "cpu")
before = current_rss()
cache.detector("resnet50", "cpu", mode=None)
print(json.dumps({"grew": current_rss() - before, "weights": weights}))
"""


def test_a_loaded_network_leaves_no_load_copies_resident(tmp_path: Path) -> None:
    """The ResNet-50 detector loaded from its file in a fresh process: the process grows by about its
    weights, not by the load's freed copies too (the checkpoint read and the channels-last copy stayed in
    glibc's heap: +265 MiB for 104 MiB of weights, under quality's one-photo detect stage)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _DETECTOR_LOAD, str(tmp_path)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert 90 * 2**20 < got["weights"] < 120 * 2**20, got  # the released ResNet-50 RetinaFace: ~105 MB
    assert got["grew"] <= got["weights"] * 1.3, f"the process grew {got['grew'] / 2**20:.0f} MiB for {got['weights'] / 2**20:.0f} MiB of weights"
