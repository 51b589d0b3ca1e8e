"""Every derived-metric formula in one place (vectorised; NaN in -> NaN out, never a guess).

Units follow the canonical column names: bytes, microseconds, FLOPs, GB/s = 1e9 B/s,
GFLOP/s = 1e9 FLOP/s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

# Bolet et al. (HPDC AI4Sys 2025) RTX 3080 balance points: 68 SMs at 1.44 GHz base clock, FMA = 2,
# 760.3 GB/s (dataset-gen/roofline_utils.py at gpuFLOPBench 61cbd9e4).
BOLET_SP_RIDGE = 32.97
BOLET_DP_RIDGE = 0.515
BOLET_INT_RIDGE = 16.49


def _array(values: object) -> np.ndarray:
    return np.asarray(values, dtype="float64")


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = num / den
    return np.where((den > 0) & np.isfinite(den), out, np.nan)


def achieved_gbps(dram_bytes: object, duration_us: object) -> np.ndarray:
    """DRAM bandwidth actually moved: bytes / time (B/us = 1e6 B/s, so /1e3 gives GB/s)."""
    return _safe_div(_array(dram_bytes), _array(duration_us)) / 1e3


def gflops(flops: object, duration_us: object) -> np.ndarray:
    """Achieved rate: FLOPs / time (FLOP/us = 1e6 FLOP/s, so /1e3 gives GFLOP/s)."""
    return _safe_div(_array(flops), _array(duration_us)) / 1e3


def arith_intensity(flops: object, dram_bytes: object) -> np.ndarray:
    """FLOPs per DRAM byte: where the kernel sits on the roofline's x-axis."""
    return _safe_div(_array(flops), _array(dram_bytes))


def roofline_class(intensity: object, ridge_point: object) -> pd.Series:
    """``compute`` at or right of the device's ridge point (peak FLOP/s / peak B/s), else ``bandwidth``."""
    ai, ridge = _array(intensity), _array(ridge_point)
    known = np.isfinite(ai) & np.isfinite(ridge)
    labels = np.where(ai >= ridge, "compute", "bandwidth")
    return pd.Series(np.where(known, labels, None), dtype="string")


def int_ridge_point(sms: float, lanes_per_sm: float, clock_mhz: float, dram_gbps: float) -> float:
    """Integer ops per DRAM byte at the ridge: one int instruction per FP32 lane per cycle (no FMA
    doubling) over DRAM bandwidth -- Bolet et al.'s convention (RTX 3080 at base clock: 16.49)."""
    return sms * lanes_per_sm * clock_mhz * 1e6 / (dram_gbps * 1e9)


def bolet_roofline_label(sp_ai: object, dp_ai: object, int_ai: object) -> pd.Series:
    """Bolet et al.'s exact rule: bandwidth-bound iff every intensity is below its RTX 3080 ridge."""
    sp, dp, it = _array(sp_ai), _array(dp_ai), _array(int_ai)
    known = np.isfinite(sp) & np.isfinite(dp) & np.isfinite(it)
    bandwidth = (sp < BOLET_SP_RIDGE) & (dp < BOLET_DP_RIDGE) & (it < BOLET_INT_RIDGE)
    return pd.Series(np.where(known, np.where(bandwidth, "bandwidth", "compute"), None), dtype="string")


# FLOPs per output element of the non-GEMM ops. Conventions (documented, since "a FLOP of gelu"
# is a choice): arithmetic ops and single transcendental calls count 1; softmax = max, subtract,
# exp, sum, divide = 5; layernorm = mean, subtract, square, sum, rsqrt-scale, affine = 8; rmsnorm = 6.
ELEMENTWISE_FLOPS_PER_ELEMENT: dict[str, float] = {
    "add": 1,
    "addu": 1,
    "sub": 1,
    "mul": 1,
    "mulu": 1,
    "div": 1,
    "divu": 1,
    "pow": 1,
    "powu": 1,
    "relu": 1,
    "gelu": 1,
    "tanh": 1,
    "silu": 1,
    "sigmoid": 1,
    "exp": 1,
}
ROW_OP_FLOPS_PER_ELEMENT: dict[str, float] = {"softmax": 5, "layernorm": 8, "rmsnorm": 6}


def _conv_flops(shape: Mapping[str, float]) -> float:
    """2 * B * Cout * Hout * Wout * Cin * k * k, square images and filters (NeuSight's conv rows)."""
    k = shape.get("Kernel_Size", shape.get("Kernel_Szie"))
    size, stride, padding = shape["Input_Size"], shape.get("Stride", 1), shape.get("Padding", 0)
    out = math.floor((size + 2 * padding - k) / stride) + 1
    return 2.0 * shape["B"] * shape["Output_Channel"] * out * out * shape["Input_Channel"] * k * k


def op_flops(family: str, op: str, shape: Mapping[str, float]) -> float:
    """FLOPs of an op by its definition (FMA = 2). Raises KeyError/ValueError where none applies."""
    s = {k: float(v) for k, v in shape.items() if isinstance(v, (int, float))}
    if family in ("gemm", "linear", "bmm"):
        return 2.0 * s.get("B", 1.0) * s["M"] * s["N"] * s["K"]
    if family == "conv":
        return _conv_flops(s)
    if family == "elementwise":
        elements = s["N"] if "N" in s else s["B"] * s["H"]
        return ELEMENTWISE_FLOPS_PER_ELEMENT[op] * elements
    if family in ROW_OP_FLOPS_PER_ELEMENT:
        return ROW_OP_FLOPS_PER_ELEMENT[family] * s["B"] * s["H"]
    if family == "moe":
        # Fused MoE (PipeWeave): M tokens each routed to topk experts; w13 is the gate+up GEMM
        # (H -> N), w2 the down GEMM (N/2 -> H). Per routed token: 2*H*N (w13) or 2*(N/2)*H (w2).
        tokens = s["M"] * s["topk"]
        if op == "w2":
            return 2.0 * tokens * s["H"] * s["N"] / 2.0
        return 2.0 * tokens * s["H"] * s["N"]
    if family == "collective":
        return 0.0
    raise ValueError(f"no FLOP formula for family {family!r} op {op!r}")
