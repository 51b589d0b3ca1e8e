"""Adapter for PipeWeave (ISCA'26, zksainx/pipeweave): FP8 GEMM, Triton fused-MoE and NCCL collectives.

Upstream layout (relative to the repository root), all durations converted to microseconds:

- ``dataset/gemm_fp8_{train,test}.csv``: FP8 GEMMs (``avg_duration`` µs) on H20/H800 (train) and
  H100/H20/H200/H800 (test). The hardware-spec and pipe-demand columns next to them are PipeWeave's
  *features*; they are recomputed from the device catalog and shapes downstream, so they stay out
  of the measurements table.
- ``pipetuning_test/moe_dse/moe_dse_<GPU>_{99,99_5,top3}.csv``: fused-MoE tile-configuration sweeps;
  the tile config (BLOCK_SIZE_*, GROUP_SIZE_M, num_warps, num_stages, smem) is a launch parameter.
- ``mlp_models_quantile/moe/<run>/kernel_reports/topk_underperforming_NVIDIA <GPU>[_sampled].csv``:
  measured MoE kernels (``avg_duration`` µs) that a quantile model flagged; the model's prediction
  columns are dropped, only what was measured is kept.
- ``pipetuning_test/demo/topk_underperforming_<GPU>.csv``: the same kind of MoE rows (default tile).
- ``dataset/collective/<GPU>/{all_reduce,send_recv}.csv``: collectives, ``time_stats.<op>.mean``
  in ms and ``size`` in bytes.

The same (kernel, device, params) measured in several files stays as several rows, told apart by
``run_id`` (file group / model run / split); repeats inside one file get a ``/rep<k>`` suffix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest import csv_rows
from components.ingest.base import AdapterOutput, IngestError, require_dir, require_file
from components.ingest.schema import (
    KERNEL_COLUMNS,
    MEASUREMENT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "pipeweave"
MOE_SHAPE: tuple[str, ...] = ("M", "E", "topk", "H", "N")
MOE_TILE: tuple[str, ...] = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)
# PipeWeave models the fused-MoE GEMMs on the bf16 tensor pipe (tc_bf16 features) and its LLM
# configs are bf16, so the MoE kernels are bf16.
MOE_DTYPE = "bf16"
_MOE_DSE = re.compile(r"^moe_dse_(?P<gpu>.+)_(?P<variant>99|99_5|top3)\.csv$")
_REPORT = re.compile(r"^topk_underperforming_(?P<gpu>.+?)(?P<sampled>_sampled)?\.csv$")


@dataclass(frozen=True)
class Table:
    """How one upstream file maps onto the canonical tables."""

    path: Path
    run_id: str
    family: str
    dtype: str
    language: str
    duration_column: str
    duration_to_us: float
    shape_columns: tuple[str, ...]  # integers; part of the kernel's identity
    op: str | None = None  # constant op name, or ...
    op_column: str | None = None  # ... the column holding it
    param_columns: tuple[str, ...] = ()  # numbers; launch configuration, not identity
    std_column: str | None = None
    trials_column: str | None = None
    device: str | None = None  # spelling from the file/folder name, or ...
    device_column: str | None = None  # ... the column holding it
    device_lookup: str | None = None  # a fuller spelling (hardware/<GPU>.json) to resolve with
    required: tuple[str, ...] = field(default=())

    def columns(self) -> list[str]:
        named = [self.duration_column, *self.shape_columns, *self.param_columns, *self.required]
        named += [c for c in (self.op_column, self.std_column, self.trials_column, self.device_column) if c]
        return list(dict.fromkeys(named))


def _hardware_name(root: Path, gpu: str) -> str | None:
    """The full device name PipeWeave's ``hardware/<GPU>.json`` gives for a short file-name spelling."""
    path = root / "hardware" / f"{gpu}.json"
    if not path.is_file():
        return None
    try:
        name = json.loads(path.read_text()).get("name")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name.strip() else None


