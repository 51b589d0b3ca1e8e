"""``ncu``: Nsight Compute counters per kernel, exported with ``--csv --page raw``.

Per chunk: (1) a ``kernels`` pass records the kernel names each case launches; (2) ``ncu
--profile-from-start off --clock-control base --cache-control all`` profiles the same cases, each
run once between cudaProfilerStart/Stop; (3) the raw CSV's kernels are matched to cases by launch
order, checked by name. One row per kernel: duration (clocks locked to base, replayed -- kept apart
from CUDA-event timings), DRAM bytes read/written, FLOPs per precision from SASS instruction
counters (FMA = 2), tensor-pipe ops, L1/L2 hit rates. A GPU whose counters this user may not read
(ERR_NVGPUCTRPERM) is a ``CounterPermissionError`` naming the fix, not an empty result.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from components.profiling.backends.base import (
    BackendUnavailable,
    CounterPermissionError,
    MeasureContext,
    base_row,
)
from components.profiling.backends.events import gpu_environment, require_gpu
from components.profiling.cases import Case

PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
TENSOR_FAMILIES = frozenset({"gemm", "bmm", "linear"})


def permission_problem(output: str, device: str) -> CounterPermissionError | None:
    """The clear error for ncu's "no permission to access GPU performance counters" output."""
    if PERMISSION_ERROR not in output:
        return None
    return CounterPermissionError(
        f"ncu on {device}: {PERMISSION_ERROR} -- this user may not read the GPU's performance counters. "
        "Run the profiling worker as root or with CAP_SYS_ADMIN, or load the driver with "
        "NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM); "
        "--backend events still works without counters"
    )


def ncu_version(ncu: str = "ncu") -> str:
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return out[-1].strip() if out else "unknown"


def _get(kernel: dict[str, Any], role: str) -> float:
    value = kernel.get(role, math.nan)
    return (
        0.0 if value is None or value != value else float(value)
    )  # an absent SASS counter: no such instruction


def kernel_metrics(kernel: dict[str, Any], roles: dict[str, str], case: dict[str, Any]) -> dict[str, Any]:
    """Canonical metrics of one ncu kernel (role-keyed numbers from
    ``components.profiling.ncu.kernel_rows``)."""
    from components.profiling.records import _tensor_roles

    duration_us = kernel["duration_ns"] / 1000.0
    fp32 = _get(kernel, "fadd") + _get(kernel, "fmul") + 2 * _get(kernel, "ffma")
    fp64 = _get(kernel, "dadd") + _get(kernel, "dmul") + 2 * _get(kernel, "dfma")
    fp16 = _get(kernel, "hadd") + _get(kernel, "hmul") + 2 * _get(kernel, "hfma")
    tensor_roles = _tensor_roles(roles)
    tensor = sum(_get(kernel, r) for r in tensor_roles) if tensor_roles else math.nan
    # Without tensor counters a half-precision GEMM's FLOPs are unknown, not zero.
    tensor_case = case.get("family") in TENSOR_FAMILIES and case.get("dtype") != "fp32"
    total = fp32 + fp64 + fp16 + (tensor if tensor == tensor else 0.0)
    if tensor != tensor and tensor_case:
        total = math.nan
    pct = lambda role: kernel.get(role, math.nan) / 100.0  # noqa: E731
    return {
        "duration_us": duration_us,
        "duration_std_us": None,
        "dram_read_bytes": kernel.get("dram_read_bytes"),
        "dram_write_bytes": kernel.get("dram_write_bytes"),
        "flops": total,
        "flops_fp32": fp32,
        "flops_fp64": fp64,
        "flops_fp16": fp16,
        "flops_tensor": tensor,
        "tensor_ops": tensor,
        "l1_hit_rate": pct("l1_hit_pct"),
        "l2_hit_rate": pct("l2_hit_pct"),
        "grid": kernel.get("grid_dims"),
        "block": kernel.get("block_dims"),
        "registers_per_thread": kernel.get("registers_per_thread"),
        "ncu_id": kernel.get("ncu_id"),
    }


