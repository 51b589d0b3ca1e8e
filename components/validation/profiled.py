"""Great Expectations suite for profiled rows (any backend, host included), before they are versioned.

Row-level checks: ids present and unique, provenance filled, a measured duration for every row
without an error, spreads and byte counts non-negative, hit rates in [0, 1], known backend and
clock mode. Rows of catalog GPUs are checked again against the catalog's peaks by the canonical
validation (``components.validation``) once ingested. Failing rows go to quarantine, never dropped.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from components.profiling.rows import BACKENDS, CLOCK_MODES

NUMERIC = (
    "duration_us",
    "duration_std_us",
    "duration_iqr_us",
    "dram_read_bytes",
    "dram_write_bytes",
    "flops",
    "l1_hit_rate",
    "l2_hit_rate",
    "warmup",
    "repeats",
)
REQUIRED = (
    "row_id",
    "run_id",
    "device",
    "device_name",
    "backend",
    "tool",
    "tool_version",
    "clock_mode",
    "case_id",
)


def rows_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for column in REQUIRED:
        if column not in frame:
            frame[column] = None
    for column in NUMERIC:
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if column in frame else float("nan")
    if "error" not in frame:
        frame["error"] = None
    frame["chk_measured"] = frame["error"].isna() & frame["duration_us"].notna()
    frame["chk_ok_or_error"] = frame["chk_measured"] | frame["error"].notna()
    return frame.reset_index(drop=True)


def row_expectations() -> list[Any]:
    import great_expectations as gx

    from components.validation.suites import _named

    e = gx.expectations
    out = [_named(e.ExpectColumnValuesToNotBeNull(column=c), f"not_null_{c}") for c in REQUIRED]
    out += [
        _named(e.ExpectColumnValuesToBeUnique(column="row_id"), "unique_row_id"),
        _named(e.ExpectColumnValuesToBeInSet(column="backend", value_set=list(BACKENDS)), "backend_in_set"),
        _named(
            e.ExpectColumnValuesToBeInSet(column="clock_mode", value_set=list(CLOCK_MODES)),
            "clock_mode_in_set",
        ),
        _named(
            e.ExpectColumnValuesToBeInSet(column="chk_ok_or_error", value_set=[True]), "measured_or_error"
        ),
        _named(
            e.ExpectColumnValuesToBeBetween(column="duration_us", min_value=0, strict_min=True),
            "duration_positive",
        ),
        _named(e.ExpectColumnValuesToBeBetween(column="repeats", min_value=1), "repeats_at_least_1"),
        _named(e.ExpectColumnValuesToBeBetween(column="warmup", min_value=0), "warmup_nonnegative"),
    ]
    for column in ("duration_std_us", "duration_iqr_us", "dram_read_bytes", "dram_write_bytes", "flops"):
        out.append(
            _named(e.ExpectColumnValuesToBeBetween(column=column, min_value=0), f"{column}_nonnegative")
        )
    for column in ("l1_hit_rate", "l2_hit_rate"):
        out.append(
            _named(
                e.ExpectColumnValuesToBeBetween(column=column, min_value=0, max_value=1), f"{column}_in_0_1"
            )
        )
    return out


def validate_rows(
    rows: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(valid rows, quarantined rows with ``failed_expectations``, summary). Error rows are kept as
    valid records of a failed case (they carry no metric), and counted in the summary."""
    from components.validation.run import run_suite

    if not rows:
        return [], [], {"rows_in": 0, "rows_valid": 0, "rows_quarantined": 0, "by_expectation": {}}
    frame = rows_frame(rows)
    failing, outcomes = run_suite(frame, row_expectations(), "profiled_rows")
    bad: dict[int, list[str]] = {}
    for name, positions in failing.items():
        for position in positions:
            bad.setdefault(int(position), []).append(name)
    valid, quarantine = [], []
    for position, row in enumerate(rows):
        if position in bad:
            quarantine.append({**row, "failed_expectations": sorted(bad[position])})
        else:
            valid.append(row)
    summary = {
        "rows_in": len(rows),
        "rows_valid": len(valid),
        "rows_quarantined": len(quarantine),
        "rows_failed_cases": int(frame["error"].notna().sum()),
        "by_expectation": {name: len(p) for name, p in failing.items()},
        "expectations": len(outcomes),
    }
    return valid, quarantine, summary
