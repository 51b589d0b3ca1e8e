"""The gpuFLOPBench comparison counts what Nsight's ``spPerf + dpPerf`` measure: FP32 and FP64 FLOPs, not half
precision (the answer's breakdown gives each kernel's FLOPs by precision)."""

from __future__ import annotations

import json

import pytest

from components.evaluation.gpuflopbench_flops import _fp32_fp64_flops, summarise


def test_half_precision_flops_are_left_out_of_the_comparison() -> None:
    breakdown = [{"op": "k", "flops": {"fp32": 100, "fp64": 20, "fp16": 4000}}]
    answer = {"gflops": 4.12, "duration_us": 1.0, "breakdown": json.dumps(breakdown)}
    assert _fp32_fp64_flops(answer) == 120.0
    # an answer without per-precision counts: all its FLOPs
    assert _fp32_fp64_flops({"gflops": 2.0, "duration_us": 3.0, "breakdown": json.dumps([{"op": "k"}])}) == (
        pytest.approx(6000.0)
    )


def test_within_2x_share() -> None:
    rows = [
        {"profiled_flops": 100.0, "args": 150.0, "no_args": 900.0, "measured_us": 1.0},
        {"profiled_flops": 100.0, "args": 40.0, "no_args": None, "measured_us": 1.0},
    ]
    out = summarise(rows)
    assert out["within_2x_args"] == 0.5 and out["within_2x_no_args"] == 0.0