def rows_from_ncu(
    cases: list[Case],
    kernel_passes: list[dict[str, Any]],
    raw_csv: str,
    roles: dict[str, str],
    ctx: MeasureContext,
    env: dict[str, Any],
    source: Path,
) -> list[dict[str, Any]]:
    """Rows for a chunk from its ``kernels`` pass records and ncu raw CSV (pure; tested on real output)."""
    from components.profiling.ncu import kernel_rows, parse_raw_csv
    from components.profiling.records import CaseRecord, match_ncu_to_cases

    by_id = {rec["case_id"]: rec for rec in kernel_passes}
    records = []
    for index, case in enumerate(cases):
        rec = by_id.get(case.case_id, {"error": "no kernels pass record"})
        records.append(
            CaseRecord(
                index=index,
                case_id=case.case_id,
                case=case.spec,
                device_name=env["device_name"],
                duration_us=math.nan,
                duration_std_us=math.nan,
                n_trials=0,
                kernel_names=tuple(rec.get("kernels", ())),
                error=rec.get("error"),
            )
        )
    kernels = kernel_rows(parse_raw_csv(raw_csv), roles)
    matched = match_ncu_to_cases(records, kernels, source)
    rows = []
    for case, record in zip(cases, records, strict=False):
        if record.error:
            row = base_row(ctx, env, "ncu", case)
            row["error"] = record.error
            rows.append(row)
    case_of = {c.case_id: c for c in cases}
    for record, position, kernel in matched:
        row = base_row(ctx, env, "ncu", case_of[record.case_id], str(kernel["kernel_name"]), position)
        row["repeats"] = 1  # ncu replays one launch; its duration is that launch under locked clocks
        row.update(kernel_metrics(kernel, roles, record.case))
        rows.append(row)
    return rows


class NcuBackend:
    name = "ncu"
    kinds = frozenset({"op", "source", "triton", "program"})
    executable = "ncu"

    def check(self) -> None:
        require_gpu(self.name)
        if shutil.which(self.executable) is None:
            raise BackendUnavailable("--backend ncu: Nsight Compute (`ncu`) is not on PATH on this worker")

    def environment(self) -> dict[str, Any]:
        return gpu_environment("ncu", ncu_version(self.executable), "locked")

    def measure(self, cases: list[Case], ctx: MeasureContext) -> list[dict[str, Any]]:
        from components.profiling.ncu import available_metrics, choose_metrics

        env = self.environment()
        raw = Path(ctx.raw_dir or ".")
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "cases.json").write_text(json.dumps([c.to_json() for c in cases]))
        target = [
            sys.executable,
            "-m",
            "components.profiling.target",
            "--cases",
            str(raw / "cases.json"),
            "--warmup",
            str(ctx.warmup),
        ]
        subprocess.run(
            [*target, "--mode", "kernels", "--out", str(raw / "kernels.jsonl")],
            check=True,
            capture_output=True,
            text=True,
        )
        roles = choose_metrics(available_metrics(self.executable))
        (raw / "ncu_roles.json").write_text(json.dumps({"roles": roles}, indent=1))
        command = [
            self.executable,
            "--profile-from-start",
            "off",
            "--csv",
            "--page",
            "raw",
            "--clock-control",
            "base",
            "--cache-control",
            "all" if ctx.l2_flush else "none",
            "--metrics",
            ",".join(sorted(set(roles.values()))),
            *target,
            "--mode",
            "ncu",
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        (raw / "ncu_raw.csv").write_text(result.stdout)
        (raw / "ncu_stderr.txt").write_text(result.stderr[-20000:])
        problem = permission_problem(result.stdout + result.stderr, env["device_name"])
        if problem is not None:
            raise problem
        if result.returncode != 0:
            raise RuntimeError(f"ncu exited {result.returncode}; see {raw / 'ncu_stderr.txt'}")
        passes = [
            json.loads(line) for line in (raw / "kernels.jsonl").read_text().splitlines() if line.strip()
        ]
        return rows_from_ncu(cases, passes, result.stdout, roles, ctx, env, raw / "ncu_raw.csv")
