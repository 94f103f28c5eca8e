"""ParseNet's full-size layers in horizontal strips of rows: the same logits, less memory.

A whole 512 px forward holds several 64-128 channel full-size tensors at once at each end (float32:
64-128 MiB each); in strips only the lower levels' whole tensors and strip-sized pieces are alive
(docs/performance.md, "ParseNet's full-size layers in strips": 140-160 MiB less at 512 px, no slower).

Every layer is a reflection pad of 1, a 3×3 convolution (stride 1 or 2, after a nearest ×2 upsampling
for the "up" layers), a per-channel norm and an elementwise activation. Output row ``o`` reads the
(upsampled) input rows ``s·o-1 .. s·o+1`` (``s`` the stride), reflected at the image's edges; upsampled
row ``u`` is input row ``u // 2``. A strip runs the layer's own ops on the rows it reads, padding a row
only where the slice touches the image's edge, so each output row is computed from the same numbers as
in the whole forward; only the convolution's summation order may differ with the strip's shape.
:meth:`~gpen_core.networks.parsenet.ParseNet.parse` stays the whole-image module (what OpenVINO traces).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.networks.parsenet_layers import ConvLayer, ResidualBlock

STRIP_ROWS = 64  # output rows per strip at the full-size levels (8 strips at 512 px)


def _reflect(i: int, n: int) -> int:
    """Row ``i`` of a reflection-padded axis of length ``n`` (pad 1: -1 → 1, n → n-2)."""
    if i < 0:
        return -i
    if i >= n:
        return 2 * (n - 1) - i
    return i


def _need(stage: ConvLayer | ResidualBlock, o_lo: int, o_hi: int, h_in: int) -> tuple[int, int]:
    """The input rows ``[lo, hi)`` that output rows ``[o_lo, o_hi)`` of ``stage`` read (reflections included)."""
    if isinstance(stage, ResidualBlock):
        a_lo, a_hi = _need(stage.conv2, o_lo, o_hi, _out_height(stage.conv1, h_in))
        lo, hi = _need(stage.conv1, a_lo, a_hi, h_in)
        short = stage.shortcut_func
        s_lo, s_hi = (o_lo, o_hi) if isinstance(short, torch.nn.Identity) else _need(short, o_lo, o_hi, h_in)
        return min(lo, s_lo), max(hi, s_hi)
    s = stage.conv2d.stride[0]
    h_eff = 2 * h_in if stage.up else h_in
    rows = [_reflect(u, h_eff) for u in range(s * o_lo - 1, s * (o_hi - 1) + 2)]
    if stage.up:
        rows = [u // 2 for u in rows]
    return min(rows), max(rows) + 1


class _Rows:
    """Rows ``[lo, lo + len)`` of a whole tensor of height ``height``."""

    def __init__(self, t: torch.Tensor, lo: int, height: int) -> None:
        self.t, self.lo, self.height = t, lo, height


def _out_height(stage: ConvLayer | ResidualBlock, h_in: int) -> int:
    if isinstance(stage, ResidualBlock):
        return _out_height(stage.conv2, _out_height(stage.conv1, h_in))
    h = 2 * h_in if stage.up else h_in
    return (h - 1) // stage.conv2d.stride[0] + 1


def _conv_rows(layer: ConvLayer, x: _Rows, o_lo: int, o_hi: int) -> _Rows:
    """Output rows ``[o_lo, o_hi)`` of ``layer`` from ``x`` (which holds every row they read).

    The layer's own ops on a slice of rows: [nearest ×2 of the rows it needs], reflection pad
    (of 1 column each side, and of a row only where the slice touches the image's edge), conv."""
    s = layer.conv2d.stride[0]
    h_eff = 2 * x.height if layer.up else x.height
    e_lo, e_hi = s * o_lo - 1, s * (o_hi - 1) + 2  # the (upsampled) input rows read, padding included
    a, b = max(e_lo, 0), min(e_hi, h_eff)
    if layer.up:
        src = x.t[:, :, a // 2 - x.lo : (b - 1) // 2 + 1 - x.lo]
        eff = F.interpolate(src, scale_factor=2, mode="nearest")[:, :, a % 2 : a % 2 + b - a]
    else:
        eff = x.t[:, :, a - x.lo : b - x.lo]
    padded = F.pad(eff, (1, 1, int(e_lo < 0), int(e_hi > h_eff)), mode="reflect")
    del eff
    y = layer.relu(layer.norm(F.conv2d(padded, layer.conv2d.weight, layer.conv2d.bias, layer.conv2d.stride)))
    return _Rows(y, o_lo, _out_height(layer, x.height))


def _run(stage: ConvLayer | ResidualBlock, x: _Rows, o_lo: int, o_hi: int) -> _Rows:
    """Output rows ``[o_lo, o_hi)`` of ``stage``; a residual block's branch first, then its shortcut
    added in place (as the block does)."""
    if not isinstance(stage, ResidualBlock):
        return _conv_rows(stage, x, o_lo, o_hi)
    a_lo, a_hi = _need(stage.conv2, o_lo, o_hi, _out_height(stage.conv1, x.height))
    out = _conv_rows(stage.conv2, _conv_rows(stage.conv1, x, a_lo, a_hi), o_lo, o_hi)
    short = stage.shortcut_func
    if isinstance(short, torch.nn.Identity):
        out.t.add_(x.t[:, :, o_lo - x.lo : o_hi - x.lo])
    else:
        out.t.add_(_conv_rows(short, x, o_lo, o_hi).t)
    return out


def run_in_strips(stages: list, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """``stages`` (ParseNet conv layers and residual blocks, in order) applied to the whole ``x``,
    computed ``rows`` output rows at a time (default :data:`STRIP_ROWS`): each strip walks back
    to the input rows it needs."""
    rows = rows or STRIP_ROWS
    heights = [x.shape[2]]
    for stage in stages:
        heights.append(_out_height(stage, heights[-1]))
    out: torch.Tensor | None = None
    for lo in range(0, heights[-1], rows):
        ranges = [(lo, min(lo + rows, heights[-1]))]
        for stage, h_in in zip(reversed(stages), reversed(heights[:-1])):
            ranges.append(_need(stage, *ranges[-1], h_in))
        ranges.reverse()
        cur = _Rows(x[:, :, ranges[0][0] : ranges[0][1]], ranges[0][0], heights[0])
        for stage, (o_lo, o_hi) in zip(stages, ranges[1:]):
            cur = _run(stage, cur, o_lo, o_hi)
        if out is None:
            n, c, _, w = cur.t.shape
            fmt = torch.channels_last if cur.t.is_contiguous(memory_format=torch.channels_last) and c > 1 else torch.contiguous_format
            out = torch.empty((n, c, heights[-1], w), dtype=cur.t.dtype, device=cur.t.device).contiguous(memory_format=fmt)
        out[:, :, ranges[-1][0] : ranges[-1][1]] = cur.t
        del cur
    assert out is not None
    return out


def parse_in_strips(net: nn.Module, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """:meth:`~gpen_core.networks.parsenet.ParseNet.parse` of ``net`` (a ParseNet) with the full-size ends in
    strips (the encoder's first two stages, the last decoder block with the mask head); the rest runs whole."""
    enc, dec = list(net.encoder), list(net.decoder)
    feat = run_in_strips(enc[:2], x, rows)
    for stage in enc[2:]:
        feat = stage(feat)
    feat = feat + net.body(feat)
    for stage in dec[:-1]:
        feat = stage(feat)
    return run_in_strips([dec[-1], net.out_mask_conv], feat, rows)
