"""What the CSV-based adapters (NeuSight, PipeWeave, a user's CSV) share: strict string reads that reject a
malformed row (not the file), row checks that send failing rows to the rejects table, device resolution,
repeat suffixes, FLOPs by definition, and the canonical rows' provenance columns."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest.base import IngestError
from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, RAW_LIMIT, conform


def read_csv_strings(path: Path, source: str, root: Path | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """Every cell of ``path`` as a string (index = 0-based data row) plus reject records for bad rows.

    The fast path is pandas' C parser. A row with more fields than the header makes it fail; the
    file is then re-read with the csv module so that only that row is rejected (with its row
    number), not the whole file. An empty or undecodable file raises IngestError naming it.
    """
    label = path.relative_to(root).as_posix() if root is not None else str(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False, engine="c")
        return frame, []
    except pd.errors.EmptyDataError:
        raise IngestError(f"{source}: {path}: empty file (no header row)") from None
    except UnicodeDecodeError as exc:
        raise IngestError(f"{source}: {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except pd.errors.ParserError:
        pass  # a malformed row somewhere: find it below, row by row
    return _read_csv_slow(path, source, label)


def _read_csv_slow(path: Path, source: str, label: str) -> tuple[pd.DataFrame, list[dict]]:
    good: list[list[str]] = []
    index: list[int] = []
    bad: list[dict] = []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if not header:
                raise IngestError(f"{source}: {path}: empty file (no header row)")
            row = 0
            for record in reader:
                if not record:  # blank line: pandas skips these too, so they are not rows
                    continue
                if len(record) == len(header):
                    good.append(record)
                    index.append(row)
                else:
                    bad.append(
                        reject(
                            source,
                            label,
                            row,
                            f"expected {len(header)} fields, found {len(record)}",
                            ",".join(record),
                        )
                    )
                row += 1
    except csv.Error as exc:
        # An unterminated quote (typically a truncated file) leaves no way to find the row boundaries.
        raise IngestError(f"{source}: {path}: unreadable CSV near line {reader.line_num}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise IngestError(f"{source}: {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    frame = pd.DataFrame(good, columns=header, index=pd.Index(index, dtype="int64"), dtype=str)
    return frame, bad


def reject(source: str, upstream_file: str, row: int, reason: str, raw: str) -> dict:
    return {
        "source": source,
        "upstream_file": upstream_file,
        "upstream_row": row,
        "reason": reason,
        "raw": raw[:RAW_LIMIT],
    }


def raw_rows(frame: pd.DataFrame, mask: np.ndarray) -> list[str]:
    """The selected rows re-joined as CSV-ish text for the rejects table."""
    picked = frame.loc[mask]
    if picked.empty:
        return []
    return picked.astype(str).agg(",".join, axis=1).tolist()


def apply_checks(
    frame: pd.DataFrame, checks: list, reason: pd.Series, source: str, label: str, rejects: list[dict]
) -> np.ndarray:
    """Give each row the reason of the first check it fails, append those rows to ``rejects``,
    and return the mask of rejected rows. ``checks`` = [(failed mask, idx -> reason series)]."""
    for failed, message in checks:
        fresh = failed.fillna(True).astype(bool) & reason.isna()
        if fresh.any():
            reason[fresh] = message(frame.index[fresh])
    bad = reason.notna().to_numpy()
    for row, why, raw in zip(frame.index[bad], reason[bad], raw_rows(frame, bad), strict=True):
        rejects.append(reject(source, label, int(row), str(why), raw))
    return bad


def require_columns(frame: pd.DataFrame, columns: Iterable[str], path: Path, source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise IngestError(
            f"{source}: {path}: missing column(s) {', '.join(missing)} (has: {', '.join(frame.columns)})"
        )


def integer_columns(frame: pd.DataFrame, columns: Iterable[str]) -> tuple[pd.DataFrame, pd.Series]:
    """Columns parsed as integers, and per row the first column that is missing or not an integer."""
    parsed = pd.DataFrame(index=frame.index)
    problem = pd.Series(pd.NA, index=frame.index, dtype="object")
    for column in columns:
        values = pd.to_numeric(frame[column].str.strip(), errors="coerce")
        ok = values.notna() & np.isfinite(values) & (values == values.round())
        problem = problem.where(problem.notna() | ok, column)
        parsed[column] = values.where(ok).astype("Int64")
    return parsed, problem


def resolve_devices(names: pd.Series, catalog) -> pd.Series:
    """Catalog id per row (resolving each distinct spelling once); <NA> where the name is unknown."""
    ids: dict[str, object] = {}
    for name in names.unique():
        try:
            ids[name] = catalog.resolve(name).id
        except LookupError:
            ids[name] = pd.NA
    return names.map(ids).astype("string")


def repeat_suffix(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """ "" for the first row of a key, "/rep<k>" for the k-th repeat -- repeated measurements of one
    configuration in one file stay distinct rows (the measurement key must be unique)."""
    occurrence = frame.groupby(keys, sort=False, dropna=False).cumcount()
    return pd.Series(np.where(occurrence > 0, "/rep" + occurrence.astype(str), ""), index=frame.index)


def run_ids(frame: pd.DataFrame, base: str = "run_id") -> pd.Series:
    """Each row's run id: its ``base`` column, with "/rep<k>" on the k-th repeat of one kernel, GPU and
    params_json in it (``repeat_suffix``)."""
    return frame[base] + repeat_suffix(frame, ["kernel_id", "device_id", "params_json", base])


def definition_flops(
    family: pd.Series, op: pd.Series, shape_json: pd.Series, shapes: dict[str, dict]
) -> pd.Series:
    """FLOPs by op definition (``components.ingest.derived.op_flops``), one call per distinct kernel."""
    from components.ingest.derived import op_flops

    keys = family.astype(str) + "\x1f" + op.astype(str) + "\x1f" + shape_json.astype(str)
    values: dict[str, float] = {}
    for key in keys.unique():
        fam, name, shape = key.split("\x1f", 2)
        try:
            flops = float(op_flops(fam, name, shapes[shape]))
        except (KeyError, ValueError):  # a family/op without a formula: unknown, never a guess
            flops = math.nan
        values[key] = flops if math.isfinite(flops) and flops > 0 else math.nan
    return keys.map(values).astype("float64")


def gflops_of(flops: pd.Series, duration_us: pd.Series) -> pd.Series:
    """GFLOP/s from FLOPs and microseconds (``components.ingest.derived.gflops``)."""
    from components.ingest.derived import gflops

    return pd.Series(
        gflops(flops.to_numpy("float64"), duration_us.to_numpy("float64")), index=flops.index, dtype="float64"
    )


def empty_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernels), conformed and empty: an adapter's answer when no row is good."""
    return conform(pd.DataFrame(), MEASUREMENT_COLUMNS), conform(pd.DataFrame(), KERNEL_COLUMNS)


def provenance(
    good: pd.DataFrame, source: str, profiler: Any, clock_mode: Any, run_id: Any
) -> dict[str, Any]:
    """The measurement columns that say where a canonical row came from (ids, file and row, how timed)."""
    return {
        "kernel_id": good["kernel_id"],
        "device_id": good["device_id"],
        "device_name_raw": good["device_name_raw"],
        "source": source,
        "upstream_file": good["upstream_file"],
        "upstream_row": good["upstream_row"],
        "profiler": profiler,
        "clock_mode": clock_mode,
        "run_id": run_id,
    }
