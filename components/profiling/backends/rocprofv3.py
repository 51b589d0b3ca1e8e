"""``rocprofv3`` (AMD ROCm): kernel trace plus FLOP, HBM-byte and cache counters per dispatch.

Per chunk, ``rocprofv3 --kernel-trace --marker-trace -i counters.txt --output-format csv`` runs the
``rocprof`` target (each case's measured call inside a ROCTx range ``kc:<case_id>``). rocprofv3 runs
the program once per ``pmc:`` line (counter groups that fit the hardware in one pass) and writes,
per pass, ``*_kernel_trace.csv`` (one row per dispatch, ns timestamps), ``*_counter_collection.csv``
(long format: one row per counter per dispatch) and ``*_marker_api_trace.csv``. A dispatch belongs
to the case whose range contains it; the k-th dispatch of a case is matched across passes.
Derived metrics follow ROCm Compute Profiler's (Omniperf) definitions:
- FLOPs: 64 lanes x (ADD + MUL + TRANS + 2 x FMA) per precision of the wave-level SQ_INSTS_VALU_*
  counts, plus 512 per MFMA "MOPS" unit (SQ_INSTS_VALU_MFMA_MOPS_*);
- HBM bytes: read (RDREQ - RDREQ_32B) x 64 + RDREQ_32B x 32, write (WRREQ - WRREQ_64B) x 32 + WRREQ_64B x 64
  (TCC_EA0_* on MI300, TCC_EA_* before);
- L2 hit rate TCC_HIT / (TCC_HIT + TCC_MISS); vL1D hit rate 1 - TCP->TCC requests / TCP accesses.
Durations come from the kernel trace (End - Start), not from counter passes, which serialise dispatches.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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
from components.profiling.target import RANGE_PREFIX

PRECISIONS = ("F16", "F32", "F64")
MFMA = {"F16": "fp16", "BF16": "fp16", "F32": "fp32", "F64": "fp64", "I8": None}
# One pass per group: what a CDNA GPU collects together (ROCm Compute Profiler's grouping).
COUNTER_GROUPS: tuple[tuple[str, ...], ...] = (
    tuple(f"SQ_INSTS_VALU_{op}_{p}" for p in ("F16", "F32") for op in ("ADD", "MUL", "FMA", "TRANS")),
    tuple(f"SQ_INSTS_VALU_{op}_F64" for op in ("ADD", "MUL", "FMA", "TRANS"))
    + tuple(f"SQ_INSTS_VALU_MFMA_MOPS_{p}" for p in ("F16", "BF16", "F32", "F64")),
    (
        "TCC_EA0_RDREQ_sum",
        "TCC_EA0_RDREQ_32B_sum",
        "TCC_EA0_WRREQ_sum",
        "TCC_EA0_WRREQ_64B_sum",
        "TCC_HIT_sum",
        "TCC_MISS_sum",
    ),
    (
        "TCP_TOTAL_CACHE_ACCESSES_sum",
        "TCP_TCC_READ_REQ_sum",
        "TCP_TCC_WRITE_REQ_sum",
        "TCP_TCC_ATOMIC_WITH_RET_REQ_sum",
        "TCP_TCC_ATOMIC_WITHOUT_RET_REQ_sum",
    ),
)


class RocprofOutputError(ValueError):
    """rocprofv3 output that cannot be read consistently; names the file and row."""


@dataclass
class Dispatch:
    dispatch_id: int
    kernel_name: str
    start_ns: int
    end_ns: int
    grid: tuple[int, ...] | None = None
    workgroup: tuple[int, ...] | None = None
    vgpr: int | None = None
    sgpr: int | None = None
    lds_bytes: int | None = None
    scratch_bytes: int | None = None
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def duration_us(self) -> float:
        return (self.end_ns - self.start_ns) / 1000.0


def _rows(text: str, required: tuple[str, ...], source: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise RocprofOutputError(f"{source}: not rocprofv3 output (no {', '.join(missing)} column)")
    return list(reader)


def _int(value: str | None) -> int | None:
    return None if value in (None, "") else int(float(value))


def parse_kernel_trace(text: str, source: str = "kernel_trace.csv") -> list[Dispatch]:
    """``*_kernel_trace.csv``: one dispatch per row (``Kind`` KERNEL_DISPATCH), ns timestamps."""
    out = []
    rows = _rows(text, ("Dispatch_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp"), source)
    for number, row in enumerate(rows, start=2):
        if row.get("Kind", "KERNEL_DISPATCH") != "KERNEL_DISPATCH":
            continue
        try:
            start, end = int(row["Start_Timestamp"]), int(row["End_Timestamp"])
            grid = tuple(int(row[f"Grid_Size_{a}"]) for a in "XYZ") if "Grid_Size_X" in row else None
            group = (
                tuple(int(row[f"Workgroup_Size_{a}"]) for a in "XYZ") if "Workgroup_Size_X" in row else None
            )
            out.append(
                Dispatch(
                    int(row["Dispatch_Id"]),
                    row["Kernel_Name"],
                    start,
                    end,
                    grid,
                    group,
                    _int(row.get("VGPR_Count")),
                    _int(row.get("SGPR_Count")),
                    _int(row.get("LDS_Block_Size")),
                    _int(row.get("Scratch_Size")),
                )
            )
        except (TypeError, ValueError) as exc:
            raise RocprofOutputError(f"{source}: line {number}: {exc}") from exc
        if end < start:
            raise RocprofOutputError(f"{source}: line {number}: dispatch ends before it starts")
    return out


def parse_counter_collection(text: str, source: str = "counter_collection.csv") -> list[Dispatch]:
    """``*_counter_collection.csv`` (long format) -> one Dispatch per Dispatch_Id with its counters."""
    dispatches: dict[int, Dispatch] = {}
    rows = _rows(
        text,
        ("Dispatch_Id", "Kernel_Name", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp"),
        source,
    )
    for number, row in enumerate(rows, start=2):
        try:
            key = int(row["Dispatch_Id"])
            dispatch = dispatches.get(key)
            if dispatch is None:
                dispatch = dispatches[key] = Dispatch(
                    key,
                    row["Kernel_Name"],
                    int(row["Start_Timestamp"]),
                    int(row["End_Timestamp"]),
                    grid=(int(row["Grid_Size"]),) if row.get("Grid_Size") else None,
                    workgroup=(int(row["Workgroup_Size"]),) if row.get("Workgroup_Size") else None,
                    vgpr=_int(row.get("VGPR_Count")),
                    sgpr=_int(row.get("SGPR_Count")),
                    lds_bytes=_int(row.get("LDS_Block_Size")),
                    scratch_bytes=_int(row.get("Scratch_Size")),
                )
            name = row["Counter_Name"]
            if name in dispatch.counters:
                raise RocprofOutputError(f"{source}: line {number}: counter {name} twice for dispatch {key}")
            dispatch.counters[name] = float(row["Counter_Value"])
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RocprofOutputError):
                raise
            raise RocprofOutputError(f"{source}: line {number}: {exc}") from exc
    return list(dispatches.values())


def parse_marker_ranges(text: str, source: str = "marker_api_trace.csv") -> list[tuple[str, int, int]]:
    """(case_id, start_ns, end_ns) of each ``kc:<case_id>`` ROCTx range."""
    out = []
    for row in _rows(text, ("Function", "Start_Timestamp", "End_Timestamp"), source):
        if row["Function"].startswith(RANGE_PREFIX):
            out.append(
                (row["Function"][len(RANGE_PREFIX) :], int(row["Start_Timestamp"]), int(row["End_Timestamp"]))
            )
    return out


def assign_to_cases(
    dispatches: list[Dispatch], ranges: list[tuple[str, int, int]]
) -> dict[str, list[Dispatch]]:
    """Dispatches that ran inside each case's range, in start order (warm-ups fall outside every range)."""
    out: dict[str, list[Dispatch]] = {case_id: [] for case_id, _, _ in ranges}
    for dispatch in sorted(dispatches, key=lambda d: d.start_ns):
        for case_id, start, end in ranges:
            if start <= dispatch.start_ns and dispatch.end_ns <= end:
                out[case_id].append(dispatch)
                break
    return out


