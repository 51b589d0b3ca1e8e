"""Adapter for measurements kernelcast profiled itself (``kernelcast profile``; ``profiled-data/``).

Root layout: one folder per run, each with a ``manifest.json``: the rows format of
``kernelcast profile`` (``"format": "kernelcast-rows/1"``, components/profiling/rows.py: one row per
case or kernel, any backend) or the first runs' layout (components.profiling.records).
CUDA-event timings become ``profiler=cuda_event`` rows (one per op case: the op's whole time, as
NeuSight measures); Nsight Compute kernels become ``profiler=ncu`` rows (one per kernel, clocks
locked, with DRAM bytes, executed FLOPs and L1/L2 hit rates -- the only source with hit rates).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir
from components.ingest.kernelbench_profiled import FLUSH_KEY, kernelbench_timings
from components.ingest.schema import (
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    MEASUREMENT_COLUMNS,
    canonical_json,
    conform,
    stable_id,
    with_measurement_ids,
)

SOURCE = "kernelcast"


def _kernel_record(case: dict, kernel_name: str | None, position: int | None) -> dict[str, object]:
    shape = canonical_json(case["shape"])
    name = kernel_name or f"{case['op']}[{case['dtype']}]"
    return {
        "kernel_id": stable_id(
            SOURCE, case["family"], case["op"], case["dtype"], shape, kernel_name or "", position
        ),
        "source": SOURCE,
        "family": case["family"],
        "op": case["op"],
        "name": name,
        "language": "pytorch",
        "program": None,
        "source_path": "components/profiling/suites.py",
        "source_text": None,
        "shape_json": shape,
        "dtype": case["dtype"],
    }


def _grid(text: str | None) -> tuple[int | None, int | None, int | None]:
    """ncu prints launch dims as "(8, 8, 4)"."""
    if not text or not text.startswith("("):
        return None, None, None
    parts = [int(p) for p in text.strip("()").split(",")]
    return parts[0], parts[1], parts[2]


def _timing_rows(run: Path, entry: dict, device_id: str, raw_device: str) -> tuple[list, list, list, int]:
    from components.profiling.records import read_timing

    measurements, kernels, rejects = [], [], []
    path = run / entry["file"]
    records = read_timing(path)
    for rec in records:
        relpath = f"{run.name}/{entry['file']}"
        if rec.error or not math.isfinite(rec.duration_us):
            rejects.append(
                {
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": rec.index,
                    "reason": f"case failed on the GPU: {rec.error}",
                    "raw": rec.case_id,
                }
            )
            continue
        kernel = _kernel_record(rec.case, None, None)
        kernels.append(kernel)
        measurements.append(
            {
                "kernel_id": kernel["kernel_id"],
                "device_id": device_id,
                "device_name_raw": raw_device,
                "source": SOURCE,
                "upstream_file": relpath,
                "upstream_row": rec.index,
                "profiler": "cuda_event",
                "clock_mode": entry.get("clock_mode", "unknown"),
                "run_id": entry["run_id"],
                "params_json": canonical_json({**rec.case["shape"], "kernels": len(rec.kernel_names)}),
                "duration_us": rec.duration_us,
                "duration_std_us": rec.duration_std_us,
                "n_trials": rec.n_trials,
            }
        )
    return measurements, kernels, rejects, len(records)


def _ncu_rows(run: Path, entry: dict, device_id: str, raw_device: str) -> tuple[list, list, int]:
    from components.profiling.records import ncu_flops, read_ncu_run, read_timing

    timing = read_timing(run / entry["timing"])
    matched = read_ncu_run(run / entry["folder"], timing, entry.get("filter", ""))
    measurements, kernels = [], []
    for case, position, k, roles in matched:
        kernel = _kernel_record(case.case, str(k["kernel_name"]), position)
        kernels.append(kernel)
        duration_us = k["duration_ns"] / 1000.0
        dram_bytes = k["dram_read_bytes"] + k["dram_write_bytes"]
        tensor_gemm = case.case["family"] in ("gemm", "bmm") and case.case["dtype"] != "fp32"
        flops = ncu_flops(k, roles) if entry.get("tensor_counters_complete") or not tensor_gemm else math.nan
        gx, gy, gz = _grid(k.get("grid_dims"))
        bx, by, bz = _grid(k.get("block_dims"))
        measurements.append(
            {
                "kernel_id": kernel["kernel_id"],
                "device_id": device_id,
                "device_name_raw": raw_device,
                "source": SOURCE,
                "upstream_file": f"{run.name}/{entry['folder']}/ncu_raw.csv",
                "upstream_row": int(k["ncu_id"]),
                "profiler": "ncu",
                "clock_mode": entry.get("clock_mode", "locked"),
                "run_id": entry["run_id"],
                "params_json": canonical_json({**case.case["shape"], "kernel_position": position}),
                **dict(zip(LAUNCH_COLUMNS, (gx, gy, gz, bx, by, bz), strict=True)),
                "duration_us": duration_us,
                "n_trials": 1,
                "dram_bytes": dram_bytes,
                "achieved_gbps": dram_bytes / (duration_us * 1e3),
                "flops": flops,
                "gflops": flops / (duration_us * 1e3) if math.isfinite(flops) else math.nan,
                "l1_hit_rate": k["l1_hit_pct"] / 100.0,
                "l2_hit_rate": k["l2_hit_pct"] / 100.0,
                "arith_intensity": flops / dram_bytes
                if dram_bytes > 0 and math.isfinite(flops)
                else math.nan,
            }
        )
    return measurements, kernels, len(matched)


# Canonical ``profiler`` of each backend of a rows-format run (components/profiling/rows.py).
PROFILER_OF_BACKEND = {"events": "cuda_event", "ncu": "ncu", "rocprofv3": "rocprofv3", "host": "host"}


def _row_kernel(case: dict, row: dict) -> dict[str, object]:
    """Kernel record of a rows-format case: op cases as before; CUDA source, Triton, KernelBench programs."""
    if case["kind"] == "op":
        return _kernel_record(case, row.get("kernel_name"), row.get("kernel_position"))
    name = row.get("kernel_name") or case.get("name") or case["case_id"]
    family = {"source": "program", "triton": "program", "program": "program"}[case["kind"]]
    return {
        "kernel_id": stable_id(
            SOURCE, case["case_id"], row.get("kernel_name") or "", row.get("kernel_position")
        ),
        "source": SOURCE,
        "family": family,
        "op": case.get("name") or case["case_id"],
        "name": name,
        "language": case.get("language", "pytorch"),
        "program": case.get("path") or case.get("name"),
        "source_path": case.get("path"),
        "source_text": case.get("source"),
        "shape_json": canonical_json(case["shape"]) if case.get("shape") else None,
        "dtype": case.get("dtype", "unknown"),
    }


def program_flush(case: dict, row: dict) -> dict[str, int]:
    """``{"l2_flush_bytes": N}`` for a whole program's CUDA-event timing: the bytes the events backend zeroed
    before each timed call (``profiling.launch.L2_FLUSH_BYTES``; 0 without a flush), which give the host a
    head start on the forward (the program model subtracts it, ``programs.overheads.HEAD_START``); ``{}``
    for any other row."""
    if case.get("kind") != "program" or row.get("backend") != "events":
        return {}
    from components.profiling.launch import L2_FLUSH_BYTES

    return {FLUSH_KEY: L2_FLUSH_BYTES if row.get("l2_flush") else 0}


def _dims(value: object) -> tuple[int | None, int | None, int | None]:
    if isinstance(value, str):
        return _grid(value)
    if isinstance(value, (list, tuple)) and value:
        parts = [int(v) for v in value] + [1, 1]
        return parts[0], parts[1], parts[2]
    return None, None, None


def _rows_run(run: Path, manifest: dict, catalog) -> tuple[list, list, list, int]:
    """A rows-format run folder: one measurement per valid row; failed, quarantined and host rows rejected."""
    from components.profiling.records import quarantined_ids, read_rows

    try:
        rows = read_rows(run)
    except ValueError as exc:
        raise IngestError(str(exc)) from exc
    quarantined = quarantined_ids(run)
    measurements, kernels, rejects = [], [], []
    for index, row in enumerate(rows):
        relpath = f"{run.name}/chunks/{row.get('chunk_id', '?')}.jsonl"
        reason = (
            f"case failed on the device: {row['error']}"
            if row.get("error")
            else f"failed validation: {', '.join(quarantined[row['row_id']])}"
            if row["row_id"] in quarantined
            else "host CPU measurement: not a catalog GPU (kept in the run folder only)"
            if row["backend"] == "host"
            else None
        )
        spec = None
        if reason is None:
            try:
                spec = catalog.resolve(row["device"])
            except LookupError:
                reason = f"device {row['device']!r} is not in the catalog"
        if reason is not None:
            rejects.append(
                {
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": index,
                    "reason": reason,
                    "raw": row["case_id"],
                }
            )
            continue
        case = row["case"]
        kernel = _row_kernel(case, row)
        kernels.append(kernel)
        duration_us = float(row["duration_us"])
        reads, writes = row.get("dram_read_bytes"), row.get("dram_write_bytes")
        dram = float(reads) + float(writes) if reads is not None and writes is not None else math.nan
        flops = float(row["flops"]) if row.get("flops") is not None else math.nan
        rate = lambda value, duration_us=duration_us: (  # noqa: E731
            float(value) / (duration_us * 1e3) if value is not None else math.nan
        )
        (gx, gy, gz), (bx, by, bz) = _dims(row.get("grid")), _dims(row.get("block"))
        measurements.append(
            {
                "kernel_id": kernel["kernel_id"],
                "device_id": spec.id,
                "device_name_raw": row["device_name"],
                "source": SOURCE,
                "upstream_file": relpath,
                "upstream_row": index,
                "profiler": PROFILER_OF_BACKEND[row["backend"]],
                "clock_mode": row["clock_mode"],
                "run_id": row["run_id"],
                "params_json": canonical_json(
                    {
                        **(case.get("shape") or {}),
                        "case": case["case_id"],
                        "kernel_position": row.get("kernel_position"),
                        **program_flush(case, row),
                    }
                ),
                **dict(zip(LAUNCH_COLUMNS, (gx, gy, gz, bx, by, bz), strict=True)),
                "duration_us": duration_us,
                "duration_std_us": row.get("duration_std_us"),
                "n_trials": row["repeats"],
                "dram_bytes": dram,
                "achieved_gbps": dram / (duration_us * 1e3),
                "flops": flops,
                "gflops": flops / (duration_us * 1e3),
                "fp32_gflops": rate(row.get("flops_fp32")),
                "fp64_gflops": rate(row.get("flops_fp64")),
                "l1_hit_rate": row.get("l1_hit_rate"),
                "l2_hit_rate": row.get("l2_hit_rate"),
                "arith_intensity": flops / dram if dram and dram > 0 else math.nan,
            }
        )
    return measurements, kernels, rejects, len(rows)


def run_folders(root: Path) -> list[Path]:
    """The run folders of ``root``: a folder of runs (each with a manifest.json), or one run folder itself;
    an IngestError when it holds none."""
    root = Path(root)
    runs = (
        [root]
        if (root / "manifest.json").is_file()
        else sorted(p.parent for p in root.glob("*/manifest.json"))
    )
    if not runs:
        raise IngestError(f"{SOURCE}: no run folders with a manifest.json under {root}")
    return runs


def ingest(root: Path, catalog) -> AdapterOutput:
    require_dir(root, SOURCE)
    measurements: list = []
    kernels: list = []
    rejects: list = []
    rows_in = 0
    for run in run_folders(root):
        try:
            manifest = json.loads((run / "manifest.json").read_text())
        except json.JSONDecodeError as exc:
            raise IngestError(f"{run / 'manifest.json'}: not valid JSON ({exc})") from exc
        if manifest.get("format") == "kernelcast-rows/1":
            m, k, r, n = _rows_run(run, manifest, catalog)
            measurements, kernels, rejects, rows_in = measurements + m, kernels + k, rejects + r, rows_in + n
            continue
        raw_device = manifest["device_name"]
        device_id = catalog.resolve(raw_device).id
        for entry in manifest.get("timing", []):
            m, k, r, n = _timing_rows(run, entry, device_id, raw_device)
            measurements += m
            kernels += k
            rejects += r
            rows_in += n
        for entry in manifest.get("ncu", []):
            try:
                m, k, n = _ncu_rows(run, entry, device_id, raw_device)
            except ValueError as exc:
                raise IngestError(str(exc)) from exc
            measurements += m
            kernels += k
            rows_in += n
    kernel_frame = (
        conform(pd.DataFrame(kernels), KERNEL_COLUMNS).drop_duplicates("kernel_id").reset_index(drop=True)
    )
    # Ids filled here too (the runner fills them for every source) so the adapter's output is
    # complete on its own, e.g. for `kernelcast evaluate --source kernelcast --from DIR`.
    measurement_frame = with_measurement_ids(conform(pd.DataFrame(measurements), MEASUREMENT_COLUMNS))
    return AdapterOutput.conformed(
        SOURCE,
        measurement_frame,
        kernel_frame,
        rejects,
        rows_in,
    )


def kernelbench_runs(root: Path, catalog) -> pd.DataFrame:
    """The KernelBench timings (``kernelbench_profiled.kernelbench_timings``) of the run folders directly
    under ``root`` (or ``root`` itself when it is one run), read by this adapter (failed and quarantined rows
    left out). A device the catalog does not know is an error naming the run."""
    out = ingest(root, catalog)
    unknown = out.rejects[out.rejects["reason"].astype(str).str.endswith("is not in the catalog")]
    if len(unknown):
        first = unknown.iloc[0]
        raise IngestError(f"{Path(root) / str(first['upstream_file'])}: {first['reason']}")
    rows, _ = kernelbench_timings(out.measurements, out.kernels)
    return rows
