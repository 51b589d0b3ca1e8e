"""One row of a bench table, whichever bench wrote it (accuracy, calibration, op engine, programs, serving).

The row shape the bench Markdown, the gate and the JSON readers expect: our figure (rounded to 4 places,
None where not finite) and how many rows it stands on of how many were asked, the published figure beside it.
"""

from __future__ import annotations

import math
from typing import Any

_FROM_COUNTS: Any = object()  # coverage = n / n_asked


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else round(float(value), 4)


def bench_row(
    split: str,
    family: str,
    target: str,
    scope: str,
    metric: str,
    ours: float | None,
    n: int,
    n_asked: int,
    *,
    coverage: float | None = _FROM_COUNTS,
    published: float | None = None,
    published_by: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A bench row; ``target`` is the full name (e.g. ``duration_us[op=gemm]``), ``coverage`` by default
    ``n / n_asked``; ``extra`` keys follow (a calibration row's method, ...)."""
    if coverage is _FROM_COUNTS:
        coverage = n / n_asked if n_asked else None
    return {
        "split": split,
        "family": family,
        "target": target,
        "scope": scope,
        "metric": metric,
        "ours": _rounded(ours),
        "n": int(n),
        "n_asked": int(n_asked),
        "coverage": _rounded(coverage),
        "published": published,
        "published_by": published_by,
        **extra,
    }
