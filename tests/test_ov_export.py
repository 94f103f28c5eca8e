"""The graph exported for OpenVINO (gpen_core.runtimes.openvino.export): the same function, in the form that runs fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.runtimes.openvino import export as ov_export

from .conftest import shared_path
from .fixtures_openvino import ConvertedIRs

pytestmark = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)


def _reference(name: str, tmp_path: Path) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """The shared reference as a checkpoint file (float32), its input and official output."""
    ref = torch.load(shared_path("reference", name), weights_only=True)
    ckpt = tmp_path / (Path(name).stem + ".pth")
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    return ckpt, ref["input"], ref["output"]


def _modulated_convs(model: torch.nn.Module) -> list[torch.nn.Module]:
    from gpen_core.networks.arch import ModulatedConv2d

    return [m for m in model.modules() if isinstance(m, ModulatedConv2d)]


@pytest.mark.parametrize("ratio", [None, 0, 10**9], ids=["measured", "all-input-modulated", "all-weight-modulated"])
@pytest.mark.parametrize("name", ["gpen_tiny128_cm2.pt", "gpen_bfr256_random.pt"])
def test_every_export_form_is_the_official_function(name: str, ratio: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Input- and weight-modulated convs (plain, transposed, taking split halves) all match the reference."""
    from gpen_core.networks.checkpoint import load_generator

    if ratio is not None:
        monkeypatch.setattr(ov_export, "INPUT_MOD_RATIO", ratio)
    ckpt, x, expected = _reference(name, tmp_path)
    model = ov_export.exportable(load_generator(ckpt))
    demodulated = [m for m in _modulated_convs(model) if m.demodulate]
    kinds = {m.export_input_modulated for m in demodulated}
    if ratio == 0:
        assert kinds == {True}
    elif ratio is not None:
        assert kinds == {False}
    elif name == "gpen_bfr256_random.pt":
        assert kinds == {True, False}  # the real 256 px architecture takes both forms
    with torch.no_grad():
        out = model(x)
    assert out.shape == expected.shape
    assert (out - expected).abs().max() <= 1e-5


def _weight_is_constant(node) -> bool:
    kind = node.get_type_name()
    if kind == "Constant":
        return True
    if kind == "Parameter":
        return False
    return all(_weight_is_constant(i.get_source_output().get_node()) for i in node.inputs())


def test_ir_packs_the_input_modulated_weights_and_sums_no_weights(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    """The speed-up's premise, checked on the IR: input-modulated convs have constant weights, and
    demodulation reduces no weight at run time (a mat-vec with a constant instead)."""
    import openvino as ov

    from gpen_core.networks.checkpoint import load_generator

    ckpt, _, _ = _reference("gpen_bfr256_random.pt", tmp_path)
    root = converted_ir.seed("gpen_bfr256_random", tmp_path / "models")  # the IR the engine converts to
    xml = ov_backend.cache_key(ckpt, "f32").ir_dir(root) / "model.xml"
    ops = ov.Core().read_model(xml).get_ordered_ops()
    assert not [op for op in ops if op.get_type_name() == "ReduceSum"]
    convs = [op for op in ops if op.get_type_name() in ("Convolution", "ConvolutionBackpropData")]
    varying = [op for op in convs if not _weight_is_constant(op.input(1).get_source_output().get_node())]
    # Expected per weight-modulated conv: one conv op, or two for a stride-1 conv given the
    # (features, noise) halves (every decoder conv but the first and the upsampling ones);
    # the full-size level's convs once per strip.
    model = ov_export.exportable(load_generator(ckpt))
    g = model.generator
    first, full_size = g.conv1.conv, {id(g.convs[-2].conv), id(g.convs[-1].conv), id(g.to_rgbs[-1].conv)}
    expected = sum((1 if (m.upsample or m is first) else 2) * (ov_export.FULL_SIZE_STRIPS if id(m) in full_size else 1)
                   for m in _modulated_convs(model) if not m.export_input_modulated)
    assert any(m.export_input_modulated for m in _modulated_convs(model))
    assert len(varying) == expected, f"{len(varying)} convs with run-time weights, expected {expected}"
    # Everything else (encoder, blurs, input-modulated convs) has constant weights.
    assert len(convs) - len(varying) > sum(m.export_input_modulated for m in _modulated_convs(model))


def test_an_ir_from_an_older_export_is_converted_again(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    ckpt, x, expected = _reference("gpen_tiny64.pt", tmp_path)
    converted_ir.seed("gpen_tiny64")  # a current export in this test's models folder, as a first use leaves it
    first = ov_backend.load(ckpt, "f32")
    assert first.convert_s is None
    meta_file = first.key.ir_dir(ov_backend.cache_root()) / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["graph"] == ov_backend.GRAPH_REVISION
    assert ov_backend.graph_is_current(first.key) and ov_backend.load(ckpt, "f32").convert_s is None
    meta["graph"] = ov_backend.GRAPH_REVISION - 1  # what an older release left in the models folder
    meta_file.write_text(json.dumps(meta))
    assert not ov_backend.graph_is_current(first.key)
    again = ov_backend.load(ckpt, "f32")
    assert again.convert_s is not None, "a stale export was reused"
    assert json.loads(meta_file.read_text())["graph"] == ov_backend.GRAPH_REVISION
    assert (again(x) - expected).abs().max() <= 1e-4
