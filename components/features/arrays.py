"""Vectorised helpers over the row arrays the feature formulas and serving work on: labels looked up once
per distinct value (hash-factorised or a ``pd.Categorical``'s codes), NaN defaults, numeric columns."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

from components.common.lazy import lazy_module

pd = lazy_module("pandas")  # tables and bulk labels only: a single question's arrays need no pandas
SMALL_LABELS = 32  # label arrays this short (a few questions) are coded without pandas, as factorize would


def is_categorical(labels: Any) -> bool:
    """``isinstance(labels, pd.Categorical)`` without importing pandas (none is made before it loads)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(labels, pandas.Categorical)


def numeric_column(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy("float64")


def ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.ceil(a / b)


def label_codes(labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, distinct labels)`` of a label array: a ``pd.Categorical``'s own (free: bulk callers with
    a few distinct labels pass them so), else hash-factorised (NaN/None is a label of its own)."""
    if is_categorical(labels):
        categories = np.asarray(labels.categories, dtype=object)
        codes = np.asarray(labels.codes, dtype=np.int64)
        if (codes < 0).any():  # missing values: one more label at the end, as factorize would give
            return np.where(codes < 0, len(categories), codes), np.append(categories, None)
        return codes, categories
    values = np.asarray(labels, dtype=object)
    if len(values) <= SMALL_LABELS and all(type(v) is str for v in values):  # a question's few: no pandas
        first: dict[str, int] = {}
        codes = np.array([first.setdefault(v, len(first)) for v in values], dtype=np.int64)
        return codes, np.array(list(first), dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes, np.asarray(uniques, dtype=object)


def is_in(labels: Any, names: Iterable[str]) -> np.ndarray:
    """``np.isin(labels, names)`` for object arrays and ``pd.Categorical`` (codes compared, not strings)."""
    if is_categorical(labels):
        return np.asarray(labels.isin(list(names)))
    return np.isin(labels, list(names))


def starts_with(labels: Any, prefix: str) -> np.ndarray:
    """Which labels start with ``prefix`` (tested once per distinct label)."""
    codes, uniques = label_codes(labels)
    return (
        np.array([str(u).startswith(prefix) for u in uniques], dtype=bool)[codes]
        if len(uniques)
        else np.zeros(len(codes), dtype=bool)
    )


def map_labels(labels: Any, table: dict[str, Any], default: Any) -> np.ndarray:
    """``[table.get(str(v), default) for v in labels]`` as a float array, looked up once per distinct
    label (hash-factorised, no per-row Python; a ``pd.Categorical``'s codes as they are): bulk serving
    maps millions of rows this way."""
    if not is_categorical(labels):
        labels = np.asarray(labels, dtype=object)
    if len(labels) <= 32:  # a handful of questions: a dict lookup per row beats factorising
        return np.array([table.get(str(v), default) for v in labels], dtype="float64").reshape(
            (len(labels), *np.shape(default))
        )
    codes, uniques = label_codes(labels)
    values = np.array([table.get(str(u), default) for u in uniques], dtype="float64")
    if values.ndim == 1:
        return values[codes] if len(uniques) else np.empty(len(codes))
    return values[codes] if len(uniques) else np.empty((len(codes), values.shape[1]))


def finite_or(value: np.ndarray, default: float | np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(value), value, default)
