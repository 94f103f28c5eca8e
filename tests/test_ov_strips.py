"""The OpenVINO export's full-size level in strips of rows: the same function, and really in strips.

gpen_core.runtimes.openvino.export computes the last decoder level strip by strip, each from
the half-size rows it needs plus a halo, so that the CPU plugin holds one strip's
intermediates at a time (docs/performance.md, "OpenVINO: the full-size level in strips").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gpen_core.runtimes.openvino import export as ov_export
from gpen_core.runtimes.openvino import generator as ov_backend

from .conftest import shared_path

needs_openvino = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)


def _checkpoint(name: str, tmp_path: Path) -> tuple[Path, torch.Tensor]:
    """The shared reference's weights as a float32 checkpoint, and a random input far from [-1, 1]
    (large activations make a wrong row stand out)."""
    ref = torch.load(shared_path("reference", name), weights_only=True)
    ckpt = tmp_path / (Path(name).stem + ".pth")
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    x = torch.randn(ref["input"].shape, generator=torch.Generator().manual_seed(3)) * 3
    return ckpt, x


def _worst_rows(out: torch.Tensor, expected: torch.Tensor) -> str:
    err = (out - expected).abs().amax(dim=(0, 1, 3))
    rows = torch.argsort(err, descending=True)[:5].tolist()
    return ", ".join(f"row {r}: {float(err[r]):.2g}" for r in rows)


def _assert_same(out: torch.Tensor, expected: torch.Tensor, tol: float) -> None:
    assert out.shape == expected.shape
    size = int(expected.shape[2])
    # the true borders (no halo beyond the image) first, then every row
    for name, rows in (("top", slice(0, 8)), ("bottom", slice(size - 8, size)), ("all", slice(0, size))):
        worst = float((out[:, :, rows] - expected[:, :, rows]).abs().max())
        assert worst <= tol, f"{name} rows differ by {worst:.3g} (worst: {_worst_rows(out, expected)})"


@pytest.mark.parametrize("strips", [2, 3, 4, 8])
@pytest.mark.parametrize("name", ["gpen_tiny64.pt", "gpen_tiny128_cm2.pt"])
def test_the_strips_are_the_whole_level(name: str, strips: int, tmp_path: Path) -> None:
    from gpen_core.networks.checkpoint import load_generator

    ckpt, x = _checkpoint(name, tmp_path)
    with torch.no_grad():
        expected = load_generator(ckpt)(x)
        out = ov_export.exportable(load_generator(ckpt), strips=strips)(x)
    _assert_same(out, expected, 1e-5)


def test_a_smaller_halo_is_wrong_at_the_strip_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The halo is the least that works: one half-size row less changes the rows next to every
    strip boundary (so the test above would see a wrong halo)."""
    from gpen_core.networks.checkpoint import load_generator

    ckpt, x = _checkpoint("gpen_tiny64.pt", tmp_path)
    monkeypatch.setattr(ov_export, "HALF_SIZE_HALO", ov_export.HALF_SIZE_HALO - 1)
    with torch.no_grad():
        expected = load_generator(ckpt)(x)
        out = ov_export.exportable(load_generator(ckpt), strips=4)(x)
    err = (out - expected).abs().amax(dim=(0, 1, 3))
    assert float(err.max()) > 1e-3
    bad = {int(r) for r in torch.nonzero(err > 1e-5).flatten()}
    boundaries = (16, 32, 48)  # 64 rows in 4 strips
    assert bad and all(min(abs(r - b) for b in boundaries) <= 2 for r in bad), sorted(bad)


def test_strips_must_fit_the_level() -> None:
    with pytest.raises(ValueError, match="strips must be between 1 and 32"):
        ov_export._strip_bounds(64, 33)
    assert ov_export._strip_bounds(64, 3) == [0, 20, 42, 64]  # even boundaries: whole half-size rows


def _convert(ckpt: Path, strips: int):
    from gpen_core.networks.checkpoint import load_generator

    model = ov_export.exportable(load_generator(ckpt), strips=strips)
    return ov_backend.to_openvino(model, model.config.size), model.config.size


def _decoder_full_width_convs(ov_model, size: int) -> list[tuple[int, ...]]:
    """Output shapes of the convs with run-time (modulated) weights and full-size width: the
    decoder's full-size level (the encoder's and the blurs' weights are constants)."""
    from .test_ov_export import _weight_is_constant

    shapes = []
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() not in ("Convolution", "ConvolutionBackpropData"):
            continue
        shape = tuple(op.get_output_shape(0))
        if shape[3] >= size and not _weight_is_constant(op.input(1).get_source_output().get_node()):
            shapes.append(shape)
    return shapes


@needs_openvino
def test_the_converted_graph_runs_the_full_size_level_in_strips(tmp_path: Path) -> None:
    ckpt, _ = _checkpoint("gpen_tiny128_cm2.pt", tmp_path)
    whole, size = _convert(ckpt, 1)
    striped, _ = _convert(ckpt, ov_export.FULL_SIZE_STRIPS)
    n = ov_export.FULL_SIZE_STRIPS
    assert n > 1
    whole_convs = _decoder_full_width_convs(whole, size)
    strip_convs = _decoder_full_width_convs(striped, size)
    assert whole_convs and all(s[2] >= size for s in whole_convs)
    assert len(strip_convs) == n * len(whole_convs)
    # a strip's rows plus its halo (4 full-size rows a side, +1 for the transposed conv)
    assert max(s[2] for s in strip_convs) <= size // n + 4 * ov_export.HALF_SIZE_HALO + 1


@needs_openvino
def test_the_engine_converts_the_strip_graph_and_it_equals_torch(tmp_path: Path) -> None:
    """The IR the engine converts and compiles, against the plain torch model: every row, borders included."""
    import json

    from gpen_core.networks.checkpoint import load_generator

    ckpt, x = _checkpoint("gpen_tiny128_cm2.pt", tmp_path)
    fwd = ov_backend.load(ckpt, "f32", models_dir=tmp_path / "models")
    meta = json.loads((fwd.key.ir_dir(ov_backend.cache_root(tmp_path / "models")) / "meta.json").read_text())
    assert meta["graph"] == ov_backend.GRAPH_REVISION >= 3
    with torch.no_grad():
        expected = load_generator(ckpt)(x)
    out = torch.from_numpy(np.asarray(fwd(x.numpy())))
    _assert_same(out, expected, 1e-5)


@needs_openvino
def test_each_to_rgb_runs_before_the_next_level(tmp_path: Path) -> None:
    """The CPU plugin runs each level's ToRGB before the level after next (so no level's output
    pair waits for it through the rest of the decoder), as the export orders the skip sums."""
    import re

    import openvino as ov

    ckpt, _ = _checkpoint("gpen_tiny128_cm2.pt", tmp_path)
    ov_model, _ = _convert(ckpt, ov_export.FULL_SIZE_STRIPS)
    compiled = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        found = re.search(r"generator\.(to_rgbs|convs)\.(\d+)\b", op.get_friendly_name())
        if found and "execOrder" in info:
            key, at = f"{found[1]}.{found[2]}", int(info["execOrder"].astype(str))
            first[key], last[key] = min(first.get(key, at), at), max(last.get(key, at), at)
    levels = len([k for k in first if k.startswith("to_rgbs.")])
    assert levels >= 4
    for k in range(levels - 1):
        # to_rgbs.k follows convs.2k+1; convs.2k+3 is the next level's second conv
        assert last[f"to_rgbs.{k}"] < first[f"convs.{2 * k + 3}"], f"to_rgbs.{k} ran after the next level"
