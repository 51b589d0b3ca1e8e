"""The one interface every predictor implements (roofline, tabular, llm).

A predictor maps rows of the feature table (canonical measurement columns + analytical/static
features + device catalog specs) to predictions named ``pred_<target>`` and, for classification,
``pred_roofline_class``. It records the row keys it trained on so evaluation can exclude them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from components.ingest.schema import TARGET_METRICS

# Numeric targets any predictor may produce, named as the canonical measurement columns.
NUMERIC_TARGETS: tuple[str, ...] = TARGET_METRICS
CLASS_TARGET = "roofline_class"

if TYPE_CHECKING:  # annotations only: a question that loads a predictor need not load pandas
    import pandas as pd


def class_label_column(split: str | None) -> str:
    """Bolet et al. score their own labelling rule, so the bolet split is judged (and fitted) on it."""
    return "roofline_class_published" if split == "bolet-roofline" else CLASS_TARGET


@runtime_checkable
class Predictor(Protocol):
    family: str  # roofline | tabular | llm

    @property
    def targets(self) -> tuple[str, ...]:
        """Targets this predictor produces (numeric names and/or ``roofline_class``)."""
        ...

    @property
    def trained_on(self) -> frozenset[str]:
        """measurement_ids of the rows used for fitting (empty for training-free models)."""
        ...

    def fit(self, features: pd.DataFrame) -> Predictor: ...

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        """Same index as ``features``; columns ``pred_<target>``."""
        ...

    def save(self, directory: Path) -> None: ...
