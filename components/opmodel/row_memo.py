"""Answers of a row-wise function remembered row by row (the transfer tier's relative answers).

Why: a whole-catalog ``rank --llm`` asks each measured relative (H100, H200, A100, ...) the step grids of
every GPU it is a relative of, one batch per GPU; the batches differ (each GPU holds the tensor-parallel
sizes that fit its memory) but share most of their rows, so a memo of whole batches missed and each relative
answered the same rows again for every GPU (about half of a cold rank's op times).
Remembered per row, a relative answers each row once. It holds only for functions whose answer for a row is
its own, the same with or without the other rows of the batch (the measured tier's search is per question
site, ``measured.SiteTable.candidates``); rows are keyed by the bytes of their float64 values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ROW_LIMIT = 1_000_000  # rows a memo keeps (all questions together) before forgetting them all


def shape_key(shape: dict[str, Any]) -> tuple:
    """A whole batch's shape as a dictionary key (the memo of batches with a label column): each column's
    values (numbers by their bytes)."""
    out = []
    for name in sorted(shape):
        values = np.asarray(shape[name])
        part = tuple(values.tolist()) if values.dtype == object else (values.dtype.str, values.tobytes())
        out.append((name, values.shape, part))
    return tuple(out)


class RowMemo:
    """Per question (any hashable key), the answers of rows asked before: ``answer`` computes only the
    others."""

    def __init__(self, limit: int = ROW_LIMIT) -> None:
        self.limit = limit
        self._index: dict[tuple, dict[bytes, int]] = {}  # question -> row bytes -> position in _values
        self._values: dict[tuple, list[np.ndarray]] = {}  # question -> one array per output
        self._rows = 0

    def answer(
        self,
        question: tuple,
        shape: dict[str, Any],
        n: int,
        compute: Callable[[dict[str, np.ndarray], np.ndarray], tuple[np.ndarray, ...]],
    ) -> tuple[np.ndarray, ...] | None:
        """``compute(part, rows)`` (one array per output, one value per row of ``part``: the rows ``rows`` of
        ``shape``) for the rows not answered before under ``question``; every row's answers in the batch's
        order. None where a column is not numeric (such a batch is not remembered by row)."""
        names = sorted(shape)
        columns = [np.broadcast_to(np.asarray(shape[k]), (n,)) for k in names]
        if any(c.dtype.kind not in "biuf" for c in columns) or n == 0:
            return None
        matrix = np.ascontiguousarray(np.column_stack([c.astype("float64") for c in columns]))
        keys = matrix.view(np.dtype((np.void, 8 * len(names)))).ravel()
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        question = (question, tuple(names))
        if self._rows + len(distinct) > self.limit:
            self._index.clear()
            self._values.clear()
            self._rows = 0
        index = self._index.setdefault(question, {})
        raw = distinct.tolist()
        missing = sorted((i for i, key in enumerate(raw) if key not in index), key=lambda i: first[i])
        if missing:
            rows = first[missing]
            found = compute({k: c[rows] for k, c in zip(names, columns, strict=True)}, rows)
            known = self._values.get(question)
            start = 0 if known is None else len(known[0])
            self._values[question] = (
                [np.asarray(a) for a in found]
                if known is None
                else [np.concatenate([old, a]) for old, a in zip(known, found, strict=True)]
            )
            for j, i in enumerate(missing):
                index[raw[i]] = start + j
            self._rows += len(missing)
        where = np.fromiter((index[key] for key in raw), dtype="int64", count=len(raw))[inverse.ravel()]
        return tuple(a[where] for a in self._values[question])
