"""DataParallel's ``module.`` prefix: one rule (per key, as facexlib and basicsr) for every loader.

The generator (checkpoint), the upscaler, the detector and the parser all read their
state_dicts through :func:`gpen_core.networks.checkpoint.strip_module_prefix`; a file holding both
``module.x`` and ``x`` is refused instead of one silently winning.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from gpen_core.faces import detect
from gpen_core.networks import parsenet
from gpen_core.networks import upscaler
from gpen_core.networks.checkpoint import strip_module_prefix, unwrap_state_dict
from gpen_core.errors import WeightsError

A, B = torch.zeros(1), torch.ones(1)


def test_the_prefix_is_dropped_per_key_and_values_are_kept() -> None:
    out = strip_module_prefix({"module.a.weight": A, "b.weight": B, "modulex.c": A})
    assert list(out) == ["a.weight", "b.weight", "modulex.c"]  # order kept; only the exact prefix
    assert out["a.weight"] is A and out["b.weight"] is B
    assert strip_module_prefix({}) == {}


def test_a_key_present_with_and_without_the_prefix_is_refused() -> None:
    with pytest.raises(WeightsError, match=r"both 'module\.a' and 'a'.*model\.module\.state_dict"):
        strip_module_prefix({"module.a": A, "a": B}, "x.pth")


def test_every_loader_uses_the_same_rule(tmp_path: Path) -> None:
    mixed = {"module.a": A, "b": B}
    assert set(unwrap_state_dict({"g_ema": mixed})) == {"a", "b"}
    torch.save({"params_ema": mixed}, tmp_path / "up.pth")  # read with the prefix dropped: its keys are a and b
    with pytest.raises(WeightsError, match="found 2 keys like a, b"):
        upscaler.load_upscaler(tmp_path / "up.pth")
    path = tmp_path / "net.pth"
    torch.save({"state_dict": mixed}, path)
    assert set(detect.load_state_dict(path, "RetinaFace")) == {"a", "b"}
    assert set(parsenet.load_state_dict(path)) == {"a", "b"}
    torch.save({"module.a": A, "a": B}, path)
    for load in (lambda: detect.load_state_dict(path, "RetinaFace"), lambda: parsenet.load_state_dict(path)):
        with pytest.raises(WeightsError, match=re.escape(f"{path} holds both")):
            load()
    torch.save([A, B], path)  # a list, not a state_dict: said with the fix, never an internal error
    for load, what in ((lambda: detect.load_state_dict(path, "RetinaFace"), "RetinaFace"),
                       (lambda: parsenet.load_state_dict(path), "ParseNet")):
        with pytest.raises(WeightsError, match=re.escape(f"{path} does not hold a {what} state_dict (found list)")):
            load()
    with pytest.raises(WeightsError, match="both"):
        unwrap_state_dict({"module.a": A, "a": B})
    torch.save({"params_ema": {"module.a": A, "a": B}}, tmp_path / "up.pth")
    with pytest.raises(WeightsError, match="up.pth holds both"):
        upscaler.load_upscaler(tmp_path / "up.pth")


def test_parser_and_upscaler_files_go_through_one_reader_and_keep_their_own_words(tmp_path: Path) -> None:
    half, step = torch.ones(2, dtype=torch.float16), torch.tensor([3])
    path = tmp_path / "net.pth"
    torch.save({"state_dict": {"module.w": half, "n": step}, "epoch": 7}, path)
    sd = parsenet.load_state_dict(path)
    assert list(sd) == ["w", "n"] and sd["w"].dtype == torch.float32 and sd["n"].dtype == torch.int64
    tiny = upscaler.random_upscaler(upscaler.UpscalerConfig(num_feat=4, num_block=1, num_grow_ch=4))
    torch.save({"params_ema": {f"module.{k}": v.half() for k, v in tiny.state_dict().items()}, "iter": 7}, path)
    assert next(upscaler.load_upscaler(path).parameters()).dtype == torch.float32
    # training metadata beside the weights is dropped, not fed to the network
    torch.save({"w": half, "epoch": 7}, path)
    assert set(parsenet.load_state_dict(path)) == {"w"}
    torch.save([half], path)
    with pytest.raises(WeightsError, match=r"does not hold a ParseNet state_dict \(found list\)"):
        parsenet.load_state_dict(path)
    with pytest.raises(WeightsError, match=r"not an upscaler checkpoint: expected a dict with 'params_ema', found list"):
        upscaler.load_upscaler(path)
    torch.save({"epoch": 7}, path)
    with pytest.raises(WeightsError, match=r"does not hold a ParseNet state_dict \(found dict\)"):
        parsenet.load_state_dict(path)
    with pytest.raises(WeightsError, match="ParseNet weights not found at .*python -m gpen_core download ParseNet-latest"):
        parsenet.load_state_dict(tmp_path / "absent.pth")
    with pytest.raises(WeightsError, match="upscaler file .*absent.pth does not exist. Fix: `python -m gpen_core download"):
        upscaler.load_upscaler(tmp_path / "absent.pth")
