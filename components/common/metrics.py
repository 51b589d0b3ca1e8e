"""Pure metric functions shared by every model family and every report.

Relative errors are ``|pred - true| / |true|``; rows whose true value is missing, zero or
non-finite are left out (and counted by ``n``), never filled.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np


def _paired(y_true: Sequence[float], y_pred: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    true = np.asarray(y_true, dtype="float64")
    pred = np.asarray(y_pred, dtype="float64")
    if true.shape != pred.shape:
        raise ValueError(f"y_true has shape {true.shape} but y_pred has {pred.shape}")
    keep = np.isfinite(true) & np.isfinite(pred) & (true != 0)
    return true[keep], pred[keep]


def relative_errors(y_true: Sequence[float], y_pred: Sequence[float]) -> np.ndarray:
    """|pred - true| / |true| over the rows where both are finite and true is non-zero."""
    true, pred = _paired(y_true, y_pred)
    return np.abs(pred - true) / np.abs(true)


def mape(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Mean absolute percentage error as a fraction (0.1 = 10%), sklearn's, over the comparable rows; NaN when
    there are none."""
    from sklearn.metrics import mean_absolute_percentage_error

    true, pred = _paired(y_true, y_pred)
    return float(mean_absolute_percentage_error(true, pred)) if true.size else math.nan


def median_ape(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    errors = relative_errors(y_true, y_pred)
    return float(np.median(errors)) if errors.size else math.nan


def within(y_true: Sequence[float], y_pred: Sequence[float], tolerance: float) -> float:
    """Share of predictions whose relative error is at most ``tolerance`` (Omniwise's headline)."""
    errors = relative_errors(y_true, y_pred)
    return float((errors <= tolerance).mean()) if errors.size else math.nan


def regression_report(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, float | int]:
    """The per-target figures every evaluation JSON carries."""
    errors = relative_errors(y_true, y_pred)
    if not errors.size:
        return {
            "mape": math.nan,
            "median_ape": math.nan,
            "within_10": math.nan,
            "within_20": math.nan,
            "n": 0,
        }
    return {
        "mape": float(errors.mean()),
        "median_ape": float(np.median(errors)),
        "within_10": float((errors <= 0.10).mean()),
        "within_20": float((errors <= 0.20).mean()),
        "n": int(errors.size),
    }


def _labels(y_true: Sequence[object], y_pred: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    true = np.asarray(y_true, dtype=object)
    pred = np.asarray(y_pred, dtype=object)
    if true.shape != pred.shape:
        raise ValueError(f"y_true has shape {true.shape} but y_pred has {pred.shape}")
    keep = np.array([t is not None and t == t for t in true], dtype=bool)  # t == t drops NaN
    return true[keep], pred[keep]


def accuracy(y_true: Sequence[object], y_pred: Sequence[object]) -> float:
    true, pred = _labels(y_true, y_pred)
    return float((true == pred).mean()) if true.size else math.nan


def balanced_accuracy(y_true: Sequence[object], y_pred: Sequence[object]) -> float:
    """Mean per-class recall (sklearn's): a constant guess scores 1/#classes however skewed the data. Labels
    of any type (a missing prediction counts as wrong): each is coded by its position among the true ones."""
    from sklearn.metrics import balanced_accuracy_score

    true, pred = _labels(y_true, y_pred)
    if not true.size:
        return math.nan
    codes = {label: i for i, label in enumerate(dict.fromkeys(true.tolist()))}
    with warnings.catch_warnings():  # a predicted label never true has no recall of its own: not an error
        warnings.filterwarnings("ignore", "y_pred contains classes not in y_true")
        warnings.filterwarnings("ignore", "A single label was found")  # one class: its recall alone
        return float(
            balanced_accuracy_score(
                [codes[t] for t in true.tolist()], [codes.get(p, -1) for p in pred.tolist()]
            )
        )


def classification_report(y_true: Sequence[object], y_pred: Sequence[object]) -> dict[str, float | int]:
    true, _ = _labels(y_true, y_pred)
    return {
        "accuracy": accuracy(y_true, y_pred),
        "balanced_accuracy": balanced_accuracy(y_true, y_pred),
        "n": int(true.size),
    }


def interval_coverage(y_true: Sequence[float], lower: Sequence[float], upper: Sequence[float]) -> float:
    """Share of true values inside [lower, upper]: the measured coverage of a predictive interval."""
    true = np.asarray(y_true, dtype="float64")
    lo = np.asarray(lower, dtype="float64")
    hi = np.asarray(upper, dtype="float64")
    keep = np.isfinite(true) & np.isfinite(lo) & np.isfinite(hi)
    if not keep.any():
        return math.nan
    return float(((true[keep] >= lo[keep]) & (true[keep] <= hi[keep])).mean())
