"""The video seam: Restorer.frames runs the photo path's detect and restore-and-paste stages per
frame, with the networks loaded once for the session and nothing encoded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpen_core.engine.lifetime import Lifetime

from .conftest import ROOT

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"


def _frame() -> np.ndarray:
    from gpen_core.images.decode import decode_image

    return decode_image(EXAMPLE).rgb


def test_a_frame_session_restores_frames_as_the_photo_path_does_with_the_networks_loaded_once(
    monkeypatch: pytest.MonkeyPatch, models_with_detector: Path, gen256_narrow: Path, one_thread: None
) -> None:
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    import torch

    from gpen_core.faces import parse

    # The synthetic parser takes random weights from torch's generator: seed it at each load, so
    # the photo and the session run the same parser.
    unseeded = parse.ParsingMasker.__init__

    def seeded(self: Any, *a: Any, **k: Any) -> None:
        torch.manual_seed(0)
        unseeded(self, *a, **k)

    monkeypatch.setattr(parse.ParsingMasker, "__init__", seeded)
    loads: list[str] = []
    real = ModelCache.generator

    def counted(self: ModelCache, *a: Any, **k: Any) -> Any:
        loads.append("generator")
        return real(self, *a, **k)

    frame = _frame()
    opts = RestoreOptions(mode="balanced", model=str(gen256_narrow), backend="torch")
    # One-shot restorer: the session still keeps its networks for every frame, then lets them go.
    r = Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True, lifetime=Lifetime.ONE_SHOT)
    photo = r(frame, opts)
    assert photo.faces, photo.notes
    monkeypatch.setattr(ModelCache, "generator", counted)
    with r.frames(opts, (frame.shape[1], frame.shape[0])) as session:
        assert session.mode.name == "balanced"
        assert {rt.network for rt in session.runtimes} >= {"generator", "detector"}
        detections = session.detect(frame)
        assert len(detections) == len(photo.faces)
        outs = [session.restore(frame, detections) for _ in range(2)]
        assert r.loaded()["generator"] is not None and r.loaded()["detector"] is not None
        assert r.busy  # the session holds the lock
    assert loads == ["generator"]  # loaded once for both frames
    assert r.loaded() == {"generator": None, "detector": None, "parser": None, "upscaler": None}
    for out in outs:
        assert out.image.dtype == np.uint8 and out.image.shape == frame.shape
        assert len(out.faces) == len(detections)
        # The same stages as the photo: the same pixels (synthetic weights are seeded per load alike)
        np.testing.assert_allclose(out.image.astype(int), photo.image.astype(int), atol=2)
    assert not np.array_equal(outs[0].image, frame)  # the faces were pasted back


def test_a_frame_session_refuses_what_a_video_cannot_take(models_with_detector: Path, gen256: Path) -> None:
    from gpen_core.errors import InputError
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    r = Restorer(models_dir=models_with_detector, device="cpu", synthetic_weights=True)
    with pytest.raises(InputError, match="enhance task"):
        with r.frames(RestoreOptions(mode="balanced", model=str(gen256), upscale=2), (64, 64)):
            pass
    assert not r.busy
