"""What the fast GPEN forward keeps alive while it runs: the peak is at the full-size level."""

from __future__ import annotations

import weakref

import torch

from gpen_core.networks.prepared import prepare
from gpen_core.networks.plan import ForwardPlan
from gpen_core.networks.synthetic import random_generator

from .factories import TINY


def test_the_full_size_level_runs_without_the_lower_levels_encoder_features() -> None:
    fwd = prepare(random_generator(TINY), ForwardPlan(device="cpu", dtype="float32", fir="depthwise", channels_last=True))
    net = fwd.net
    net.strip_rows = 0  # the untiled forward (in strips nothing full-size is kept: tests/test_fast_strips.py)
    features: list[weakref.ref] = []
    for layer in net.encoder:
        layer.register_forward_hook(lambda m, i, out: features.append(weakref.ref(out)))
    at_last_level: list[list[bool]] = []
    net.convs[-1].register_forward_pre_hook(lambda m, i: at_last_level.append([f() is not None for f in features]))
    with torch.inference_mode():
        fwd(torch.zeros(1, 3, TINY.size, TINY.size))
    alive = at_last_level[0]
    assert len(alive) == len(net.encoder) >= 4
    # The full-size feature is that level's noise input; every lower level's is done with (the
    # smallest may still be referenced as the style input's source: a few KB).
    assert alive[0] and not any(alive[1:-1]), alive


def test_the_last_conv_frees_its_input_pair_before_allocating_its_noise_half(monkeypatch) -> None:
    from gpen_core.networks.fast import FastGPEN

    monkeypatch.setattr(FastGPEN, "SPLIT_MIN_BYTES", 0)  # pairs at every size, as at 512 px in the released networks
    fwd = prepare(random_generator(TINY), ForwardPlan(device="cpu", dtype="float32", fir="depthwise", channels_last=True))
    net = fwd.net
    net.strip_rows = 0  # the untiled forward (in strips nothing full-size is kept: tests/test_fast_strips.py)
    if not net.split_last or not net.split_levels[-1]:
        import pytest

        pytest.skip("oneDNN's fused convolutions are not available here: no (features, noise) pairs to free")
    pair: list[weakref.ref] = []
    net.convs[-2].register_forward_hook(lambda m, i, out: pair.extend(weakref.ref(t) for t in out))
    # noise_half runs after the conv consumed its input pair: by then that pair must be gone
    seen: list[list[bool]] = []
    last = net.convs[-1]
    original = last.noise_half

    def noise_half(noise: torch.Tensor) -> torch.Tensor:
        seen.append([p() is not None for p in pair])
        return original(noise)

    last.noise_half = noise_half  # type: ignore[method-assign]
    with torch.inference_mode():
        fwd(torch.zeros(1, 3, TINY.size, TINY.size))
    assert len(pair) == 2 and seen == [[False, False]], seen