def _sum_prefixed(counters: dict[str, float], names: tuple[str, ...]) -> float:
    """The first spelling present (TCC_EA0_* on MI300, TCC_EA_* earlier); NaN when none is."""
    for name in names:
        if name in counters:
            return counters[name]
    return math.nan


def derived_metrics(counters: dict[str, float]) -> dict[str, float]:
    """FLOPs per precision, HBM bytes and hit rates from one dispatch's counters (NaN when not collected)."""

    def valu(precision: str) -> float:
        names = [f"SQ_INSTS_VALU_{op}_{precision}" for op in ("ADD", "MUL", "TRANS", "FMA")]
        if not any(n in counters for n in names):
            return math.nan
        add, mul, trans, fma = (counters.get(n, 0.0) for n in names)
        return 64.0 * (add + mul + trans + 2.0 * fma)

    mfma_names = [n for n in counters if n.startswith("SQ_INSTS_VALU_MFMA_MOPS_")]
    tensor = 512.0 * sum(counters[n] for n in mfma_names) if mfma_names else math.nan
    per = {p: valu(p) for p in PRECISIONS}
    known = [v for v in (*per.values(), tensor) if v == v]
    rd = _sum_prefixed(counters, ("TCC_EA0_RDREQ_sum", "TCC_EA_RDREQ_sum"))
    rd32 = _sum_prefixed(counters, ("TCC_EA0_RDREQ_32B_sum", "TCC_EA_RDREQ_32B_sum"))
    wr = _sum_prefixed(counters, ("TCC_EA0_WRREQ_sum", "TCC_EA_WRREQ_sum"))
    wr64 = _sum_prefixed(counters, ("TCC_EA0_WRREQ_64B_sum", "TCC_EA_WRREQ_64B_sum"))
    hit, miss = counters.get("TCC_HIT_sum", math.nan), counters.get("TCC_MISS_sum", math.nan)
    accesses = counters.get("TCP_TOTAL_CACHE_ACCESSES_sum", math.nan)
    to_l2 = sum(counters.get(n, math.nan) for n in ("TCP_TCC_READ_REQ_sum", "TCP_TCC_WRITE_REQ_sum")) + sum(
        counters.get(n, 0.0)
        for n in ("TCP_TCC_ATOMIC_WITH_RET_REQ_sum", "TCP_TCC_ATOMIC_WITHOUT_RET_REQ_sum")
    )
    return {
        "flops_fp16": per["F16"],
        "flops_fp32": per["F32"],
        "flops_fp64": per["F64"],
        "flops_tensor": tensor,
        "tensor_ops": tensor,
        "flops": sum(known) if len(known) == 4 else math.nan,
        "dram_read_bytes": (rd - rd32) * 64.0 + rd32 * 32.0,
        "dram_write_bytes": (wr - wr64) * 32.0 + wr64 * 64.0,
        "l2_hit_rate": hit / (hit + miss) if hit + miss > 0 else math.nan,
        "l1_hit_rate": 1.0 - to_l2 / accesses if accesses > 0 else math.nan,
    }


