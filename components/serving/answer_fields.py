"""The answer: every answer dict has the same keys (``ANSWER_KEYS``), None where unknown.

``_blank`` is a question's answer before any figure is known; ``_plain`` turns numpy/pandas values
into the JSON-able Python ones an answer carries.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from components.serving.question_forms import Question

ANSWER_KEYS: tuple[str, ...] = (
    "question",
    "device",
    "device_name",
    "kind",
    "duration_us",
    "duration_us_lo",
    "duration_us_hi",
    "achieved_gbps",
    "gflops",
    "l1_hit_rate",
    "l2_hit_rate",
    "arith_intensity",
    "roofline_class",
    "bound_pipe",
    "roofline_us",
    "headroom",
    "ood",
    "unseen",
    "note",
    "model_version",
    "breakdown",
    "tier",
    "support",
)


def _blank(question: Question, model_version: str) -> dict[str, Any]:
    answer = dict.fromkeys(ANSWER_KEYS)
    answer.update(
        question=question.index,
        device=question.device.id,
        device_name=question.device.name,
        kind=question.kind,
        model_version=model_version,
    )
    return answer


def _plain(value: Any) -> Any:
    """numpy/pandas scalars -> Python; NaN/NA -> None."""
    if value is None:
        return None
    # pd.NA exists only once pandas is loaded: a question that never loaded it does not import it here.
    pandas = sys.modules.get("pandas")
    if pandas is not None and value is pandas.NA:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, np.floating, float, int)):
        number = float(value)
        return None if not math.isfinite(number) else number
    return value if isinstance(value, str) else str(value)
