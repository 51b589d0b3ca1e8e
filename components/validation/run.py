"""Run the suites on the canonical tables, split rows into valid / quarantine, write the results.

Row-level failures come from GX itself (``unexpected_index_list`` with result_format COMPLETE); a
failed table-level expectation (schema, a whole column of the wrong dtype, a missing column)
names no rows, so it quarantines every row -- a table with a broken schema is not usable at all.
Invariant: ``rows_in == rows_valid + rows_quarantined``.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.atomic import atomic_write
from components.validation.suites import (
    CatalogLike,
    Tolerances,
    add_check_columns,
    build_suite,
    kernel_expectations,
    measurement_expectations,
)

FAILED_COLUMN = "failed_expectations"
NULL_SOURCE = "<null>"


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result, reduced to what the summary and the HTML report show."""

    name: str
    expectation_type: str
    kwargs: dict[str, Any]
    success: bool
    unexpected_count: int
    table_level: bool  # failed without naming rows (schema, column dtype, exception)
    observed: str | None = None
    error: str | None = None


@dataclass
class ValidationResult:
    valid: pd.DataFrame
    quarantine: pd.DataFrame
    summary: dict[str, Any]
    outcomes: list[ExpectationOutcome] = field(default_factory=list)
    table: str = "measurements"


# ---------------------------------------------------------------------------------------------
# GX


def _ephemeral_context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    # tqdm bars per metric batch would flood CLI output and Ray worker logs.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _short(value: Any, limit: int = 200) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _display_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Expectation kwargs for the report: long lists (catalog ids, schema columns) shown as counts."""
    shown: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "batch_id":
            continue
        shown[key] = f"{len(value)} values" if key in ("value_set", "column_list") else value
    return shown


def run_suite(
    frame: pd.DataFrame, expectations: list[Any], suite_name: str
) -> tuple[dict[str, np.ndarray], list[ExpectationOutcome]]:
    """Validate ``frame`` (index 0..n-1) with GX; return failing row positions per expectation name."""
    context = _ephemeral_context()
    asset = context.data_sources.add_pandas(f"{suite_name}_source").add_dataframe_asset(f"{suite_name}_asset")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(
        batch_parameters={"dataframe": frame}
    )
    suite = context.suites.add(build_suite(suite_name, expectations))
    # Index query strings would repeat every failing index as text; the list alone is what we need.
    result = batch.validate(
        suite, result_format={"result_format": "COMPLETE", "return_unexpected_index_query": False}
    )

    all_rows = np.arange(len(frame))
    failing: dict[str, np.ndarray] = {}
    outcomes: list[ExpectationOutcome] = []
    for item in result.results:
        config = item.expectation_config
        name = (config.meta or {}).get("name") or config.type
        res = item.result or {}
        raised = [
            v
            for v in (item.exception_info or {}).values()
            if isinstance(v, dict) and v.get("raised_exception")
        ]
        if (item.exception_info or {}).get("raised_exception"):
            raised.append(item.exception_info)
        error = _short(raised[0].get("exception_message")) if raised else None
        table_level = not item.success and (error is not None or "unexpected_index_list" not in res)
        if item.success:
            rows = np.empty(0, dtype=np.int64)
        elif table_level:
            rows = all_rows
        else:
            rows = np.asarray(res["unexpected_index_list"], dtype=np.int64)
        if len(rows):
            failing[name] = np.unique(np.concatenate([failing.get(name, np.empty(0, np.int64)), rows]))
        outcomes.append(
            ExpectationOutcome(
                name=name,
                expectation_type=config.type,
                kwargs=_display_kwargs(config.kwargs),
                success=bool(item.success),
                unexpected_count=len(rows),
                table_level=table_level,
                observed=_short(res.get("observed_value")),
                error=error,
            )
        )
    outcomes.sort(key=lambda o: (o.success, o.name))
    return failing, outcomes


# ---------------------------------------------------------------------------------------------
# Split + summary


def _failure_lists(n_rows: int, failing: dict[str, np.ndarray]) -> pd.Series:
    """Per row: JSON list of the expectation names it failed ('' for passing rows is never stored)."""
    if not failing:
        return pd.Series([None] * n_rows, dtype="object")
    pairs = pd.DataFrame(
        {
            "row": np.concatenate(list(failing.values())),
            "name": np.concatenate(
                [np.full(len(rows), name, dtype=object) for name, rows in failing.items()]
            ),
        }
    )
    lists = pairs.sort_values(["row", "name"]).groupby("row")["name"].agg(lambda s: json.dumps(list(s)))
    return lists.reindex(range(n_rows))


