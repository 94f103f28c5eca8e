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
    assert set(upscaler.unwrap_params({"params_ema": mixed})) == {"a", "b"}
    path = tmp_path / "net.pth"
    torch.save({"state_dict": mixed}, path)
    assert set(detect.load_state_dict(path, "RetinaFace")) == {"a", "b"}
    assert set(parsenet.load_state_dict(path)) == {"a", "b"}
    torch.save({"module.a": A, "a": B}, path)
    for load in (lambda: detect.load_state_dict(path, "RetinaFace"), lambda: parsenet.load_state_dict(path)):
        with pytest.raises(WeightsError, match=re.escape(f"{path} holds both")):
            load()
    with pytest.raises(WeightsError, match="both"):
        unwrap_state_dict({"module.a": A, "a": B})
    with pytest.raises(WeightsError, match="up.pth holds both"):
        upscaler.unwrap_params({"module.a": A, "a": B}, "up.pth")