def read_output(raw_dir: Path) -> tuple[dict[str, list[Dispatch]], list[dict[str, list[Dispatch]]]]:
    """(trace dispatches per case, counter dispatches per case for each pass) from a rocprofv3 output tree."""
    by_folder: dict[Path, dict[str, Path]] = {}
    for path in raw_dir.rglob("*.csv"):
        for kind in ("kernel_trace", "counter_collection", "marker_api_trace"):
            if path.name.endswith(f"{kind}.csv"):
                by_folder.setdefault(path.parent, {})[kind] = path
    trace: dict[str, list[Dispatch]] = {}
    passes = []
    for folder, files in sorted(by_folder.items()):
        if "marker_api_trace" not in files:
            raise RocprofOutputError(f"{folder}: no marker_api_trace.csv (cases cannot be attributed)")
        ranges = parse_marker_ranges(files["marker_api_trace"].read_text(), str(files["marker_api_trace"]))
        if "kernel_trace" in files:
            for case_id, ds in assign_to_cases(
                parse_kernel_trace(files["kernel_trace"].read_text(), str(files["kernel_trace"])), ranges
            ).items():
                trace.setdefault(case_id, ds)
        if "counter_collection" in files:
            passes.append(
                assign_to_cases(
                    parse_counter_collection(
                        files["counter_collection"].read_text(), str(files["counter_collection"])
                    ),
                    ranges,
                )
            )
    return trace, passes


