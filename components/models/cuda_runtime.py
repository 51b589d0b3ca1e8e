"""Runtime of whole-program rows (gpuFLOPBench kernels, KernelBench modules) for the tabular family.

The op-level model has no features for a whole program, so these rows used to get a silent NaN.
Now each gets either a prediction or a stated reason (``pred_note``):
- a gpuFLOPBench CUDA kernel with static SASS features (``s_*``) and a launch (grid, block):
  the static roofline estimate on the row's GPU (components.models.cuda_estimate), scaled by the
  efficiency calibrated on the bolet train side (measured/estimated median 1.10 on the RTX 3080;
  90% of kernels within 0.1x..800x: loop trip counts are not in the SASS);
- otherwise the reason: OpenMP offload kernel (no CUDA source for NVRTC), no static features (the
  source did not compile, see ``benchmarks/static_coverage.py``; or the feature table was built without
  the static stage), no launch in the data, a
  KernelBench PyTorch module (answered by module questions, ``predict_module``), GPU not in the catalog.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

LAUNCH_COLUMNS: tuple[str, ...] = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
REASON_OPENMP = "OpenMP offload kernel: no CUDA source for the static analyser (NVRTC), runtime not predicted"
REASON_NO_STATIC = (
    "CUDA kernel without static features (its source did not compile or the kernel was not found)"
)
REASON_NO_STATIC_TABLE = (
    "CUDA kernel: this feature table has no static features (build them with `kernelcast features "
    "static-table` and join them with `kernelcast features build --static`)"
)
REASON_NO_LAUNCH = "no launch configuration (grid, block) in the data"
REASON_MODULE = (
    "PyTorch module (KernelBench): answered by module questions (predict_module), not the op-level model"
)
REASON_DEVICE = "GPU not in the device catalog"
REASON_OTHER = "whole program without source or static features"


def _spec(device_id: str, cache: dict[str, Any]) -> Any:
    if device_id not in cache:
        from components.devices import load_catalog

        try:
            cache[device_id] = load_catalog().resolve(device_id)
        except LookupError:
            cache[device_id] = None
    return cache[device_id]


def program_runtime(features: pd.DataFrame) -> pd.DataFrame:
    """``pred_duration_us`` and ``pred_note`` for the whole-program rows of ``features`` (index:
    those rows)."""
    from components.features.static.sass import INSTRUCTION_CLASSES
    from components.models.cuda_estimate import estimate_kernel

    if "family" not in features.columns:
        return pd.DataFrame(columns=["pred_duration_us", "pred_note"])
    rows = features[features["family"].astype(str) == "program"]
    out = pd.DataFrame(
        {"pred_duration_us": np.nan, "pred_note": pd.Series(pd.NA, index=rows.index, dtype="string")},
        index=rows.index,
    )
    if rows.empty:
        return out
    missing = [c for c in LAUNCH_COLUMNS if c not in rows.columns]
    if missing:
        from components.models.roofline_class import attach_inputs

        rows = attach_inputs(rows)
    specs: dict[str, Any] = {}
    language = rows["language"].astype(str) if "language" in rows.columns else pd.Series("", index=rows.index)
    for index, row in rows.iterrows():
        source = str(row.get("source"))
        if source == "kernelbench":
            out.at[index, "pred_note"] = REASON_MODULE
            continue
        if language.get(index) == "openmp":
            out.at[index, "pred_note"] = REASON_OPENMP
            continue
        total = pd.to_numeric(row.get("s_total"), errors="coerce")
        if total is None or not np.isfinite(total):
            why = REASON_NO_STATIC if "s_total" in rows.columns else REASON_NO_STATIC_TABLE
            out.at[index, "pred_note"] = why if source == "gpuflopbench" else REASON_OTHER
            continue
        dims = [pd.to_numeric(row.get(c), errors="coerce") for c in LAUNCH_COLUMNS]
        if any(d is None or not np.isfinite(d) or d <= 0 for d in dims):
            out.at[index, "pred_note"] = REASON_NO_LAUNCH
            continue
        spec = _spec(str(row.get("device_id")), specs)
        if spec is None:
            out.at[index, "pred_note"] = REASON_DEVICE
            continue
        ins = {c: int(row.get(f"s_{c}") or 0) for c in INSTRUCTION_CLASSES}
        loop = {c: int(row.get(f"s_loop_{c}") or 0) for c in INSTRUCTION_CLASSES}
        grid = tuple(int(d) for d in dims[:3])
        block = tuple(int(d) for d in dims[3:])
        estimate = estimate_kernel(str(row.get("op")), ins, loop, grid, block, spec)
        out.at[index, "pred_duration_us"] = estimate.duration_us
        out.at[index, "pred_note"] = "static SASS roofline estimate (loop bodies assumed to run 8 times)"
    return out


def unpredicted_reasons(frame: pd.DataFrame, target: str = "duration_us") -> dict[str, int]:
    """How many scored rows have no ``pred_<target>``, by stated reason ('no reason given' counted too)."""
    column = f"pred_{target}"
    if target not in frame.columns:
        return {}
    asked = pd.to_numeric(frame[target], errors="coerce").notna()
    pred = (
        pd.to_numeric(frame[column], errors="coerce")
        if column in frame.columns
        else pd.Series(np.nan, index=frame.index)
    )
    missing = asked & pred.isna()
    notes = frame["pred_note"] if "pred_note" in frame.columns else pd.Series(pd.NA, index=frame.index)
    return dict(Counter(str(n) if isinstance(n, str) else "no reason given" for n in notes[missing]))


__all__ = ["program_runtime", "unpredicted_reasons"]