def _by_expectation(failure_lists: pd.Series) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for text in failure_lists.dropna():
        counts.update(json.loads(text))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _summarize(
    frame: pd.DataFrame,
    failure_lists: pd.Series,
    max_failure_share: float,
    outcomes: list[ExpectationOutcome],
) -> dict[str, Any]:
    failed = failure_lists.notna().to_numpy()
    rows_in = len(frame)
    rows_quarantined = int(failed.sum())
    share = rows_quarantined / rows_in if rows_in else 0.0
    sources = (
        frame["source"].astype("object").where(frame["source"].notna(), NULL_SOURCE)
        if "source" in frame
        else pd.Series(NULL_SOURCE, index=frame.index)
    )
    by_source: dict[str, Any] = {}
    for source, index in sorted(sources.groupby(sources).groups.items(), key=lambda kv: str(kv[0])):
        lists = failure_lists.loc[index]
        by_source[str(source)] = {
            "rows_in": len(index),
            "rows_quarantined": int(lists.notna().sum()),
            "by_expectation": _by_expectation(lists),
        }
    return {
        "rows_in": rows_in,
        "rows_valid": rows_in - rows_quarantined,
        "rows_quarantined": rows_quarantined,
        "failure_share": round(share, 6),
        "max_failure_share": max_failure_share,
        "by_expectation": _by_expectation(failure_lists),
        "by_source": by_source,
        "table_failures": sorted(o.name for o in outcomes if o.table_level),
        "expectations_evaluated": len(outcomes),
        "passed": share <= max_failure_share,
    }


def _split(
    original: pd.DataFrame,
    checked: pd.DataFrame,
    failing: dict[str, np.ndarray],
    outcomes: list[ExpectationOutcome],
    max_failure_share: float,
    table: str,
) -> ValidationResult:
    failure_lists = _failure_lists(len(checked), failing)
    bad = failure_lists.notna().to_numpy()
    valid = original.loc[~bad].reset_index(drop=True)
    quarantine = checked.loc[bad].copy()
    quarantine[FAILED_COLUMN] = failure_lists.loc[bad].astype("string")
    summary = _summarize(checked, failure_lists, max_failure_share, outcomes)
    return ValidationResult(valid, quarantine.reset_index(drop=True), summary, outcomes, table)


def _max_failure_share(params: dict[str, Any]) -> float:
    return float(params.get("validate", params)["max_failure_share"])


def validate_measurements(
    measurements: pd.DataFrame,
    catalog: CatalogLike,
    params: dict[str, Any],
    kernels: pd.DataFrame | None = None,
) -> ValidationResult:
    """Validate the canonical measurements against the suite, the catalog and params' tolerances.

    ``params``: params.yaml (or its ``validate:`` section). ``kernels`` (optional) gives each
    kernel's dtype, so GFLOP/s is bounded by the peak for that dtype instead of the device's best.
    ``valid`` keeps the input columns; ``quarantine`` adds the ``chk_*`` columns and ``failed_expectations``.
    """
    original = measurements.reset_index(drop=True)
    checked = add_check_columns(original, catalog, kernels)
    expectations = measurement_expectations(
        sorted(str(i) for i in catalog.ids()), Tolerances.from_params(params)
    )
    failing, outcomes = run_suite(checked, expectations, "measurements")
    return _split(original, checked, failing, outcomes, _max_failure_share(params), "measurements")


def validate_kernels(kernels: pd.DataFrame, params: dict[str, Any]) -> ValidationResult:
    """Validate the canonical kernels table (ids, families, dtypes, languages)."""
    original = kernels.reset_index(drop=True)
    failing, outcomes = run_suite(original, kernel_expectations(), "kernels")
    return _split(original, original, failing, outcomes, _max_failure_share(params), "kernels")


# ---------------------------------------------------------------------------------------------
# Output


def write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, lambda p: frame.to_parquet(p, index=False))


