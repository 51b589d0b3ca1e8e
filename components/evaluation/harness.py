"""Evaluate any predictor on a split's test side and build the evaluation JSON.

The one leakage guard lives here: rows whose measurement_id the predictor trained on are removed
before scoring and counted as ``excluded_seen``. Targets the evaluated rows do not measure are
left out of the report, never filled.

Rows without a prediction are never dropped silently: every figure carries its coverage --
``n_asked`` (rows that measure the target), ``n_predicted`` (of those, rows with a finite
prediction; errors are computed over them, ``n`` == ``n_predicted``) and ``coverage`` =
n_predicted / n_asked. A target the predictor claims but predicts for no row is reported with
coverage 0 and ``null`` errors, not left out.

JSON shape (fractions in [0, 1]; ``null`` where a figure cannot be computed)::

    {"model", "split", "n", "excluded_seen", "n_asked", "n_predicted", "coverage",
     "targets": {TARGET: {"mape", "median_ape", "within_10", "n", "n_asked", "n_predicted", "coverage"}},
     "per_device": {DEVICE: {TARGET: {...}}},
     "roofline": {"accuracy", "balanced_accuracy", "n", "n_asked", "n_predicted", "coverage"},  # labels exist
     "intervals": {"duration_us": {"coverage", "nominal", "n"}}}     # only when predicted

Top-level ``n_asked`` is the number of rows scored, ``n_predicted`` the rows with at least one
finite prediction of any target the predictor claims.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.metrics import classification_report, interval_coverage, regression_report
from components.common.sampling import capped_index
from components.evaluation.splits import Fold, make_split
from components.ingest.canonical import attach_canonical_columns
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS, Predictor, class_label_column

# Columns the bolet split reads that the feature table does not carry; joined from canonical data.
SPLIT_COLUMNS: dict[str, tuple[str, ...]] = {
    "measurements": ("upstream_row", "roofline_class_published"),
    "kernels": ("program",),
}


@dataclass
class Evaluation:
    report: dict[str, Any]
    frame: pd.DataFrame  # evaluated rows: keys, targets, f_/dev_ columns used by plots, pred_*


def with_split_columns(table: pd.DataFrame, canonical_dir: Path | None) -> pd.DataFrame:
    """Add ``program``, ``upstream_row``, ``roofline_class_published`` from the canonical tables if absent."""
    missing_m = [c for c in SPLIT_COLUMNS["measurements"] if c not in table.columns]
    missing_k = [c for c in SPLIT_COLUMNS["kernels"] if c not in table.columns]
    if not (missing_m or missing_k):
        return table
    table = table.copy()
    canonical_dir = Path(canonical_dir) if canonical_dir is not None else None
    absent = [
        name
        for name, columns in (("measurements.parquet", missing_m), ("kernels.parquet", missing_k))
        if columns
        and not _join_from(
            table, canonical_dir, name, "measurement_id" if name.startswith("m") else "kernel_id", columns
        )
    ]
    table["upstream_row"] = pd.to_numeric(table["upstream_row"], errors="coerce").astype("Int64")
    if absent:  # read back by split_folds when a split finds no test rows
        table.attrs["split_columns_note"] = (
            f"{', '.join(absent)} not found in {canonical_dir} (the canonical tables the feature "
            "table was built "
            "from; the bolet split's labels and programs are joined from there)"
        )
    return table


def _join_from(
    table: pd.DataFrame, canonical_dir: Path | None, file: str, key: str, columns: list[str]
) -> bool:
    """Fill ``columns`` in place from a canonical table by ``key``; all-NA (and False) where that
    table is absent."""
    if not columns:
        return True
    path = canonical_dir / file if canonical_dir else None
    if path is not None and path.is_file():
        extra = pd.read_parquet(path, columns=[key, *columns]).drop_duplicates(key)
        joined = table[[key]].merge(extra, on=key, how="left")
        for column in columns:
            table[column] = joined[column].to_numpy()
        return True
    for column in columns:
        table[column] = pd.Series(pd.NA, index=table.index, dtype="string")
    return False


def split_folds(table: pd.DataFrame, split: str) -> list[Fold]:
    folds = make_split(table, split)
    if not folds or all(len(f.test) == 0 for f in folds):
        why = _bolet_missing(table) if split == "bolet-roofline" else None
        raise ValueError(
            f"split {split!r} has no test rows in this feature table "
            f"(sources present: {sorted(table['source'].dropna().unique().tolist())})"
            + (f": {why}" if why else "")
        )
    return folds


def _bolet_missing(table: pd.DataFrame) -> str | None:
    """Why the bolet split finds no kernel: which of its inputs the table lacks."""
    rows = table[table["source"] == "gpuflopbench"]
    if rows.empty:
        return "no gpuflopbench rows"
    note = table.attrs.get("split_columns_note")
    head = rows[~rows["upstream_file"].astype("string").str.contains("_history/", regex=False).fillna(False)]
    if head.empty:
        return (
            f"all {len(rows)} gpuflopbench rows come from _history/ files, none from the HEAD profiling file"
        )
    for column in ("roofline_class_published", "program"):
        if column not in head.columns or head[column].isna().all():
            return f"none of the {len(head)} gpuflopbench HEAD rows has a {column}: " + (
                note
                or "the canonical tables hold no row with these measurement_id/kernel_id "
                "(re-ingested after the features were built?)"
            )
    return None


def silent_rows_reasoned(frame: pd.DataFrame, target: str = "duration_us") -> pd.DataFrame:
    """``frame`` with a stated reason on every row left without a runtime and without a note: the analytical
    features it lacks (named), else which (family, dtype) the predictor returned nothing for."""
    column = f"pred_{target}"
    if target not in frame.columns:
        return frame
    notes = frame["pred_note"] if "pred_note" in frame.columns else pd.Series(pd.NA, index=frame.index)
    pred = pd.to_numeric(frame[column], errors="coerce") if column in frame.columns else None
    missing = pd.to_numeric(frame[target], errors="coerce").notna() & notes.isna()
    missing &= pred.isna() if pred is not None else True
    if not missing.any():
        return frame
    features = [c for c in frame.columns if c.startswith("f_")]
    lacking = (
        frame.loc[missing, features].isna().to_numpy() if features else np.zeros((int(missing.sum()), 0))
    )
    family = frame.loc[missing, "family"].astype(str) if "family" in frame else pd.Series("op", index=missing)
    dtype = (
        frame.loc[missing, "dtype"].fillna("").astype(str) if "dtype" in frame else family.map(lambda _: "")
    )
    labels = []
    for row, (fam, dt) in enumerate(zip(family.to_numpy(), dtype.to_numpy(), strict=True)):
        gaps = [features[j] for j in np.flatnonzero(lacking[row])[:3]]
        what = f"{fam} {dt}".strip()
        labels.append(
            f"no runtime: features not computable for this {what} row ({', '.join(gaps[:3])})"
            if gaps
            else f"no runtime: the model gives none for {what} "
            "(no feature missing; a family it was not fit on)"
        )
    filled = notes.astype("object").copy()
    filled.loc[missing] = np.array(labels, dtype=object)
    return frame.assign(pred_note=filled)


def evaluation_rows(table: pd.DataFrame, split: str | None) -> pd.DataFrame:
    """The rows to score: the union of the split's test sides, or every row when ``split`` is None."""
    if split is None:
        return table
    index = pd.Index([])
    for fold in split_folds(table, split):
        index = index.union(fold.test)
    return table.loc[index]


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    return value


