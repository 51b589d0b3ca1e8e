"""Distribution shift between a reference and a candidate measurements table.

Per metric and per group (kernel family by default), both tables' positive values are taken on a
log10 scale -- runtimes and rates span many decades, so a linear scale would put almost every row
in one bin -- and compared with the population stability index (PSI) over the reference's
deciles, plus the two-sample Kolmogorov-Smirnov statistic for context. A (metric, group) drifts
when its PSI exceeds ``threshold`` (``validate.drift_threshold``; PSI > 0.25 is the usual "major
shift"). Groups with fewer than ``min_rows`` rows on either side are reported as skipped.

Used by ``kernelcast validate --drift-against DIR`` (DIR holds a previous validated
``measurements.parquet``); flows call ``drift_report`` / ``drift_against_dir`` directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

DEFAULT_METRICS: tuple[str, ...] = ("duration_us", "achieved_gbps", "gflops", "arith_intensity")
ALL_GROUPS = "<all>"
_EPS = 1e-4  # floor for empty bins; keeps PSI finite


def _log_values(series: pd.Series) -> np.ndarray:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    values = values[np.isfinite(values) & (values > 0)]
    return np.log10(values)


def population_stability_index(reference: np.ndarray, candidate: np.ndarray, bins: int = 10) -> float:
    """PSI of ``candidate`` against ``reference`` over the reference's quantile bins."""
    edges = np.unique(np.quantile(reference, np.linspace(0.0, 1.0, bins + 1)))
    if len(edges) < 2:  # constant reference: one bin for "equal", one for anything else
        same_ref = 1.0
        same_cand = float(np.mean(np.isclose(candidate, reference[0])))
        ref_p = np.array([same_ref, 0.0])
        cand_p = np.array([same_cand, 1.0 - same_cand])
    else:
        inner = edges[1:-1]  # open-ended outer bins catch candidate values outside the reference range
        ref_p = np.bincount(np.searchsorted(inner, reference, side="right"), minlength=len(inner) + 1) / len(
            reference
        )
        cand_p = np.bincount(np.searchsorted(inner, candidate, side="right"), minlength=len(inner) + 1) / len(
            candidate
        )
    ref_p = np.clip(ref_p, _EPS, None)
    cand_p = np.clip(cand_p, _EPS, None)
    return float(np.sum((cand_p - ref_p) * np.log(cand_p / ref_p)))


def ks_statistic(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (max distance between the empirical CDFs)."""
    grid = np.concatenate([reference, candidate])
    ref_cdf = np.searchsorted(np.sort(reference), grid, side="right") / len(reference)
    cand_cdf = np.searchsorted(np.sort(candidate), grid, side="right") / len(candidate)
    return float(np.max(np.abs(ref_cdf - cand_cdf)))


def _groups(frame: pd.DataFrame, group_by: str | None) -> dict[str, pd.DataFrame]:
    groups = {ALL_GROUPS: frame}
    if group_by and group_by in frame.columns:
        keys = frame[group_by].astype("object").where(frame[group_by].notna(), "<null>")
        groups.update({str(k): g for k, g in frame.groupby(keys)})
    return groups


def drift_report(
    reference: pd.DataFrame,
    candidate: pd.DataFrame,
    metrics: list[str],
    threshold: float,
    group_by: str | None = "family",
    min_rows: int = 30,
) -> dict[str, Any]:
    """Per (metric, group) PSI and KS on log10 values; ``drifted`` when any PSI > threshold.

    Groups are the whole table (``<all>``) plus each ``group_by`` value present in both tables.
    """
    ref_groups, cand_groups = _groups(reference, group_by), _groups(candidate, group_by)
    results: list[dict[str, Any]] = []
    for metric in metrics:
        for group in sorted(set(ref_groups) & set(cand_groups), key=lambda g: (g != ALL_GROUPS, g)):
            ref_frame, cand_frame = ref_groups[group], cand_groups[group]
            if metric not in ref_frame.columns or metric not in cand_frame.columns:
                continue
            ref, cand = _log_values(ref_frame[metric]), _log_values(cand_frame[metric])
            row: dict[str, Any] = {
                "metric": metric,
                "group": group,
                "n_reference": len(ref),
                "n_candidate": len(cand),
                "psi": None,
                "ks": None,
                "drifted": False,
            }
            if len(ref) >= min_rows and len(cand) >= min_rows:
                row["psi"] = round(population_stability_index(ref, cand), 6)
                row["ks"] = round(ks_statistic(ref, cand), 6)
                row["drifted"] = bool(row["psi"] > threshold)
            else:
                row["skipped"] = f"fewer than {min_rows} positive values on a side"
            results.append(row)
    drifted = [f"{r['metric']}/{r['group']}" for r in results if r["drifted"]]
    return {
        "statistic": "psi_log10",
        "threshold": threshold,
        "drifted": bool(drifted),
        "drifted_pairs": drifted,
        "results": results,
    }


def with_family(measurements: pd.DataFrame, kernels: pd.DataFrame | None) -> pd.DataFrame:
    """Attach each row's kernel family (from the kernels table) for per-family comparison."""
    if kernels is None or "family" not in kernels.columns or "family" in measurements.columns:
        return measurements
    family = kernels.drop_duplicates("kernel_id").set_index("kernel_id")["family"]
    return measurements.assign(family=measurements["kernel_id"].map(family))


def drift_against_dir(
    candidate: pd.DataFrame,
    kernels: pd.DataFrame | None,
    reference_dir: Path,
    params: dict[str, Any],
    metrics: list[str] | None = None,
) -> dict[str, Any]:
    """Drift of ``candidate`` against ``reference_dir/measurements.parquet`` (a validated folder).

    Families come from ``reference_dir/kernels.parquet`` when present, else from ``kernels``
    (kernel ids are content hashes, so the same kernel has the same id in both).
    """
    path = Path(reference_dir) / "measurements.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (--drift-against needs a validated folder)")
    reference = pd.read_parquet(path)
    ref_kernels_path = Path(reference_dir) / "kernels.parquet"
    ref_kernels = pd.read_parquet(ref_kernels_path) if ref_kernels_path.is_file() else None
    all_kernels = (
        pd.concat([k for k in (kernels, ref_kernels) if k is not None])
        if (kernels is not None or ref_kernels is not None)
        else None
    )
    threshold = float(params.get("validate", params)["drift_threshold"])
    return drift_report(
        with_family(reference, all_kernels),
        with_family(candidate, all_kernels),
        list(metrics or DEFAULT_METRICS),
        threshold,
    )
