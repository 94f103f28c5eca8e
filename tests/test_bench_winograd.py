"""benchmarks/bench_winograd.py: its Winograd convolution is the 3×3 convolution it stands in for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_winograd as bw  # noqa: E402


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_of_split_input_is_the_padded_3x3_conv(m: int) -> None:
    """Two input halves (features, noise) and a per-call modulation, as the decoder convs take them."""
    torch.manual_seed(0)
    a, b = torch.randn(1, 5, 16, 16), torch.randn(1, 3, 16, 16)
    w = torch.randn(6, 8, 3, 3) / 8
    f = torch.rand(6, 8) + 0.5  # modulation ⊗ demodulation
    expected = F.conv2d(torch.cat([a, b], 1), w * f[:, :, None, None], padding=1)
    out = bw.winograd((a, b), bw.weight_tf(w, m) * f, m)
    assert out.shape == expected.shape
    # F(4×4) amplifies float32 rounding more than F(2×2): both well inside the export's 1e-4
    assert (out - expected).abs().max() <= (1e-5 if m == 2 else 5e-5)


def test_weight_transform_recovers_the_kernel_at_the_tile_centre() -> None:
    """F(2×2) keeps W's corners in G·W·Gᵀ's corners (G's first and last rows are e₀ and e₂)."""
    w = torch.randn(2, 3, 3, 3)
    u = bw.weight_tf(w, 2).reshape(4, 4, 2, 3)
    assert torch.allclose(u[0, 0], w[:, :, 0, 0]) and torch.allclose(u[3, 3], w[:, :, 2, 2])
    assert torch.allclose(u[0, 3], w[:, :, 0, 2]) and torch.allclose(u[3, 0], w[:, :, 2, 0])
