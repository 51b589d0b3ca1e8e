"""The serving benches' op-source choice: the blend of the roofline's and the engine's predictions is a
candidate only where asked, chosen on the inner folds of the training GPUs when it errs least there."""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.deployments.bench_common import BLEND, _combine, choose_source
from components.deployments.ops import ENGINE_SOURCE, ROOFLINE_SOURCE


def _frames(bias: dict[str, float]) -> dict[str, pd.DataFrame]:
    """Four GPUs; each source predicts the truth times (1 + its bias) on every run."""
    truth = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0])
    gpus = np.repeat(["a", "b", "c", "d"], 2)
    return {
        s: pd.DataFrame({"gpu": gpus, "decode_ms": truth, "guess": truth * (1 + b)}) for s, b in bias.items()
    }


def _fit(train: pd.DataFrame) -> None:
    return None


def _predict(frame: pd.DataFrame, _: None) -> pd.DataFrame:
    return frame.assign(decode_pred_ms=frame["guess"])


def test_blend_is_chosen_where_opposite_errors_cancel_and_only_when_asked() -> None:
    opposite = _frames({ROOFLINE_SOURCE: 0.10, ENGINE_SOURCE: -0.08})
    targets = {"decode": "decode_ms"}
    assert choose_source(opposite, "gpu", _fit, _predict, targets) == {"decode": ENGINE_SOURCE}
    assert choose_source(opposite, "gpu", _fit, _predict, targets, blend=True) == {"decode": BLEND}
    same_side = _frames({ROOFLINE_SOURCE: 0.10, ENGINE_SOURCE: 0.02})
    assert choose_source(same_side, "gpu", _fit, _predict, targets, blend=True) == {"decode": ENGINE_SOURCE}
    held = {k: _predict(f, None) for k, f in opposite.items()}
    mixed = _combine(held, {"decode": BLEND}, osl=False)
    assert np.allclose(mixed["decode_pred_ms"], mixed["decode_ms"] * 1.01)
    assert (mixed["decode_source"] == BLEND).all()