def _tables(root: Path) -> list[Table]:
    """Every upstream file this adapter reads, in a stable order."""
    dataset = require_dir(root / "dataset", SOURCE)
    tables: list[Table] = []
    for split in ("train", "test"):
        tables.append(
            Table(
                path=require_file(dataset / f"gemm_fp8_{split}.csv", SOURCE),
                run_id=f"gemm_fp8/{split}",
                family="gemm",
                op="gemm_fp8",
                dtype="fp8",
                language="op",
                duration_column="avg_duration",
                duration_to_us=1.0,
                shape_columns=("M", "N", "K"),
                device_column="hardware",
            )
        )
    for path in sorted((root / "pipetuning_test" / "moe_dse").glob("moe_dse_*.csv")):
        match = _MOE_DSE.match(path.name)
        if match is None:
            raise IngestError(
                f"{SOURCE}: {path}: unexpected MoE sweep file name (want moe_dse_<GPU>_<99|99_5|top3>.csv)"
            )
        gpu = match["gpu"]
        tables.append(
            _moe_table(
                path,
                f"moe_dse/{match['variant']}",
                gpu,
                _hardware_name(root, gpu),
                param_columns=MOE_TILE + (("smem_size_KB",) if _has_column(path, "smem_size_KB") else ()),
                trials_column="sample_count",
            )
        )
    report_files = sorted(
        (root / "mlp_models_quantile" / "moe").glob("*/kernel_reports/topk_underperforming_*.csv")
    )
    for path in report_files:
        match = _REPORT.match(path.name)
        if match is None:  # unreachable given the glob; keeps the type checker honest
            continue
        run = path.parent.parent.name
        tables.append(
            _moe_table(
                path, f"moe_quantile/{run}" + ("/sampled" if match["sampled"] else ""), match["gpu"], None
            )
        )
    for path in sorted((root / "pipetuning_test" / "demo").glob("topk_underperforming_*.csv")):
        gpu = _REPORT.match(path.name)["gpu"]  # type: ignore[index]
        tables.append(_moe_table(path, "demo", gpu, _hardware_name(root, gpu)))
    for path in sorted((dataset / "collective").glob("*/*.csv")):
        op = path.stem
        tables.append(
            Table(
                path=path,
                run_id="collective",
                family="collective",
                op=op,
                dtype="unknown",
                language="op",
                duration_column=f"time_stats.{op}.mean",
                duration_to_us=1000.0,
                std_column=f"time_stats.{op}.std",
                shape_columns=("size", "num_workers"),
                param_columns=("rank", "devices_per_node", "max_devices_per_node"),
                device=path.parent.name,
                device_lookup=_hardware_name(root, path.parent.name),
            )
        )
    return tables


def _moe_table(path: Path, run_id: str, gpu: str, lookup: str | None, **extra: Any) -> Table:
    """A Triton fused-MoE table (tile sweep or kernel report): ``extra`` adds the sweep's tile columns."""
    return Table(
        path=path,
        run_id=run_id,
        family="moe",
        op_column="weight_type",
        dtype=MOE_DTYPE,
        language="triton",
        duration_column="avg_duration",
        duration_to_us=1.0,
        shape_columns=MOE_SHAPE,
        device=gpu,
        device_lookup=lookup,
        **extra,
    )


def _has_column(path: Path, column: str) -> bool:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return column in handle.readline().strip().split(",")


def _numbers(frame: pd.DataFrame, columns: tuple[str, ...], integer: bool) -> tuple[pd.DataFrame, pd.Series]:
    """Parsed numeric columns and, per row, the first column that fails to parse (NA when all parse)."""
    parsed = pd.DataFrame(index=frame.index)
    problem = pd.Series(pd.NA, index=frame.index, dtype="object")
    for column in columns:
        values = pd.to_numeric(frame[column].str.strip(), errors="coerce")
        ok = values.notna() & np.isfinite(values)
        if integer:
            ok &= values == values.round()
        problem = problem.where(problem.notna() | ok, column)
        parsed[column] = values.where(ok)
    return parsed, problem


def _plain(value: float) -> int | float:
    """Integral numbers as ints, so params_json reads ``{"num_warps":4}``, not ``4.0``."""
    return int(value) if float(value).is_integer() else float(value)


