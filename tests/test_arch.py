"""The generator: official key tables, numerical references, architecture inference."""

from __future__ import annotations

import re

import pytest
import torch

from gpen_core.networks.arch import GPEN, set_fir_impl, upfirdn2d_depthwise, upfirdn2d_native, make_kernel
from gpen_core.networks.checkpoint import infer_config, load_generator
from gpen_core.errors import WeightsError

from .conftest import shared_path
from .factories import RELEASED, TINY, random_state_dict, write_checkpoint


def _key_table(name: str) -> dict[str, tuple[str, str]]:
    rows = shared_path("reference", f"keys_{name}.tsv").read_text().splitlines()[1:]
    return {k: (shape, kind) for k, shape, kind in (r.split("\t") for r in rows)}


@pytest.mark.parametrize("name", list(RELEASED))
def test_state_dict_matches_official_key_table(name: str) -> None:
    table = _key_table(name)
    with torch.device("meta"):
        model = GPEN(RELEASED[name])
    sd = model.state_dict()
    buffers = {n for n, _ in model.named_buffers()}
    assert set(sd) == set(table)
    for k, (shape, kind) in table.items():
        assert str(tuple(sd[k].shape)) == shape, k
        assert (k in buffers) == (kind == "buffer"), k


@pytest.mark.parametrize("ref", ["gpen_tiny64.pt", "gpen_tiny128_cm2.pt", "gpen_bfr256_random.pt"])
@pytest.mark.parametrize("impl", ["depthwise", "native"])
def test_reproduces_official_reference_outputs(ref: str, impl: str) -> None:
    data = torch.load(shared_path("reference", ref), weights_only=True)
    sd = {k: v.float() for k, v in data["state_dict"].items()}
    model = load_generator(sd)
    cfg = data["config"]
    assert (model.config.size, model.config.style_dim, model.config.n_mlp) == (cfg["size"], cfg["style_dim"], cfg["n_mlp"])
    assert (model.config.channel_multiplier, model.config.narrow) == (cfg["channel_multiplier"], cfg["narrow"])
    set_fir_impl(model, impl)
    with torch.no_grad():
        out = model(data["input"].float())
    assert (out - data["output"]).abs().max().item() <= 1e-4


@pytest.mark.parametrize("up,down,pad", [(1, 1, (1, 1)), (1, 2, (2, 2)), (2, 1, (2, 1)), (2, 1, (1, 1)), (1, 1, (0, 0))])
def test_depthwise_fir_equals_native(up: int, down: int, pad: tuple[int, int]) -> None:
    x = torch.randn(2, 5, 11, 11)
    k = make_kernel([1, 3, 3, 1]) * (up**2)
    assert torch.allclose(upfirdn2d_depthwise(x, k, up, down, pad), upfirdn2d_native(x, k, up, down, pad), atol=1e-6)


@pytest.mark.parametrize("name", list(RELEASED))
def test_architecture_inferred_from_saved_checkpoint(name: str, tmp_path) -> None:
    path = write_checkpoint(tmp_path / f"{name}.pth", RELEASED[name])
    model = load_generator(path)
    assert model.config == RELEASED[name]
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("wrap", ["g_ema", "params_ema", "state_dict"])
def test_wrapped_state_dict(wrap: str, tmp_path) -> None:
    path = write_checkpoint(tmp_path / "w.pth", TINY, wrap=wrap)
    assert load_generator(path).config == TINY


def test_module_prefix_is_stripped() -> None:
    sd = {f"module.{k}": v for k, v in random_state_dict(TINY).items()}
    assert load_generator(sd).config == TINY


def test_non_gpen_checkpoint_is_refused_with_what_was_found(tmp_path) -> None:
    path = tmp_path / "resnet.pth"
    torch.save({"conv1.weight": torch.zeros(64, 3, 7, 7), "fc.weight": torch.zeros(10, 512)}, path)
    with pytest.raises(WeightsError) as e:
        load_generator(path)
    msg = str(e.value)
    assert "not a GPEN generator" in msg and "conv1.weight" in msg and "GPEN-BFR" in msg


@pytest.mark.parametrize("key, tensor", [("generator.input.input", torch.zeros(3)),
                                         ("generator.style.1.weight", torch.zeros(())),
                                         ("generator.input.input", torch.zeros(1, 0, 4, 4))])
def test_a_tensor_the_architecture_is_read_from_with_a_wrong_shape_is_refused_by_name(key, tensor) -> None:
    """A damaged file whose shapes the architecture is read from are wrong is a WeightsError naming the key, never
    an IndexError or a division by zero."""
    sd = random_state_dict(TINY)
    sd[key] = tensor
    with pytest.raises(WeightsError, match=re.escape(f"not a GPEN generator: {key} has shape {tuple(tensor.shape)}")):
        load_generator(sd)


def test_wrong_shape_is_refused_naming_the_key() -> None:
    sd = random_state_dict(TINY)
    sd["generator.to_rgb1.bias"] = torch.zeros(1, 4, 1, 1)
    with pytest.raises(WeightsError, match="generator.to_rgb1.bias"):
        load_generator(sd)


def test_missing_key_is_refused() -> None:
    sd = random_state_dict(TINY)
    del sd["generator.convs.0.conv.blur.kernel"]
    with pytest.raises(WeightsError, match="missing generator.convs.0.conv.blur.kernel"):
        load_generator(sd)


def test_corrupt_file_gives_actionable_error(tmp_path) -> None:
    path = write_checkpoint(tmp_path / "c.pth", TINY)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(WeightsError, match="corrupt or incomplete"):
        load_generator(path)


def test_infer_config_reads_narrow_and_multiplier() -> None:
    cfg = infer_config(random_state_dict(RELEASED["GPEN-BFR-256"]))
    assert (cfg.size, cfg.channel_multiplier, cfg.narrow) == (256, 1, 0.5)
