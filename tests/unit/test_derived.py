"""Derived-metric formulas against hand-computed values, boundaries and NaN handling."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from components.ingest import derived


def test_gflops_of_a_4096_cubed_gemm_in_one_millisecond() -> None:
    # 2 * 4096^3 = 137,438,953,472 FLOPs in 1,000 us -> 137,438.95 GFLOP/s.
    assert derived.gflops(2 * 4096**3, 1000.0) == pytest.approx(137438.953472)


def test_bandwidth_and_intensity_units() -> None:
    # 1 GB moved in 1 ms = 1,000 GB/s; 4 GFLOP over 1 GB = 4 FLOP/B.
    assert derived.achieved_gbps(1e9, 1000.0) == pytest.approx(1000.0)
    assert derived.arith_intensity(4e9, 1e9) == pytest.approx(4.0)


def test_vectorised_over_series_and_zero_or_missing_denominators_give_nan() -> None:
    out = derived.gflops(pd.Series([2e6, 2e6, 2e6, np.nan]), pd.Series([1.0, 0.0, np.nan, 1.0]))
    assert out[0] == pytest.approx(2000.0)
    assert np.isnan(out[1:]).all()  # no division by zero, no inf, no guess
    assert np.isnan(derived.arith_intensity(1.0, -5.0))


def test_roofline_class_is_compute_at_and_right_of_the_ridge() -> None:
    labels = derived.roofline_class([1.0, 10.0, 10.0001, np.nan], [10.0, 10.0, 10.0, 10.0])
    assert labels[:3].tolist() == ["bandwidth", "compute", "compute"]
    assert pd.isna(labels[3])


def test_bolet_thresholds_are_the_rtx_3080_balance_points() -> None:
    # 68 SMs x 128 FP32 lanes x 2 (FMA) x 1.44 GHz / 760.3 GB/s; FP64 at 1/64 rate; int: 1 op per lane.
    fp32_ridge = 68 * 128 * 2 * 1.44e9 / 760.3e9
    assert pytest.approx(fp32_ridge, abs=0.01) == derived.BOLET_SP_RIDGE
    assert pytest.approx(fp32_ridge / 64, abs=0.001) == derived.BOLET_DP_RIDGE
    assert pytest.approx(derived.int_ridge_point(68, 128, 1440, 760.3), abs=0.01) == derived.BOLET_INT_RIDGE


@pytest.mark.parametrize(
    ("sp", "dp", "int_ai", "expected"),
    [
        (32.96, 0.514, 16.48, "bandwidth"),  # every intensity just below its ridge
        (32.97, 0.0, 0.0, "compute"),  # FP32 exactly at the threshold is not "<"
        (0.0, 0.515, 0.0, "compute"),
        (0.0, 0.0, 16.49, "compute"),  # integer-heavy kernels count as compute-bound
        (1000.0, 0.0, 0.0, "compute"),
        (0.0, 0.0, 0.0, "bandwidth"),
    ],
)
def test_bolet_rule_boundaries(sp: float, dp: float, int_ai: float, expected: str) -> None:
    assert derived.bolet_roofline_label([sp], [dp], [int_ai])[0] == expected


def test_bolet_rule_leaves_missing_intensities_unlabelled() -> None:
    assert pd.isna(derived.bolet_roofline_label([1.0], [np.nan], [1.0])[0])


def test_gemm_family_flops_use_batch_and_fma_as_two() -> None:
    # NeuSight bmm/linear rows: B batches of an (M x K) @ (K x N) product.
    assert derived.op_flops("bmm", "bmm", {"B": 8, "M": 128, "N": 256, "K": 64}) == 2 * 8 * 128 * 256 * 64
    assert derived.op_flops("linear", "linear", {"B": 2, "M": 3, "N": 5, "K": 7}) == 2 * 2 * 3 * 5 * 7
    assert derived.op_flops("gemm", "fp8_gemm", {"M": 4096, "N": 4096, "K": 4096}) == 2 * 4096**3


def test_row_and_elementwise_ops_count_flops_per_element() -> None:
    shape = {"B": 64, "H": 1024}
    assert derived.op_flops("elementwise", "add", shape) == 64 * 1024
    assert derived.op_flops("elementwise", "gelu", shape) == 64 * 1024  # one call counts as one FLOP
    assert derived.op_flops("softmax", "softmax", shape) == 5 * 64 * 1024
    assert derived.op_flops("layernorm", "layernorm", shape) == 8 * 64 * 1024
    with pytest.raises(ValueError, match="'no_such_op' has no cost entry"):
        derived.op_flops("elementwise", "no_such_op", shape)


def test_conv_flops_use_the_output_size_from_stride_and_padding() -> None:
    # ResNet stem: 224x224x3 -> 64 channels, 7x7, stride 2, padding 3 -> 112x112 output.
    shape = {
        "B": 1,
        "Input_Channel": 3,
        "Output_Channel": 64,
        "Input_Size": 224,
        "Kernel_Size": 7,
        "Stride": 2,
        "Padding": 3,
    }
    assert derived.op_flops("conv", "conv2d", shape) == 2 * 64 * 112 * 112 * 3 * 7 * 7


def test_moe_flops_count_each_routed_token_through_its_expert_gemm() -> None:
    # PipeWeave/vLLM fused_moe: N is the expert's intermediate size; w13 is gate and up fused (H -> 2N),
    # w2 the down projection (N -> H). Settled in components/physics/moe.py (w13 was counted as H -> N).
    shape = {"M": 16, "E": 8, "topk": 2, "N": 1024, "H": 512}
    assert derived.op_flops("moe", "w13", shape) == 2 * (16 * 2) * (2 * 1024) * 512
    assert derived.op_flops("moe", "w2", shape) == 2 * (16 * 2) * 1024 * 512


def test_collectives_have_no_flops_and_unknown_families_raise() -> None:
    assert derived.op_flops("collective", "all_reduce", {"N": 1 << 20}) == 0.0
    with pytest.raises(ValueError, match="family 'attention_v9'"):
        derived.op_flops("attention_v9", "x", {})
    assert not math.isnan(derived.op_flops("elementwise", "mul", {"N": 10}))