def _table_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row.values())
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(results: list[ValidationResult], drift: dict[str, Any] | None = None) -> str:
    """A self-contained data-docs page: summary, failures by source, every expectation's outcome."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kernelcast validation</title><style>",
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
        ".fail{color:#b00}.ok{color:#070}</style></head><body><h1>kernelcast validation</h1>",
    ]
    for result in results:
        s = result.summary
        status = "<span class='ok'>PASSED</span>" if s["passed"] else "<span class='fail'>FAILED</span>"
        parts.append(f"<h2>{html.escape(result.table)}: {status}</h2>")
        parts.append(
            _table_html(
                [
                    {
                        k: s[k]
                        for k in (
                            "rows_in",
                            "rows_valid",
                            "rows_quarantined",
                            "failure_share",
                            "max_failure_share",
                        )
                    }
                ]
            )
        )
        parts.append("<h3>Quarantined rows by source and expectation</h3>")
        parts.append(
            _table_html(
                [
                    {
                        "source": src,
                        "rows_in": v["rows_in"],
                        "rows_quarantined": v["rows_quarantined"],
                        "failed": ", ".join(f"{k}: {n}" for k, n in v["by_expectation"].items()),
                    }
                    for src, v in s["by_source"].items()
                ]
            )
        )
        parts.append("<h3>Expectations</h3>")
        parts.append(
            _table_html(
                [
                    {
                        "name": o.name,
                        "success": o.success,
                        "rows": o.unexpected_count,
                        "type": o.expectation_type,
                        "kwargs": json.dumps(o.kwargs, default=str),
                        "observed": o.observed,
                        "error": o.error,
                    }
                    for o in result.outcomes
                ]
            )
        )
    if drift is not None:
        parts.append("<h2>Drift</h2>")
        parts.append(_table_html(drift.get("results", [])))
    parts.append("</body></html>")
    return "".join(parts)


def write_validation(
    result: ValidationResult,
    out_dir: Path,
    kernels_result: ValidationResult | None = None,
    drift: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write measurements.parquet (valid rows), quarantine.parquet, report.html, summary.json (last).

    Each file is replaced atomically; summary.json is written last, so its presence means the
    folder is complete.
    """
    out_dir = Path(out_dir)
    paths = {
        name: out_dir / name
        for name in ("measurements.parquet", "quarantine.parquet", "report.html", "summary.json")
    }
    write_parquet_atomic(paths["measurements.parquet"], result.valid)
    write_parquet_atomic(paths["quarantine.parquet"], result.quarantine)
    summary = dict(result.summary)
    reports = [result]
    if kernels_result is not None:
        paths["kernels_quarantine.parquet"] = out_dir / "kernels_quarantine.parquet"
        write_parquet_atomic(paths["kernels_quarantine.parquet"], kernels_result.quarantine)
        summary["kernels"] = kernels_result.summary
        reports.append(kernels_result)
    if drift is not None:
        summary["drift"] = drift
    write_text_atomic(paths["report.html"], render_html(reports, drift))
    write_text_atomic(paths["summary.json"], json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return paths


def read_table(in_dir: Path, name: str) -> pd.DataFrame:
    path = Path(in_dir) / f"{name}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (run `kernelcast ingest` first, or pass --in)")
    return pd.read_parquet(path)


def validate_dir(
    in_dir: Path,
    out_dir: Path,
    catalog: CatalogLike,
    params: dict[str, Any],
    summary_path: Path | None = None,
    drift_against: Path | None = None,
) -> dict[str, Any]:
    """The whole stage on folders: read canonical tables, validate, optionally drift-check, write.

    Shared by ``kernelcast validate`` and the Prefect flow's Ray job. Returns the written summary.
    """
    measurements = read_table(in_dir, "measurements")
    kernels_path = Path(in_dir) / "kernels.parquet"
    kernels = pd.read_parquet(kernels_path) if kernels_path.is_file() else None
    result = validate_measurements(measurements, catalog, params, kernels)
    kernels_result = validate_kernels(kernels, params) if kernels is not None else None
    drift = None
    if drift_against is not None:
        from components.validation.drift import drift_against_dir

        drift = drift_against_dir(result.valid, kernels, Path(drift_against), params)
    paths = write_validation(result, Path(out_dir), kernels_result, drift)
    summary = json.loads(paths["summary.json"].read_text())
    if summary_path is not None:
        write_text_atomic(Path(summary_path), json.dumps(summary, indent=2) + "\n")
    return summary