def _measured(values: pd.Series) -> pd.Series:
    """True where a numeric truth can be scored (finite, non-zero: the rows relative error uses)."""
    numbers = pd.to_numeric(values, errors="coerce").astype("float64")
    return pd.Series(np.isfinite(numbers.to_numpy()) & (numbers.to_numpy() != 0), index=values.index)


def coverage_figures(n_asked: int, n_predicted: int) -> dict[str, Any]:
    """``n_asked``, ``n_predicted`` and their ratio (None when nothing was asked)."""
    return {
        "n_asked": int(n_asked),
        "n_predicted": int(n_predicted),
        "coverage": (n_predicted / n_asked) if n_asked else None,
    }


def target_reports(frame: pd.DataFrame, targets: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per-target regression figures with their coverage.

    Rows that do not measure a target are left out of it (never filled); rows that measure it but
    have no finite prediction (no ``pred_`` column, NaN, a row the predictor did not return) count
    in ``n_asked`` and not in ``n_predicted``. A target no row measures is left out.
    """
    out = {}
    for target in targets:
        if target not in NUMERIC_TARGETS or target not in frame.columns:
            continue
        asked = _measured(frame[target])
        if not asked.any():
            continue
        column = f"pred_{target}"
        prediction = (
            pd.to_numeric(frame[column], errors="coerce").astype("float64")
            if column in frame.columns
            else pd.Series(np.nan, index=frame.index)
        )
        predicted = asked & pd.Series(np.isfinite(prediction.to_numpy()), index=frame.index)
        report = regression_report(
            pd.to_numeric(frame.loc[predicted, target], errors="coerce"), prediction[predicted]
        )
        out[target] = {
            **{key: report[key] for key in ("mape", "median_ape", "within_10", "n")},
            **coverage_figures(int(asked.sum()), int(predicted.sum())),
        }
    return out


def roofline_report(frame: pd.DataFrame, label_column: str) -> dict[str, Any] | None:
    """Accuracy over the labelled rows; a row without a predicted class counts as wrong ("none")
    and as not predicted in the coverage."""
    column = f"pred_{CLASS_TARGET}"
    if label_column not in frame.columns:
        return None
    labelled = frame[frame[label_column].notna()]
    if labelled.empty:
        return None
    raw = (
        labelled[column]
        if column in labelled.columns
        else pd.Series(pd.NA, index=labelled.index, dtype="object")
    )
    predicted = raw.astype(object).where(raw.notna(), "none")
    report = classification_report(labelled[label_column].astype(object).to_numpy(), predicted.to_numpy())
    return {**report, **coverage_figures(report["n"], int(raw.notna().sum()))}


def evaluate_frame(
    frame: pd.DataFrame, targets: tuple[str, ...], *, model: str, split: str | None, excluded_seen: int
) -> dict[str, Any]:
    """The evaluation JSON from rows that already carry their ``pred_*`` columns."""
    claimed = [f"pred_{t}" for t in targets if f"pred_{t}" in frame.columns]
    any_prediction = frame[claimed].notna().any(axis=1) if claimed else pd.Series(False, index=frame.index)
    report: dict[str, Any] = {
        "model": model,
        "split": split or "all",
        "n": len(frame),
        "excluded_seen": int(excluded_seen),
        **coverage_figures(len(frame), int(any_prediction.sum())),
        "targets": target_reports(frame, targets),
        "per_device": {},
    }
    for device, rows in frame.groupby("device_id", sort=True):
        per = target_reports(rows, targets)
        if per:
            report["per_device"][str(device)] = per
    claims_class = CLASS_TARGET in targets or f"pred_{CLASS_TARGET}" in frame.columns
    roofline = roofline_report(frame, class_label_column(split)) if claims_class else None
    if roofline is not None and roofline["n"]:
        report["roofline"] = roofline
    if {"pred_duration_us_lo", "pred_duration_us_hi", "duration_us"} <= set(frame.columns):
        measured = frame[pd.to_numeric(frame["duration_us"], errors="coerce").notna()]
        coverage = interval_coverage(
            measured["duration_us"], measured["pred_duration_us_lo"], measured["pred_duration_us_hi"]
        )
        nominal = frame.attrs.get("interval_nominal")
        report["intervals"] = {"duration_us": {"coverage": coverage, "nominal": nominal, "n": len(measured)}}
    return _clean(report)


def capped_rows(
    index: pd.Index, table: pd.DataFrame, max_rows: int | None, salt: str = "eval-cap"
) -> pd.Index:
    """At most ``max_rows`` of ``index``, chosen by hash of measurement_id: the same rows for every
    model and every run, so families scored under one cap are compared on identical rows."""
    if max_rows is None or len(index) <= max_rows:
        return index
    return capped_index(index, table.loc[index, "measurement_id"], max_rows, salt)


def evaluate_predictor(
    predictor: Predictor,
    table: pd.DataFrame,
    split: str | None,
    *,
    model: str,
    rows: pd.Index | None = None,
    canonical_dir: Path | None = None,
) -> Evaluation:
    """Score ``predictor`` on the split's test side (or ``rows``), excluding rows it trained on."""
    candidates = table.loc[rows] if rows is not None else evaluation_rows(table, split)
    seen = candidates["measurement_id"].astype(str).isin(predictor.trained_on)
    scored = candidates.loc[~seen]
    model_input = attach_canonical_columns(
        scored,
        canonical_dir,
        kernels=tuple(getattr(predictor, "kernel_columns", ())),
        measurements=tuple(getattr(predictor, "measurement_columns", ())),
    )
    predictions = predictor.predict(model_input) if len(scored) else pd.DataFrame(index=scored.index)
    frame = pd.concat([scored, predictions], axis=1)
    conformal = getattr(predictor, "conformal", None) or {}
    if "alpha" in conformal:
        frame.attrs["interval_nominal"] = 1.0 - float(conformal["alpha"])
    report = evaluate_frame(
        frame, tuple(predictor.targets), model=model, split=split, excluded_seen=int(seen.sum())
    )
    return Evaluation(report, frame)


def flat_metrics(report: dict[str, Any]) -> dict[str, float]:
    """MLflow metric names (``<target>_<metric>``; ``runtime_mape``/``within_10``/
    ``roofline_balanced_accuracy`` are the names params.yaml's promotion thresholds use)."""
    metrics: dict[str, float] = {"n": float(report["n"]), "excluded_seen": float(report["excluded_seen"])}
    if report.get("coverage") is not None:
        metrics["coverage"] = float(report["coverage"])
    for target, figures in report.get("targets", {}).items():
        for key, value in figures.items():
            if value is not None:
                metrics[f"{target}_{key}"] = float(value)
    duration = report.get("targets", {}).get("duration_us", {})
    if duration.get("mape") is not None:
        metrics["runtime_mape"] = float(duration["mape"])
    if duration.get("within_10") is not None:
        metrics["within_10"] = float(duration["within_10"])
    for key, value in (report.get("roofline") or {}).items():
        if value is not None:
            metrics[f"roofline_{key}"] = float(value)
    coverage = (report.get("intervals") or {}).get("duration_us", {}).get("coverage")
    if coverage is not None:
        metrics["duration_us_interval_coverage"] = float(coverage)
    return metrics


def log_evaluation_run(
    report: dict[str, Any],
    artifacts: list[Path],
    *,
    tracking_uri: str,
    experiment_id: str,
    tags: dict[str, str],
) -> str:
    """An MLflow evaluation run: the flat metrics, the JSON report and plots as artifacts; returns its id."""
    import mlflow
    from components.registry.tracking import STAGE_TAG, parent_run_id

    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(
        experiment_id=experiment_id, run_name=f"evaluate-{report.get('split')}", parent_run_id=parent_run_id()
    ) as run:
        mlflow.set_tags({"kind": "evaluation", STAGE_TAG: "evaluate", **tags})
        mlflow.log_params({"model": report.get("model"), "split": report.get("split")})
        mlflow.log_metrics(flat_metrics(report))
        mlflow.log_dict(report, "evaluation/report.json")
        for path in artifacts:
            mlflow.log_artifact(str(path), artifact_path="evaluation")
        return str(run.info.run_id)


def read_feature_table(path: Path, canonical_dir: Path | None) -> pd.DataFrame:
    """The feature table with the columns every split needs (joined from canonical data if absent)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"feature table not found: {path} (run `kernelcast features build` first)")
    return with_split_columns(pd.read_parquet(path), canonical_dir)
