"""Traced convolutions as op questions: exact work for any shape (asymmetric, 1-D/3-D, transposed,
grouped), and grouped FP32 convs timed on the FMA pipe inside a program (pure, no subprocess)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from components.physics import conv
from components.programs.ops import map_op


def _conv(x, w, y, stride, pad, dilation, transposed, groups, dtype="float32"):
    return {
        "aten": "convolution",
        "overload": "default",
        "view": False,
        "inputs": [[x, dtype, True], [w, dtype, True]],
        "outputs": [[y, dtype, True]],
        "scalars": [None, None, None, stride, pad, dilation, transposed, [0] * len(stride), groups],
        "kwargs": {},
    }


def _work(question):
    dims = {k: np.array([float(v)]) for k, v in question.shape}
    dims["insize"] = dims.pop("input_size")
    w = conv.work(question.dtype, dims)
    return float(w.flops[0]), float(w.dram_bytes[0])


CASES = [
    # (input, weight, output, stride, pad, dilation, transposed, groups)
    # depthwise 3x3 on a 256x512 image (KernelBench level-1 problem 84)
    ([4, 128, 256, 512], [128, 1, 3, 3], [4, 128, 254, 510], [1, 1], [0, 0], [1, 1], False, 128),
    # depthwise 3x7, asymmetric everything (problem 85)
    ([2, 64, 128, 256], [64, 1, 3, 7], [2, 64, 126, 250], [1, 1], [0, 0], [1, 1], False, 64),
    # grouped 1-D conv, strided
    ([8, 96, 1000], [96, 32, 5], [8, 96, 498], [2], [0], [1], False, 3),
    # 3-D conv
    ([2, 16, 20, 24, 28], [32, 16, 3, 3, 3], [2, 32, 18, 22, 26], [1, 1, 1], [0, 0, 0], [1, 1, 1], False, 1),
    # strided 1x1 on a non-square image (the input side per output pixel is above the kernel's)
    ([4, 64, 56, 28], [128, 64, 1, 1], [4, 128, 28, 14], [2, 2], [0, 0], [1, 1], False, 1),
    # transposed 2-D, stride 2, asymmetric kernel (weight: Cin, Cout/groups, kh, kw)
    ([4, 64, 32, 48], [64, 32, 3, 5], [4, 32, 65, 99], [2, 2], [0, 0], [1, 1], True, 1),
]


@pytest.mark.parametrize("case", CASES)
def test_a_conv_of_any_shape_has_its_exact_flops_and_reads_its_input_once(case):
    x, w, y, stride, pad, dilation, transposed, groups = case
    q = map_op(_conv(x, w, y, stride, pad, dilation, transposed, groups))
    flops, nbytes = _work(q)
    taps = math.prod(w[2:])
    if transposed:  # each input pixel scattered through every tap into Cout/groups channels
        expected = 2.0 * x[0] * x[1] * math.prod(x[2:]) * (y[1] / groups) * taps
    else:  # each output pixel gathers Cin/groups channels through every tap
        expected = 2.0 * y[0] * y[1] * math.prod(y[2:]) * (x[1] / groups) * taps
    assert flops == pytest.approx(expected, rel=1e-9)
    activations = 4.0 * (math.prod(x) + math.prod(y))
    weights = 4.0 * math.prod(w)
    # the input and output once (no im2col / col2im expansion), plus at most the filters
    assert activations <= nbytes <= activations + weights + 1.0


def test_a_conv_questions_work_grows_with_its_image_and_kernel():
    def work(h, k):  # a "same"-padded depthwise k x 1 conv on an h x 2h image
        x, y = [2, 32, h, 2 * h], [2, 32, h, 2 * h]
        return _work(map_op(_conv(x, [32, 1, k, 1], y, [1, 1], [(k - 1) // 2, 0], [1, 1], False, 32)))

    sizes = [work(h, k) for h, k in [(16, 3), (32, 3), (64, 3), (64, 5), (128, 7)]]
    for small, big in itertools.pairwise(sizes):
        assert big[0] > small[0] and big[1] > small[1]


def test_grouped_fp32_convs_run_on_the_fma_pipe_inside_a_program_and_never_below_their_roofline():
    from components.devices import load_catalog
    from components.features.device_numbers import device_table
    from components.programs.ops import program_ops
    from components.programs.program_features import op_times

    catalog = load_catalog()
    devices = [d for d in ("h100-sxm", "a100-sxm4-80gb", "l4", "t4") if d in catalog.ids()]
    grouped = _conv([8, 240, 28, 28], [240, 80, 3, 3], [8, 240, 28, 28], [1, 1], [1, 1], [1, 1], False, 3)
    dense = _conv([8, 240, 28, 28], [240, 240, 1, 1], [8, 240, 28, 28], [1, 1], [0, 0], [1, 1], False, 1)
    frame = op_times([program_ops([grouped, dense])], devices, catalog).frame.set_index(["kind", "device_id"])
    fma = device_table(devices, catalog)["fma_fp32"]
    for d in devices:
        g, c = frame.loc[("conv_grouped", d)], frame.loc[("conv", d)]
        assert g["pred_us"] >= g["roof_us"] and g["pred_us"] >= g["flops"] / fma[d] * 1e6 * (1 - 1e-9)
        assert g["basis_roof_us"] == pytest.approx(g["pred_us"])
        assert c["pred_us"] == c["roof_us"]  # a dense FP32 conv keeps cuDNN's TF32 roofline
    h100 = frame.loc[("conv_grouped", "h100-sxm")]
    assert h100["bound"] == "compute" and h100["pipe"] == "fp32"
    assert h100["pred_us"] > 2.0 * h100["roof_us"]  # H100: FP32 FMA is far below TF32
