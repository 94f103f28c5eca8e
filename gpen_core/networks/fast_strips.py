"""The fast GPEN's full-size layers in horizontal strips of rows: the same output, less memory.

Untiled, the full-size level holds four to five full-size tensors at once (GPEN-BFR-512 float32: 64 MiB
each), the peak of a request; in strips only the half-size input and strip-sized pieces are alive
(docs/performance.md, "The generator's full-size level in strips"). Every op is translation-equivariant
along the rows (the upsampling one with stride 2), so a strip computed from the input rows it depends on,
then cropped, equals those rows of the full computation; the image's true top and bottom get no halo (the
strip's zero padding there is the full computation's).

The halos, each side of a strip's own rows:

- :data:`HALO` (decoder, half-size input rows): the upsampling conv (transposed 3×3, stride 2, then the
  4-tap blur with padding 1) makes output row ``q`` depend on input rows ``m`` with ``q - 3 ≤ 2m ≤ q + 2``;
  the 3×3 conv (padding 1) reads upsampled rows ``r0-1 .. r1`` for output rows ``[r0, r1)``. For even
  ``r0, r1`` that is input rows ``r0/2 - 2 .. r1/2 + 1``.
- :data:`HEAD_HALO` (:func:`encoder_head`, full-size rows): ``encoder[1]`` is the 4-tap blur with padding 2
  then a 3×3 conv with stride 2, so its output row ``j`` depends on full-size rows ``2j-2 .. 2j+3``.

The noise input of both decoder convs is ``encoder[0](x)``, a 1×1 conv of the 3-channel input: each strip
recomputes its rows. The ToRGB skip is upsampled once at full size (3 channels) and added row by row.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class StripNet(Protocol):
    """What the strips read of :class:`gpen_core.networks.fast.FastGPEN` (a protocol, so this module
    needs no import of the network that calls it)."""

    encoder: nn.ModuleList
    convs: nn.ModuleList
    to_rgbs: nn.ModuleList
    split_levels: list[bool]
    split_last: bool
    memory_format: torch.memory_format

HALO = 2  # half-size input rows a strip reads beyond its own, each side (derivation above)
HEAD_HALO = 2  # full-size rows an encoder-head strip reads beyond its own, each side (even: stride 2)


def encoder_head(net: StripNet, inp: torch.Tensor, rows: int) -> torch.Tensor:
    """``encoder[1](encoder[0](inp))`` computed ``rows`` full-size rows at a time, into one tensor.

    ``inp``: the network's 1×3×S×S input in its layout; returns the half-size feature in the
    same layout. ``rows``: a positive even number (strips start on even rows: stride 2).
    """
    if rows <= 0 or rows % 2:
        raise ValueError(f"strip height must be a positive even number of rows, got {rows}")
    e0, e1 = net.encoder[0], net.encoder[1]
    size = inp.shape[2]
    half = size // 2
    out: torch.Tensor | None = None
    for j0 in range(0, half, rows // 2):
        j1 = min(half, j0 + rows // 2)
        a, b = max(0, 2 * j0 - HEAD_HALO), min(size, 2 * j1 + HEAD_HALO)
        y = e1(e0(inp[:, :, a:b]))  # half-size rows [a/2, b/2)
        if out is None:
            shape = (1, y.shape[1], half, y.shape[3])
            out = torch.empty(shape, dtype=y.dtype, device=y.device, memory_format=net.memory_format)
        out[:, :, j0:j1].copy_(y[:, :, j0 - a // 2 : j1 - a // 2])
        del y
    assert out is not None  # half ≥ 1
    return out


def input_rows(r0: int, r1: int, half: int) -> tuple[int, int]:
    """The half-size input rows ``[m0, m1)`` that full-size output rows ``[r0, r1)`` need (even r0, r1)."""
    return max(0, r0 // 2 - HALO), min(half, r1 // 2 + HALO)


def full_size_level(
    net: StripNet, out: torch.Tensor, latent: torch.Tensor, inp: torch.Tensor, skip: torch.Tensor, rows: int
) -> torch.Tensor:
    """The last decoder level and its ToRGB, ``rows`` full-size rows at a time: float32 1×3×S×S.

    ``out``: the previous level's output (1×C×S/2×S/2, one tensor); ``inp``: the network's
    3-channel input (its rows give the noise); ``skip``: the previous ToRGB's output.
    ``rows``: a positive even number (strips start on even rows, where the stride-2 conv's
    phases line up).
    """
    if rows <= 0 or rows % 2:
        raise ValueError(f"strip height must be a positive even number of rows, got {rows}")
    i = len(net.to_rgbs) - 1
    up_conv, conv, to_rgb = net.convs[2 * i], net.convs[2 * i + 1], net.to_rgbs[i]
    noise_of = net.encoder[0]
    half = out.shape[2]
    size = 2 * half
    up_skip = to_rgb.up(skip)
    del skip
    # float32 and NCHW-contiguous, as the untiled forward returns it.
    result = torch.empty((1, 3, size, up_skip.shape[3]), dtype=torch.float32, device=up_skip.device)
    for r0 in range(0, size, rows):
        r1 = min(size, r0 + rows)
        m0, m1 = input_rows(r0, r1, half)
        noise = noise_of(inp[:, :, 2 * m0 : 2 * m1])
        y = up_conv(out[:, :, m0:m1], latent, noise, split=net.split_levels[i])  # full-size rows [2·m0, 2·m1)
        # The rows the 3×3 conv reads, counted from the strip's first row.
        a, b = max(0, r0 - 1) - 2 * m0, min(size, r1 + 1) - 2 * m0
        # A list the conv empties: the pair is freed before it allocates its own noise half.
        y = [t[:, :, a:b] for t in y] if isinstance(y, tuple) else y[:, :, a:b]
        y = conv(y, latent, noise[:, :, a:b], split=net.split_last)
        del noise
        rgb = to_rgb(y, latent, None)
        del y
        top = r0 - max(0, r0 - 1)  # the conv's output starts one row above r0 except at the image's top
        # The same sum and cast as the untiled ToRGB's ``out.add_(up(skip))`` then ``.float()``.
        result[:, :, r0:r1].copy_(rgb[:, :, top : top + r1 - r0].add_(up_skip[:, :, r0:r1]))
        del rgb
    return result
