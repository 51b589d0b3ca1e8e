"""The device numbers the feature formulas need (SMs, clock, bandwidths, occupancy limits, per-pipe peaks),
one row per GPU from the catalog, in SI units (Hz, B/s, FLOP/s); NaN where the catalog lacks one."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

# Occupancy limits come from the catalog per GPU (max_ctas_per_sm: 32 on Pascal-Volta, Ampere
# GA100 and Hopper, 16 on Turing and GA10x, 24 on Ada; AMD 16 workgroups per CU; resident threads
# = warp/wave slots x warp size, so wave32 RDNA is not credited with HIP's nominal 2048). These are
# the fallbacks for a device without them.
MAX_CTAS_PER_SM: float = 32.0
MAX_THREADS_PER_SM: float = 2048.0
SFU_OPS_PER_CLK_PER_SM: float = (
    16.0  # MUFU: 4 per SM sub-partition per clock since Volta (PipeWeave xuFp32=16)
)
L2_OVER_DRAM: float = 2.0  # L2 bandwidth fallback: ~1.6x (A100) to 2.6x (H100) DRAM in PipeWeave's specs


def _peak(spec: Any, precision: str, tensor: bool) -> float:
    try:
        value = spec.peak_flops(precision, tensor=tensor)
    except (KeyError, ValueError, LookupError, TypeError, AttributeError):
        return math.nan
    return float(value) if value is not None and float(value) > 0 else math.nan


def _attr(spec: Any, names: Iterable[str], default: float = math.nan) -> float:
    for name in names:
        value = getattr(spec, name, None)
        if value is not None:
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(number) and number > 0:
                return number
    return default


DEVICE_COLUMNS: tuple[str, ...] = (
    "sms",
    "clock_hz",
    "dram_Bps",
    "l2_Bps",
    "max_threads_sm",
    "max_ctas_sm",
    "sfu_ops_s",
    "fma_fp32",
    "fma_fp64",
    "fma_fp16",
    "tensor_fp16",
    "tensor_bf16",
    "tensor_fp8",
    "tensor_tf32",
    "tensor_fp32",  # AMD CDNA's FP32 matrix cores (NaN on NVIDIA: no FP32 tensor pipe)
    "tensor_fp64",
    "tensor_int8",
    "tensor_fp4",
)


def device_table(device_ids: Iterable[str], catalog: Any) -> pd.DataFrame:
    """Per device: the spec numbers the formulas need, in SI units (Hz, B/s, FLOP/s); NaN if unknown."""
    records: dict[str, list[float]] = {}
    for device_id in sorted({str(d) for d in device_ids if isinstance(d, str)}):
        try:
            spec = catalog.get(device_id)
        except (KeyError, LookupError):
            spec = None
        if spec is None:
            records[device_id] = [math.nan] * len(DEVICE_COLUMNS)
            continue
        sms = _attr(spec, ("sms", "num_sms", "compute_units"))
        clock_hz = _attr(spec, ("boost_clock_mhz", "clock_mhz")) * 1e6
        dram = _attr(spec, ("dram_gbps",)) * 1e9
        l2 = _attr(spec, ("l2_gbps", "l2_bandwidth_gbps"), dram / 1e9 * L2_OVER_DRAM) * 1e9
        records[device_id] = [
            sms,
            clock_hz,
            dram,
            l2,
            _attr(spec, ("max_resident_threads_per_sm", "max_threads_per_sm"), MAX_THREADS_PER_SM),
            _attr(spec, ("max_ctas_per_sm",), MAX_CTAS_PER_SM),
            sms * clock_hz * SFU_OPS_PER_CLK_PER_SM,
            _peak(spec, "fp32", False),
            _peak(spec, "fp64", False),
            _peak(spec, "fp16", False),
            _peak(spec, "fp16", True),
            _peak(spec, "bf16", True),
            _peak(spec, "fp8", True),
            _peak(spec, "tf32", True),
            _peak(spec, "fp32", True),
            _peak(spec, "fp64", True),
            _peak(spec, "int8", True),
            _peak(spec, "fp4", True),
        ]
    return pd.DataFrame.from_dict(records, orient="index", columns=list(DEVICE_COLUMNS), dtype="float64")
