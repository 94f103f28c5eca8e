"""benchmarks/bench_forward.py --layers: each compiled node's group and FLOPs, from its shapes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_forward  # noqa: E402


def test_flops_of_a_conv_a_transposed_conv_a_depthwise_blur_and_an_fc() -> None:
    # 3×3, 512 → 512 at 64 px: matmul_peak's probe, 2·64²·512²·9
    assert bench_forward.layer_flops("Convolution", [(1, 512, 64, 64), (512, 512, 3, 3)], (1, 512, 64, 64)) == 2 * 64 * 64 * 512 * 512 * 9
    # transposed 3×3 stride 2, 1024 → 256 from 64 px: counted per input pixel (weights [Cin, Cout, 3, 3])
    assert bench_forward.layer_flops("Deconvolution", [(1, 1024, 64, 64), (1024, 256, 3, 3)], (1, 256, 129, 129)) == 2 * 64 * 64 * 1024 * 256 * 9
    # depthwise 4×4 over 64 channels (grouped weights [G, 1, 1, 4, 4]): 16 MACs an output value
    assert bench_forward.layer_flops("Convolution", [(1, 64, 513, 513), (64, 1, 1, 4, 4)], (1, 64, 512, 512)) == 2 * 64 * 512 * 512 * 16
    assert bench_forward.layer_flops("FullyConnected", [(1, 512), (1024, 512), (1024,)], (1, 1024)) == 2 * 512 * 1024
    assert bench_forward.layer_flops("Reorder", [(1, 64, 512, 512)], (1, 64, 512, 512)) == 0


def test_groups_tell_the_layer_kinds_apart() -> None:
    g = bench_forward.layer_group
    conv = "__module.generator.convs.9.conv/aten::_convolution/Convolution_1"
    assert g("Convolution", conv, [(1, 256, 128, 128), (256, 256, 3, 3)], (1, 256, 128, 128)) == "modulated 3×3 conv at 128 px"
    strip = "__module.generator.convs.13.conv/aten::_convolution/Convolution_4"  # a strip of the full-size level
    assert g("Convolution", strip, [(1, 64, 130, 512), (64, 64, 3, 3)], (1, 64, 130, 512)) == "modulated 3×3 conv at 512 px"
    up = "__module.generator.convs.8.conv/aten::_convolution/ConvolutionBackpropData"
    assert g("Deconvolution", up, [(1, 1024, 64, 64), (1024, 256, 3, 3)], (1, 256, 129, 129)) == "upsampling transposed 3×3 conv → 128 px"
    blur = "__module.generator.convs.8.conv.blur/aten::_convolution/GroupConvolution"
    assert g("Convolution", blur, [(1, 256, 129, 129), (256, 1, 1, 4, 4)], (1, 256, 128, 128)) == "FIR blur (depthwise 4×4)"
    assert g("Convolution", "__module.ecd0.0.0/aten::_convolution/Convolution", [(1, 3, 512, 512), (64, 3, 1, 1)],
             (1, 64, 512, 512)).startswith("encoder's input 1×1")
    assert g("Convolution", "__module.ecd2.0.1/aten::_convolution/Convolution", [(1, 128, 257, 257), (256, 128, 3, 3)],
             (1, 256, 128, 128)).startswith(bench_forward.DENSE_GROUPS)
    rgb = "__module.generator.to_rgbs.4.conv/aten::_convolution/Convolution_1"
    assert g("Convolution", rgb, [(1, 256, 128, 128), (3, 256, 1, 1)], (1, 3, 128, 128)).startswith("ToRGB")
    mod = "__module.generator.convs.7.conv/aten::mul/Multiply_2"  # a modulated weight, made per call
    assert g("Subgraph", mod, [(512, 1024, 3, 3), (512, 1024, 1, 1)], (512, 1024, 3, 3)) == "weight modulation (per call)"
    assert g("Subgraph", "aten::add/Add_2,aten::leaky_relu/PRelu_2", [(1, 64, 128, 512)], (1, 64, 128, 512)).startswith("noise / bias")
    assert g("Reorder", "x", [(1, 64, 8, 8)], (1, 64, 8, 8)).startswith("reorders")
    assert g("Concatenation", "x", [(1, 128, 68, 256)] * 2, (1, 256, 68, 256)).startswith("concats")
