import numpy as np
import torch

from gpen_core.networks.tensors import to_image, to_tensor


def test_round_trip_is_lossless_for_uint8() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    t = to_tensor(rgb)
    assert t.shape == (1, 3, 7, 9) and t.min() >= -1 and t.max() <= 1
    # float32 rounding can put k/255 a hair under k; the official truncation then gives k-1 at most
    assert np.abs(to_image(t).astype(int) - rgb).max() <= 1


def test_channel_order_is_kept() -> None:
    rgb = np.zeros((2, 2, 3), np.uint8)
    rgb[..., 0] = 255
    t = to_tensor(rgb)
    assert torch.all(t[0, 0] == 1) and torch.all(t[0, 2] == -1)


def test_out_of_range_is_clipped() -> None:
    t = torch.full((1, 3, 2, 2), 3.0)
    assert (to_image(t) == 255).all()
    assert (to_image(-t) == 0).all()
