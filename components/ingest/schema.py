"""The canonical tables: one schema for everything measured, whatever its origin.

``measurements``: one row per (kernel, device, launch/shape params, source, run); metric columns
carry their unit in the name; every row carries provenance.
``kernels``: one row per kernel (a program's kernel, or an op + shapes + dtype).
``rejects``: rows an adapter could not parse, with the file, row and reason -- so that
rows in = canonical + rejects, always.

Missing metrics are NaN / None: never filled with a guess.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # frames only: a question reads the column lists alone

# Column -> pandas dtype. Order is the on-disk order.
MEASUREMENT_COLUMNS: dict[str, str] = {
    "measurement_id": "string",  # sha1 of the key columns below
    "kernel_id": "string",  # -> kernels.kernel_id
    "device_id": "string",  # catalog id (components.devices), never a dataset spelling
    "device_name_raw": "string",  # the spelling the source used, kept for audit
    # source: neusight | gpuflopbench | kernelbench | benchmark_hub | pipeweave | aiconfigurator | profiled
    "source": "string",
    "upstream_file": "string",  # path relative to the source root
    "upstream_row": "Int64",  # 0-based data row (or entry index) in that file
    "profiler": "string",  # ncu | cuda_event | kernel_tuner | torch_event | ...
    "clock_mode": "string",  # locked | base | boost | unknown
    "run_id": "string",  # upstream run/commit/config identifying repeated measurements
    "params_json": "string",  # launch + shape parameters that vary per row (canonical JSON)
    "grid_x": "Int64",
    "grid_y": "Int64",
    "grid_z": "Int64",
    "block_x": "Int64",
    "block_y": "Int64",
    "block_z": "Int64",
    # metrics -- unit in the name
    "duration_us": "float64",  # kernel (or op / program) runtime
    "duration_std_us": "float64",
    "n_trials": "Int64",
    "dram_bytes": "float64",
    "achieved_gbps": "float64",  # DRAM bandwidth, 1e9 B/s
    "gflops": "float64",  # all floating-point work, 1e9 FLOP/s (FMA = 2)
    "fp32_gflops": "float64",
    "fp64_gflops": "float64",
    "int_gops": "float64",  # integer instructions, 1e9 /s
    "flops": "float64",  # total FLOPs of the kernel/op when known (measured or by op definition)
    "l1_hit_rate": "float64",  # fraction [0, 1]
    "l2_hit_rate": "float64",  # fraction [0, 1]
    "arith_intensity": "float64",  # FLOP per DRAM byte
    "fp32_arith_intensity": "float64",
    "fp64_arith_intensity": "float64",
    "int_arith_intensity": "float64",  # integer ops per DRAM byte
    "roofline_class": "string",  # bandwidth | compute (against the device's ridge point)
    "roofline_class_published": "string",  # a source's own labelling rule, when it has one
}
# The measured launch geometry of a row (CTAs and threads per CTA, per axis).
LAUNCH_COLUMNS: tuple[str, ...] = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
RAW_LIMIT = 500  # characters of a raw row kept in the rejects table for audit
# The measured metrics a predictor may predict (numeric targets, and an answer's metric fields).
TARGET_METRICS: tuple[str, ...] = (
    "duration_us",
    "achieved_gbps",
    "gflops",
    "l1_hit_rate",
    "l2_hit_rate",
    "arith_intensity",
)

KERNEL_COLUMNS: dict[str, str] = {
    "kernel_id": "string",
    "source": "string",
    "family": "string",  # gemm | bmm | linear | conv | elementwise | softmax | layernorm | rmsnorm |
    # attention | moe | allreduce | reduction | stencil | program (whole-program source) | ...
    "op": "string",  # op name within the family (add, gelu, sgemm, ...) or kernel name
    "name": "string",  # human-readable name (demangled kernel, problem file, op)
    "language": "string",  # cuda | hip | openmp | pytorch | op
    "program": "string",  # enclosing program / problem when there is one
    "source_path": "string",  # path of the source file(s) relative to the source root
    "source_text": "string",  # kernel/program source when the source ships it
    "shape_json": "string",  # op shapes (canonical JSON) for op kernels
    # dtype: fp32 | fp16 | bf16 | fp8 | fp64 | int8 | mixed | unknown, and the quantised GEMM dtypes
    "dtype": "string",
    # tf32 | fp8_block | nvfp4 | int8_wo | int4_wo (components/physics/roofline.GEMM_DTYPES)
}

REJECT_COLUMNS: dict[str, str] = {
    "source": "string",
    "upstream_file": "string",
    "upstream_row": "Int64",
    "reason": "string",
    "raw": "string",  # the raw row/entry, truncated, for audit
}

MEASUREMENT_KEY: tuple[str, ...] = ("kernel_id", "device_id", "params_json", "source", "run_id")
FAMILIES_OP: frozenset[str] = frozenset(
    {
        "gemm",
        "bmm",
        "linear",
        "conv",
        "elementwise",
        "softmax",
        "layernorm",
        "rmsnorm",
        "attention",
        "moe",
        "allreduce",
    }
)


def canonical_json(value: dict[str, Any]) -> str:
    """Stable JSON for params/shapes: sorted keys, no spaces, numpy scalars made plain."""

    def plain(v: Any) -> Any:
        if hasattr(v, "item"):
            return v.item()
        return v

    return json.dumps({k: plain(v) for k, v in value.items()}, sort_keys=True, separators=(",", ":"))


def stable_id(*parts: object) -> str:
    """Short content hash used for kernel and measurement ids (deterministic across runs)."""
    digest = hashlib.sha1("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return digest[:16]


def conform(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Add missing columns as nulls, order them, cast to the schema dtypes; reject unknown columns."""
    if list(frame.columns) == list(columns) and all(str(frame[c].dtype) == t for c, t in columns.items()):
        return frame.reset_index(drop=True)  # already conformed (adapters' frames pass here twice)
    unknown = sorted(set(frame.columns) - set(columns))
    if unknown:
        raise ValueError(f"columns not in the canonical schema: {unknown}")
    out = pd.DataFrame(index=frame.index)
    for name, dtype in columns.items():
        series = frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index)
        out[name] = (
            series.astype(dtype)
            if dtype != "float64"
            else pd.to_numeric(series, errors="raise").astype("float64")
        )
    return out.reset_index(drop=True)


def with_measurement_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill ``measurement_id`` from the key columns."""
    frame = frame.copy()
    keys = zip(*(frame[k].astype(str).tolist() for k in MEASUREMENT_KEY), strict=False)
    frame["measurement_id"] = [stable_id(*key) for key in keys]
    return frame


def empty(columns: dict[str, str]) -> pd.DataFrame:
    return conform(pd.DataFrame(), columns)
