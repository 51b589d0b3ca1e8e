"""Active learning: measure next the cases the current model is least sure about on this GPU.

The candidates of an ``active`` suite are featurised for the GPU being profiled and scored by the
model (the champion, a local model folder, or any ``models:/`` URI); each gets its relative
interval width ``(duration_us_hi - duration_us_lo) / duration_us``, and the ``budget`` widest are
the suite. A model without intervals cannot rank and is refused with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from components.profiling.cases import Case


class ActiveLearningError(ValueError):
    """The model cannot choose cases (no intervals, unknown device)."""


def _query_op(case: Case) -> str:
    family, op = case.spec["family"], case.spec["op"]
    return {"gemm": "matmul", "layernorm": "layernorm"}.get(family, op)


def interval_widths(predictor: Any, candidates: list[Case], device_id: str) -> pd.Series:
    """Relative predicted-interval width of each candidate on ``device_id`` (index: case ids)."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.serving.query import query_frames

    catalog = load_catalog()
    frames = [query_frames(_query_op(c), c.spec["shape"], c.spec["dtype"], [device_id]) for c in candidates]
    measurements = pd.concat([m for m, _ in frames], ignore_index=True)
    kernels = pd.concat([k for _, k in frames], ignore_index=True).drop_duplicates("kernel_id")
    table = build_feature_table(measurements, kernels, catalog)
    predictions = predictor.predict(table).reset_index(drop=True)
    if not {"pred_duration_us_lo", "pred_duration_us_hi"} <= set(predictions.columns):
        raise ActiveLearningError(
            "the model gives no runtime intervals (pred_duration_us_lo/hi); "
            "active learning ranks candidates by interval width"
        )
    width = (predictions["pred_duration_us_hi"] - predictions["pred_duration_us_lo"]) / predictions[
        "pred_duration_us"
    ]
    order = table["measurement_id"].map({m: i for i, m in enumerate(measurements["measurement_id"])})
    widths = pd.Series(width.to_numpy(), index=[candidates[int(i)].case_id for i in order])
    return widths.fillna(float("inf"))  # no prediction at all: as uncertain as it gets


def choose(widths: pd.Series, candidates: list[Case], budget: int) -> list[Case]:
    """The ``budget`` candidates with the widest intervals (ties: suite order)."""
    by_id = {c.case_id: c for c in candidates}
    ranked = sorted(by_id, key=lambda cid: (-float(widths.get(cid, float("inf"))), list(by_id).index(cid)))
    return [by_id[cid] for cid in ranked[:budget]]


def interval_selector(model: str, device_id: str) -> Callable[[list[Case], int], list[Case]]:
    """The ``select`` callable ``load_cases`` takes for an ``active`` suite."""
    from components.registry.loading import load_any_predictor

    predictor = load_any_predictor(model)

    def select(candidates: list[Case], budget: int) -> list[Case]:
        return choose(interval_widths(predictor, candidates, device_id), candidates, budget)

    return select
