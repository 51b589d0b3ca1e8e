"""Nsight Compute backend: collect per-kernel counters and turn them into canonical rows.

- on the GPU machine, ``available_metrics`` / ``choose_metrics`` pick which wanted metrics this
  ncu/GPU offers (``ncu --query-metrics``); the ncu backend (``backends/ncu.py``) profiles with them;
- anywhere, ``parse_raw_csv`` and ``kernel_rows`` read the ``--csv --page raw`` output back.

ncu durations are taken with clocks locked to base (ncu's default ``--clock-control base``) and
under kernel replay, so they are kept apart from CUDA-event timings (``profiler`` = ``ncu``).
"""

from __future__ import annotations

import csv
import io
import subprocess

# role -> candidate metric names (first one this GPU offers wins). FLOP counts follow the ncu
# roofline sections: FMA counts as 2 operations.
WANTED_METRICS: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "fadd": ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum",),
    "fmul": ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum",),
    "ffma": ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum",),
    "dadd": ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum",),
    "dmul": ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum",),
    "dfma": ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum",),
    "hadd": ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum",),
    "hmul": ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum",),
    "hfma": ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum",),
    "tensor_fp16_fp32": (
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32.sum",
        "sm__ops_path_tensor_op_hgmma_src_fp16_dst_fp32.sum",
    ),
    "tensor_fp16_fp16": (
        "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
        "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16.sum",
        "sm__ops_path_tensor_op_hgmma_src_fp16_dst_fp16.sum",
    ),
    "tensor_bf16_fp32": ("sm__ops_path_tensor_src_bf16_dst_fp32.sum",),
    "tensor_tf32_fp32": ("sm__ops_path_tensor_src_tf32_dst_fp32.sum",),
    "tensor_pipe_active_pct": (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    ),
    "l1_hit_pct": ("l1tex__t_sector_hit_rate.pct",),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_throughput_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "sm_clock_hz": ("sm__cycles_elapsed.avg.per_second",),
    "registers_per_thread": ("launch__registers_per_thread",),
    "grid_size": ("launch__grid_size",),
    "block_size": ("launch__block_size",),
    "static_smem_bytes": ("launch__shared_mem_per_block_static",),
    "dynamic_smem_bytes": ("launch__shared_mem_per_block_dynamic",),
    "waves_per_sm": ("launch__waves_per_multiprocessor",),
}


def available_metrics(ncu: str = "ncu") -> set[str]:
    """Base metric names this ncu offers for the attached GPU."""
    out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip() and "__" in line.split()[0]}


def choose_metrics(available: set[str]) -> dict[str, str]:
    """role -> metric, keeping the first candidate whose base name (before the rollup) exists."""
    chosen = {}
    # Tensor-pipe op counters are named per source/destination precision and differ between
    # architectures and ncu versions: take every one this GPU offers, summed later as tensor FLOPs.
    for base in sorted(available):
        if base.startswith("sm__ops_path_tensor"):
            chosen[f"tensor_ops:{base}"] = f"{base}.sum"
    for role, candidates in WANTED_METRICS.items():
        for metric in candidates:
            base = metric.split(".")[0]
            if base in available or metric in available:
                chosen[role] = metric
                break
    return chosen


def parse_raw_csv(text: str) -> list[dict[str, str]]:
    """ncu ``--csv --page raw``: header row, then a units row, then one row per profiled kernel."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("ncu output has no CSV header (no '\"ID\"' column): profiling failed?")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    return [row for row in rows if row.get("ID", "").strip().isdigit()]  # drop the units row


def _number(value: str | None) -> float:
    if value is None or value.strip() in ("", "n/a"):
        return float("nan")
    return float(value.replace(",", ""))


def kernel_rows(raw_rows: list[dict[str, str]], roles: dict[str, str]) -> list[dict[str, object]]:
    """One dict per profiled kernel with role names as keys (numbers) plus the kernel name."""
    out = []
    for row in raw_rows:
        record: dict[str, object] = {
            "ncu_id": int(row["ID"]),
            "kernel_name": row.get("Kernel Name", ""),
            "grid_dims": row.get("Grid Size"),
            "block_dims": row.get("Block Size"),
        }
        for role, metric in roles.items():
            record[role] = _number(row.get(metric))
        out.append(record)
    return out