def _read_table(root: Path, table: Table, catalog) -> tuple[pd.DataFrame, list[dict], int]:
    label = table.path.relative_to(root).as_posix()
    frame, rejects = csv_rows.read_csv_strings(table.path, SOURCE, root)
    rows_in = len(frame) + len(rejects)
    csv_rows.require_columns(frame, table.columns(), table.path, SOURCE)

    duration = pd.to_numeric(frame[table.duration_column].str.strip(), errors="coerce") * table.duration_to_us
    shapes, shape_problem = _numbers(frame, table.shape_columns, integer=True)
    params, param_problem = _numbers(frame, table.param_columns, integer=False)
    extras, extra_problem = _numbers(
        frame, tuple(c for c in (table.std_column, table.trials_column) if c), False
    )
    op = frame[table.op_column].str.strip() if table.op_column else pd.Series(table.op, index=frame.index)
    if table.device_column:
        raw_device = frame[table.device_column].str.strip()
        device_id = csv_rows.resolve_devices(raw_device, catalog)
    else:
        raw_device = pd.Series(table.device, index=frame.index, dtype="object")
        device_id = csv_rows.resolve_devices(
            pd.Series(table.device_lookup or table.device, index=frame.index), catalog
        )

    reason = pd.Series(pd.NA, index=frame.index, dtype="object")
    checks = [
        (
            duration.isna() | ~np.isfinite(duration.fillna(0)),
            lambda idx: (
                f"{table.duration_column} is not a number: " + frame.loc[idx, table.duration_column].map(repr)
            ),
        ),
        (
            shape_problem.notna(),
            lambda idx: "shape column " + shape_problem[idx].astype(str) + " is not an integer",
        ),
        (
            param_problem.notna(),
            lambda idx: "parameter column " + param_problem[idx].astype(str) + " is not a number",
        ),
        (extra_problem.notna(), lambda idx: "column " + extra_problem[idx].astype(str) + " is not a number"),
        (op.isna() | (op == ""), lambda idx: pd.Series("empty op name", index=idx)),
        (device_id.isna(), lambda idx: "unknown device " + raw_device[idx].map(lambda s: f"'{s}'")),
    ]
    bad = csv_rows.apply_checks(frame, checks, reason, SOURCE, label, rejects)

    keep = ~bad
    shape_dicts = [
        dict(zip(table.shape_columns, (int(v) for v in row), strict=True))
        for row in shapes.loc[keep].to_numpy(dtype="float64")
    ]
    param_rows = params.loc[keep].to_numpy(dtype="float64")
    params_json = [
        canonical_json({**shape, **{c: _plain(v) for c, v in zip(table.param_columns, row, strict=True)}})
        for shape, row in zip(shape_dicts, param_rows, strict=True)
    ]
    good = pd.DataFrame(
        {
            "upstream_row": frame.index[keep].astype("int64"),
            "family": table.family,
            "op": op[keep].to_numpy(),
            "dtype": table.dtype,
            "language": table.language,
            "device_id": device_id[keep].to_numpy(),
            "device_name_raw": raw_device[keep].to_numpy(),
            "shape_json": [canonical_json(s) for s in shape_dicts],
            "params_json": params_json,
            "duration_us": duration[keep].to_numpy(),
            "duration_std_us": (extras.loc[keep, table.std_column] * table.duration_to_us).to_numpy()
            if table.std_column
            else np.nan,
            "n_trials": extras.loc[keep, table.trials_column].to_numpy() if table.trials_column else np.nan,
            "upstream_file": label,
            "run_id": table.run_id,
        }
    )
    good["shape"] = shape_dicts
    return good, rejects, rows_in


def _canonical(good: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    if good.empty:
        return csv_rows.empty_tables()
    good["kernel_id"] = [
        stable_id(SOURCE, f, o, d, s)
        for f, o, d, s in zip(good["family"], good["op"], good["dtype"], good["shape_json"], strict=True)
    ]
    shapes = dict(zip(good["shape_json"], good["shape"], strict=True))
    flops = csv_rows.definition_flops(good["family"], good["op"], good["shape_json"], shapes)
    run_id = csv_rows.run_ids(good)
    measurements = pd.DataFrame(
        {
            # Upstream's timing code is not in the snapshot and its docs do not say: no guess (profiler).
            **csv_rows.provenance(good, SOURCE, "unknown", "unknown", run_id),
            "params_json": good["params_json"],
            "duration_us": good["duration_us"],
            "duration_std_us": good["duration_std_us"],
            "n_trials": pd.array(
                np.round(good["n_trials"].to_numpy(dtype="float64")), dtype="Float64"
            ).astype("Int64"),
            "flops": flops,
            "gflops": csv_rows.gflops_of(flops, good["duration_us"]),
        }
    )
    kernels = good[["kernel_id", "family", "op", "dtype", "language", "shape_json"]].drop_duplicates(
        "kernel_id"
    )
    kernels = kernels.assign(
        source=SOURCE, name=kernels["op"] + kernels["shape_json"] + "[" + kernels["dtype"] + "]"
    )
    return conform(measurements, MEASUREMENT_COLUMNS), conform(kernels, KERNEL_COLUMNS)


def ingest(root: Path, catalog) -> AdapterOutput:
    """Read PipeWeave's measured kernel tables under ``root`` into the canonical tables."""
    root = require_dir(Path(root), SOURCE)
    parts: list[pd.DataFrame] = []
    rejects: list[dict] = []
    rows_in = 0
    for table in _tables(root):
        good, bad, n = _read_table(root, table, catalog)
        parts.append(good)
        rejects += bad
        rows_in += n
    measurements, kernels = _canonical(pd.concat(parts, ignore_index=True))
    notes = [
        "gemm_fp8 hardware-spec and pipe-feature columns are features, not measurements: not ingested",
        "MoE kernel reports: model prediction columns (pred_perf, perf_diff, rel_gap) dropped",
        "collectives: duration_us = time_stats mean (ms) x 1000; min/max/median not kept",
    ]
    return AdapterOutput.conformed(SOURCE, measurements, kernels, rejects, rows_in, notes)
