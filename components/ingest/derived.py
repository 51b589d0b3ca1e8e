"""Every derived-metric formula in one place (vectorised; NaN in -> NaN out, never a guess).

Units follow the canonical column names: bytes, microseconds, FLOPs, GB/s = 1e9 B/s,
GFLOP/s = 1e9 FLOP/s.
"""

from __future__ import annotations

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


def op_flops(family: str, op: str, shape: Mapping[str, float]) -> float:
    """FLOPs of an op by its definition (FMA = 2): ``components.physics.registry``, the one definition the
    answers' GFLOP/s use too. Raises KeyError/ValueError where none applies (a family without a formula, a
    shape without the dimensions it needs)."""
    from components.physics.registry import shape_flops

    if family == "collective":  # PipeWeave's collectives: data movement, no arithmetic counted
        return 0.0
    return shape_flops(family, op, {k: float(v) for k, v in shape.items() if isinstance(v, (int, float))})
