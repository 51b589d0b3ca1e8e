"""Adapter for gpuFLOPBench (Bolet et al.): Nsight Compute roofline metrics of HeCBench kernels.

Reads ``cuda-profiling/profiling-data.csv`` (HEAD) and the CUDA-only container re-profiling at
``_history/b05059d9/cuda-profiling/profiling-data.csv`` (a separate run_id: run-to-run
repeatability). One RTX 3080; ``ncu --set roofline -c 2`` so kernels come in launch pairs.
Kernel source is kept: the ``__global__`` body whose name matches first, then the program's files.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from components.ingest.base import AdapterOutput, IngestError, require_dir, require_file
from components.ingest.derived import (
    achieved_gbps,
    arith_intensity,
    bolet_roofline_label,
    int_ridge_point,
    roofline_class,
)
from components.ingest.schema import (
    KERNEL_COLUMNS,
    canonical_json,
    conform,
    stable_id,
)

SOURCE = "gpuflopbench"
FILES: tuple[tuple[str, str], ...] = (
    ("cuda-profiling/profiling-data.csv", "head-4738733b"),
    ("_history/b05059d9/cuda-profiling/profiling-data.csv", "container-b05059d9"),
)
COLUMNS = (
    "Kernel Name",
    "traffic",
    "dpAI",
    "spAI",
    "dpPerf",
    "spPerf",
    "xtime",
    "Block Size",
    "Grid Size",
    "device",
    "intops",
    "intPerf",
    "intAI",
    "targetName",
    "exeArgs",
    "kernelName",
)
NUMERIC = ("traffic", "dpAI", "spAI", "dpPerf", "spPerf", "xtime", "intops", "intPerf", "intAI")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc")
MAX_SOURCE_CHARS = 200_000


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise IngestError(f"{path}: missing columns {missing}")
            return list(reader)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: unreadable CSV ({exc})") from exc


def _dims(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.strip().strip("()").split(",")]
    if len(parts) != 3:
        raise ValueError(f"launch dims {text!r} are not (x, y, z)")
    return parts[0], parts[1], parts[2]


def _parse(row: dict[str, str]) -> dict[str, object]:
    """One profiled launch -> canonical values; raises ValueError with the reason."""
    # csv.DictReader fills a short (truncated) row with None and files surplus fields under None.
    short = [c for c in COLUMNS if row.get(c) is None]
    if short:
        raise ValueError(f"short row: no value for {short}")
    if row.get(None):  # type: ignore[call-overload]
        raise ValueError(f"row has {len(row[None])} fields beyond the header")  # type: ignore[index]
    values = {}
    for name in NUMERIC:
        raw = (row.get(name) or "").strip()
        if raw == "":
            raise ValueError(f"empty {name}")
        values[name] = float(raw)
        if not math.isfinite(values[name]):
            raise ValueError(f"{name} is not finite")
    grid, block = _dims(row["Grid Size"]), _dims(row["Block Size"])
    return {**values, "grid": grid, "block": block}


def extract_kernel_body(text: str, kernel_name: str) -> str | None:
    """The ``__global__`` function named ``kernel_name`` (signature through its closing brace)."""
    pattern = re.compile(r"__global__[^;{]*?\b" + re.escape(kernel_name) + r"\s*(<[^>]*>)?\s*\(")
    match = pattern.search(text)
    if not match:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    template = text.rfind("template", max(0, start - 200), start)
    if template >= 0 and text[template:start].count("\n") <= 2:
        start = template
    brace = text.find("{", match.end())
    if brace < 0:
        return None
    depth = 0
    for position in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[start : position + 1]
    return None


def program_source(root: Path, program: str) -> tuple[str | None, str | None]:
    """(source_path, concatenated sources) of a program, or (None, None) when it was not bundled."""
    folder = root / "src" / program
    if not folder.is_dir():
        return None, None
    parts, used = [], 0
    for path in sorted(p for p in folder.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        text = path.read_bytes().decode("utf-8", errors="replace")
        header = f"// ==== file: {path.relative_to(root).as_posix()}\n"
        if used + len(text) > MAX_SOURCE_CHARS:
            parts.append(f"// ==== truncated: {path.relative_to(root).as_posix()} and later files omitted\n")
            break
        parts.append(header + text)
        used += len(text)
    return f"src/{program}", "\n".join(parts)


def _kernels_table(root: Path, pairs: set[tuple[str, str]]) -> pd.DataFrame:
    rows = []
    sources: dict[str, tuple[str | None, str | None]] = {}
    for program, kernel in sorted(pairs):
        if program not in sources:
            sources[program] = program_source(root, program)
        path, text = sources[program]
        body = extract_kernel_body(text, kernel) if text else None
        source_text = (
            None if text is None else (f"// ==== kernel {kernel}\n{body}\n\n{text}" if body else text)
        )
        rows.append(
            {
                "kernel_id": stable_id(SOURCE, program, kernel),
                "source": SOURCE,
                "family": "program",
                "op": kernel,
                "name": kernel,
                "language": "openmp" if program.endswith("-omp") else "cuda",
                "program": program,
                "source_path": path,
                "source_text": source_text,
                "dtype": "unknown",
            }
        )
    return conform(pd.DataFrame(rows), KERNEL_COLUMNS)


def _one_file(path: Path, relpath: str, run_id: str, catalog) -> tuple[list, list, set, int]:
    rows = _read_rows(path)
    measurements, rejects, pairs = [], [], set()
    launch_index: dict[tuple, int] = {}
    for index, row in enumerate(rows):
        try:
            values = _parse(row)
            device = catalog.resolve(row["device"])
        except LookupError:
            rejects.append(
                {
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": index,
                    "reason": f"unknown device '{row['device']}'",
                    "raw": str(row)[:500],
                }
            )
            continue
        except ValueError as exc:
            reason = str(exc.args[0] if exc.args else exc)
            rejects.append(
                {
                    "source": SOURCE,
                    "upstream_file": relpath,
                    "upstream_row": index,
                    "reason": reason,
                    "raw": str(row)[:500],
                }
            )
            continue
        program, kernel = row["targetName"], row["kernelName"]
        key = (program, kernel, row["exeArgs"], row["Kernel Name"])
        launch = launch_index.get(key, 0)
        launch_index[key] = launch + 1
        pairs.add((program, kernel))
        duration_us = values["xtime"] / 1000.0
        seconds = values["xtime"] * 1e-9
        dram_bytes = values["traffic"] * seconds
        sp_flops, dp_flops = values["spPerf"] * seconds, values["dpPerf"] * seconds
        measurements.append(
            {
                "kernel_id": stable_id(SOURCE, program, kernel),
                "device_id": device.id,
                "device_name_raw": row["device"],
                "source": SOURCE,
                "upstream_file": relpath,
                "upstream_row": index,
                "profiler": "ncu",
                "clock_mode": "locked",
                "run_id": run_id,
                "params_json": canonical_json(
                    {"exeArgs": row["exeArgs"], "signature": row["Kernel Name"], "launch": launch}
                ),
                "grid_x": values["grid"][0],
                "grid_y": values["grid"][1],
                "grid_z": values["grid"][2],
                "block_x": values["block"][0],
                "block_y": values["block"][1],
                "block_z": values["block"][2],
                "duration_us": duration_us,
                "n_trials": 1,
                "dram_bytes": dram_bytes,
                "fp32_gflops": values["spPerf"] / 1e9,
                "fp64_gflops": values["dpPerf"] / 1e9,
                "gflops": (values["spPerf"] + values["dpPerf"]) / 1e9,
                "int_gops": values["intPerf"] / 1e9,
                "flops": sp_flops + dp_flops,
                "fp32_arith_intensity": values["spAI"],
                "fp64_arith_intensity": values["dpAI"],
                "int_arith_intensity": values["intAI"],
                "_sp_ai": values["spAI"],
                "_dp_ai": values["dpAI"],
                "_int_ai": values["intAI"],
                "_traffic": values["traffic"],
            }
        )
    return measurements, rejects, pairs, len(rows)


def _device_ridges(spec) -> tuple[float, float, float]:
    """(fp32, fp64, int) ridge points of a catalog device at its boost clock (vendor peak)."""
    fp64 = spec.ridge_point("fp64") if spec.has_pipe("fp64") else float("nan")
    return (
        spec.ridge_point("fp32"),
        fp64,
        int_ridge_point(spec.sms, spec.fp32_lanes_per_sm, spec.boost_clock_mhz, spec.dram_gbps),
    )


def _ridge_class(frame: pd.DataFrame, catalog) -> pd.Series:
    """Compute-bound if any of the FP32, FP64 or integer intensities reaches its ridge on the device
    (the same any-pipe rule as Bolet et al., with the catalog's peaks instead of fixed thresholds)."""
    ridges = {d: _device_ridges(catalog.get(d)) for d in frame["device_id"].unique()}
    classes = [
        roofline_class(
            frame[column], frame["device_id"].map(lambda d, i=i: ridges[d][i]).to_numpy("float64")
        ).to_numpy()
        for i, column in enumerate(("_sp_ai", "_dp_ai", "_int_ai"))
    ]
    compute = np.logical_or.reduce([c == "compute" for c in classes])
    return pd.Series(np.where(compute, "compute", "bandwidth"), dtype="string")


def ingest(root: Path, catalog) -> AdapterOutput:
    require_dir(root, SOURCE)
    measurements, rejects, pairs, rows_in = [], [], set(), 0
    for relpath, run_id in FILES:
        path = root / relpath
        if relpath.startswith("_history/") and not path.exists():
            continue  # the container re-profiling is optional; HEAD is required
        require_file(path, SOURCE)
        m, r, p, n = _one_file(path, relpath, run_id, catalog)
        measurements += m
        rejects += r
        pairs |= p
        rows_in += n
    frame = pd.DataFrame(measurements)
    if not frame.empty:
        frame["achieved_gbps"] = achieved_gbps(frame["dram_bytes"], frame["duration_us"])
        frame["arith_intensity"] = arith_intensity(frame["flops"], frame["dram_bytes"])
        frame["roofline_class_published"] = bolet_roofline_label(
            frame["_sp_ai"], frame["_dp_ai"], frame["_int_ai"]
        )
        frame["roofline_class"] = _ridge_class(frame, catalog)
        frame = frame.drop(columns=[c for c in frame.columns if c.startswith("_")])
    return AdapterOutput.conformed(
        SOURCE,
        frame,
        _kernels_table(root, pairs),
        rejects,
        rows_in,
    )
