"""Turn a profiling run folder (runner JSON lines + ncu raw CSVs) into canonical rows.

Layout of a run folder (what ``kernelcast profile`` writes and ``profiled-data/`` holds):
    manifest.json           device, suite, date, which files hold what
    cuda_event*.jsonl       one line per case: CUDA-event timing + kernels launched
    ncu_*/ncu_raw.csv       Nsight Compute ``--csv --page raw``, kernels in launch order
    ncu_*/ncu_roles.json    which metric filled which role

ncu rows are matched to cases by launch order: each case launches, in order, the non-memset
kernels its timing pass recorded; every match is checked by kernel name, and a mismatch is an
error naming the file and row rather than a silent mis-attribution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.profiling.ncu import kernel_rows, parse_raw_csv


class ProfileDataError(ValueError):
    """A run folder that cannot be read consistently; names the file and row."""


@dataclass(frozen=True)
class CaseRecord:
    index: int
    case_id: str
    case: dict
    device_name: str
    duration_us: float
    duration_std_us: float
    n_trials: int
    kernel_names: tuple[str, ...]  # non-memset kernels, in launch order
    error: str | None


def json_lines(path: Path, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file; ``error`` naming the line that is
    not JSON."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}: line {number}: not JSON ({exc})") from exc
        yield number, value


def read_timing(path: Path) -> list[CaseRecord]:
    records = []
    for line_no, raw in json_lines(path, ProfileDataError):
        try:
            kernels = tuple(k["name"] for k in raw.get("kernels", []) if not k["name"].startswith("Memset"))
            records.append(
                CaseRecord(
                    index=int(raw["index"]),
                    case_id=raw["case_id"],
                    case=raw["case"],
                    device_name=raw["device_name"],
                    duration_us=float(raw.get("duration_us", math.nan)),
                    duration_std_us=float(raw.get("duration_std_us", math.nan)),
                    n_trials=int(raw.get("n_trials", 0)),
                    kernel_names=kernels,
                    error=raw.get("error"),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProfileDataError(f"{path}: line {line_no}: not a runner record ({exc})") from exc
    return records


def _tensor_roles(roles: dict[str, str]) -> list[str]:
    """Tensor op counters to sum: no sparsity splits, and no aggregate whose parts are present."""
    names = [r for r in roles if r.startswith("tensor_ops:") and "_sparsity_" not in r]
    # Per-instruction counters (``_op_hmma_``, ``_op_hgmma_``...) partition the generic per-precision
    # ones (``sm__ops_path_tensor_src_bf16_dst_fp32``): summing both would count every op twice.
    if any("_tensor_op_" in r for r in names):
        names = [r for r in names if "_tensor_op_" in r]
    return [r for r in names if not any(other != r and other.startswith(r + "_") for other in names)]


def ncu_flops(kernel: dict[str, float], roles: dict[str, str]) -> float:
    """FLOPs of one kernel: SIMT adds/muls + 2 x FMAs per precision, plus tensor-pipe math ops."""

    def get(role: str) -> float:
        value = kernel.get(role, math.nan)
        return 0.0 if value != value else float(value)  # an absent counter means no such instruction

    simt = sum(
        get(a) + get(m) + 2 * get(f)
        for a, m, f in (("fadd", "fmul", "ffma"), ("dadd", "dmul", "dfma"), ("hadd", "hmul", "hfma"))
    )
    return simt + sum(get(role) for role in _tensor_roles(roles))


def kernel_key(name: str) -> str:
    """Comparable kernel identity: the innermost function name without template or call arguments.

    CUPTI (torch.profiler) and ncu print the same kernel with different template spellings and
    namespaces, e.g. ``internal::gemvx::kernel<...>`` vs ``internal::kernel<...>``.
    """
    depth, plain = 0, []
    for char in name:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            plain.append(char)
    words = "".join(plain).split()
    return words[-1].split("::")[-1] if words else name


def match_ncu_to_cases(
    cases: list[CaseRecord], kernels: list[dict], source: Path
) -> list[tuple[CaseRecord, int, dict]]:
    """(case, kernel position within the case, ncu kernel) in launch order, checked by name."""
    matched = []
    cursor = 0
    for case in cases:
        if case.error:
            continue
        for position, expected in enumerate(case.kernel_names):
            if cursor >= len(kernels):
                raise ProfileDataError(f"{source}: ran out of profiled kernels at case {case.case_id}")
            got = str(kernels[cursor]["kernel_name"])
            if kernel_key(got) != kernel_key(expected):
                raise ProfileDataError(
                    f"{source}: row {cursor}: kernel {got[:60]!r} does not match case {case.case_id}'s "
                    f"kernel {expected[:60]!r}"
                )
            matched.append((case, position, kernels[cursor]))
            cursor += 1
    if cursor != len(kernels):
        raise ProfileDataError(
            f"{source}: {len(kernels) - cursor} profiled kernels left over after all cases"
        )
    return matched


def read_ncu_run(
    folder: Path, timing: list[CaseRecord], case_filter: str
) -> list[tuple[CaseRecord, int, dict, dict]]:
    raw_path = folder / "ncu_raw.csv"
    roles = json.loads((folder / "ncu_roles.json").read_text())["roles"]
    kernels = kernel_rows(parse_raw_csv(raw_path.read_text()), roles)
    cases = [c for c in timing if case_filter in c.case_id]
    return [(case, pos, kernel, roles) for case, pos, kernel in match_ncu_to_cases(cases, kernels, raw_path)]


# --------------------------------------------------------------------------- profiled rows (format
# "kernelcast-rows/1", components/profiling/rows.py): read here so the ingest adapter's imports stay
# inside the modules dvc.yaml's ingest stage lists.

ROWS_FORMAT = "kernelcast-rows/1"


class RowsError(ProfileDataError):
    """A run folder whose rows cannot be read consistently; names the file and line."""


def read_chunk(path: Path) -> list[dict]:
    rows = []
    for number, row in json_lines(path, RowsError):
        if not isinstance(row, dict) or "row_id" not in row:
            raise RowsError(f"{path}: line {number}: not a profiled row (no row_id)")
        rows.append(row)
    return rows


def read_rows(run_dir: Path) -> list[dict]:
    """Every row of a run folder, in chunk order. The same row id twice is an error, not a silent pick."""
    seen: dict[str, Path] = {}
    rows: list[dict] = []
    for path in sorted((Path(run_dir) / "chunks").glob("*.jsonl")):
        for row in read_chunk(path):
            if row["row_id"] in seen:
                raise RowsError(f"{path}: row {row['row_id']} duplicates one in {seen[row['row_id']].name}")
            seen[row["row_id"]] = path
            rows.append(row)
    return rows


def quarantined_ids(run_dir: Path) -> dict[str, list[str]]:
    """Row id -> failed expectations, from the run's ``quarantine.jsonl`` (written by profile_device)."""
    path = Path(run_dir) / "quarantine.jsonl"
    if not path.is_file():
        return {}
    return {r["row_id"]: r.get("failed_expectations", []) for r in read_chunk(path)}
