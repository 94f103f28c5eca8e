"""With the real released weights, when they are in the user's models folder: GPEN really restores.

Marked ``weights``; each test skips naming the file it needs and the command that
fetches it. The folder is read from ``$GPEN_HOME`` (default ``~/.cache/gpen``) at
import, before the suite's autouse fixture points ``GPEN_HOME`` at an empty folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from gpen_core.weights import lookup as weights
from gpen_core.networks.checkpoint import load_generator
from gpen_core.restorer import Restorer, RestoreOptions

from .conftest import ROOT, SHARED

pytestmark = pytest.mark.weights

REAL_HOME = Path(os.environ.get("GPEN_HOME") or "~/.cache/gpen").expanduser()
EXAMPLE = ROOT / "examples" / "hopper_heavy_jpeg.jpg"


def _real(name: str) -> Path:
    path = weights.locate(name, models_dir=REAL_HOME) if REAL_HOME.is_dir() else None
    if path is None:
        spec = weights.REGISTRY[name]
        pytest.skip(f"needs the real {spec.filename} in {REAL_HOME} (`python -m gpen_core download {name}`), which is not present")
    return path


def _sharpness(rgb: np.ndarray) -> float:
    """Variance of the Laplacian of the grey image: higher is sharper."""
    return float(cv2.Laplacian(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), cv2.CV_64F).var())


@pytest.mark.parametrize("name", ["GPEN-BFR-256", "GPEN-BFR-512", "GPEN-BFR-1024", "GPEN-BFR-2048"])
def test_released_generator_loads_unchanged_with_its_registry_architecture(name: str) -> None:
    path = _real(name)
    model = load_generator(path)
    assert model.config == weights.REGISTRY[name].arch
    assert not model.training


@pytest.mark.parametrize("mode, model", [("low", "GPEN-BFR-256"), ("quality", "GPEN-BFR-512")])
def test_real_weights_restore_a_degraded_face(mode: str, model: str, tmp_path: Path) -> None:
    _real(model)
    detector = weights.locate("retinaface-mobilenet0.25", models_dir=REAL_HOME)
    home = tmp_path / "models"
    home.mkdir()
    (home / f"{model}.pth").symlink_to(_real(model))
    det = detector or SHARED / "weights" / "detection_mobilenet0.25_Final.pth"
    if not det.exists():
        pytest.skip("needs detection_mobilenet0.25_Final.pth (models folder or ../shared/weights)")
    (home / "detection_mobilenet0.25_Final.pth").symlink_to(det)

    res = Restorer(models_dir=home)(str(EXAMPLE), RestoreOptions(mode=mode, detector="mobilenet0.25"))
    assert res.mode.name == mode and len(res.faces) == 1, res.notes
    face = res.faces[0]
    # A restored face: much sharper than the blocky input crop, and still the same face
    # (its colours stay close; random weights would give noise or a flat colour).
    assert _sharpness(face.restored) > 1.5 * _sharpness(face.crop)
    small = lambda a: cv2.resize(a, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)  # noqa: E731
    assert np.abs(small(face.restored) - small(face.crop)).mean() < 25


@pytest.mark.parametrize("variant", ["256 px float32", "512 px bfloat16", "256 px bfloat16"])
def test_real_parsenet_cheaper_masks_stay_close_to_the_official_512_mask(variant: str) -> None:
    """The cheaper masks `balanced` may use (256 px input; bfloat16 where native) against
    the official 512 px float32 mask, on the real FFHQ faces of ../shared: IoU of the kept
    region ≥ 0.95 and the final (blurred) mask within 0.1 on average. Needs the real parser."""
    import torch

    from gpen_core.faces.parse import ParsingMasker
    from gpen_core.networks.plan import cpu_features

    path = weights.locate("ParseNet-latest", models_dir=REAL_HOME) if REAL_HOME.is_dir() else None
    path = path or (weights.locate("parsenet", models_dir=REAL_HOME) if REAL_HOME.is_dir() else None)
    if path is None:
        pytest.skip(f"needs the real ParseNet-latest.pth or parsing_parsenet.pth in {REAL_HOME} "
                    "(`python -m gpen_core download ParseNet-latest`), which is not present")
    size, dtype = variant.split(" px ")
    if dtype == "bfloat16" and not cpu_features()["native_bf16"]:
        pytest.skip("bfloat16 needs a CPU with native bf16 (AVX-512 BF16 / AMX); this one has none")
    faces = sorted((SHARED / "faces").glob("ffhq_*_512.png")) if SHARED.is_dir() else []
    if not faces:
        pytest.skip("needs the FFHQ faces of ../shared/faces, which are not present")
    official = ParsingMasker(path, input_size=512, dtype=torch.float32)
    cheaper = ParsingMasker(path, input_size=int(size), dtype=getattr(torch, dtype))
    for face in faces:
        rgb = cv2.cvtColor(cv2.imread(str(face)), cv2.COLOR_BGR2RGB)
        a, b = official(rgb), cheaper(rgb)
        inter = np.logical_and(a > 0.5, b > 0.5).sum()
        union = np.logical_or(a > 0.5, b > 0.5).sum()
        assert union > 0.2 * a.size, f"{face.name}: the official mask keeps almost nothing"
        assert inter / union >= 0.95, f"{face.name}: IoU {inter / union:.3f} ({variant} vs 512 px float32)"
        assert float(np.abs(a - b).mean()) <= 0.1, f"{face.name}: mean |Δmask| {np.abs(a - b).mean():.3f}"