def rows_from_rocprof(
    cases: list[Case],
    trace: dict[str, list[Dispatch]],
    passes: list[dict[str, list[Dispatch]]],
    ctx: MeasureContext,
    env: dict[str, Any],
) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        dispatches = trace.get(case.case_id, [])
        if not dispatches:
            row = base_row(ctx, env, "rocprofv3", case)
            row["error"] = (
                "no dispatches traced inside the case's range (the case failed or launched nothing)"
            )
            rows.append(row)
            continue
        for position, dispatch in enumerate(dispatches):
            counters: dict[str, float] = {}
            for one in passes:
                ds = one.get(case.case_id, [])
                if len(ds) != len(dispatches):
                    raise RocprofOutputError(
                        f"case {case.case_id}: {len(ds)} dispatches in a counter pass, "
                        f"{len(dispatches)} in the kernel trace"
                    )
                counters.update(ds[position].counters)
            row = base_row(ctx, env, "rocprofv3", case, dispatch.kernel_name, position)
            row["repeats"] = 1
            row.update(
                {
                    "duration_us": dispatch.duration_us,
                    "grid": dispatch.grid,
                    "block": dispatch.workgroup,
                    "registers_per_thread": dispatch.vgpr,
                    "counters": counters,
                }
            )
            row.update(derived_metrics(counters))
            rows.append(row)
    return rows


class RocprofBackend:
    name = "rocprofv3"
    kinds = frozenset({"op", "triton", "program"})
    executable = "rocprofv3"

    def check(self) -> None:
        require_gpu(self.name)
        if shutil.which(self.executable) is None:
            raise BackendUnavailable("--backend rocprofv3: `rocprofv3` (ROCm rocprofiler-sdk) is not on PATH")

    def environment(self) -> dict[str, Any]:
        out = subprocess.run([self.executable, "--version"], capture_output=True, text=True)
        version = (out.stdout or out.stderr).strip().splitlines()
        return gpu_environment("rocprofv3", version[0] if version else "unknown", "boost")

    def measure(self, cases: list[Case], ctx: MeasureContext) -> list[dict[str, Any]]:
        env = self.environment()
        raw = Path(ctx.raw_dir or ".")
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "cases.json").write_text(json.dumps([c.to_json() for c in cases]))
        (raw / "counters.txt").write_text("".join(f"pmc: {' '.join(group)}\n" for group in COUNTER_GROUPS))
        command = [
            self.executable,
            "--kernel-trace",
            "--marker-trace",
            "-i",
            str(raw / "counters.txt"),
            "--output-format",
            "csv",
            "-d",
            str(raw / "out"),
            "-o",
            "chunk",
            "--",
            sys.executable,
            "-m",
            "components.profiling.target",
            "--cases",
            str(raw / "cases.json"),
            "--mode",
            "rocprof",
            "--warmup",
            str(ctx.warmup),
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        (raw / "rocprofv3_stderr.txt").write_text(result.stderr[-20000:])
        text = result.stdout + result.stderr
        if "perfmon" in text.lower() and "permission" in text.lower():
            raise CounterPermissionError(
                f"rocprofv3 on {env['device_name']}: counters not permitted for this user "
                "(perfmon access); run the worker in the video/render group or as root"
            )
        if result.returncode != 0:
            raise RuntimeError(f"rocprofv3 exited {result.returncode}; see {raw / 'rocprofv3_stderr.txt'}")
        trace, passes = read_output(raw / "out")
        return rows_from_rocprof(cases, trace, passes, ctx, env)
