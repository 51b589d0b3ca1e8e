"""Which tier of the one op engine answers an op question: every op question goes to the engine, and the
engine picks the tier per row.

The engine's tiers, best first: **measured** (the GPU's own kernels near the shape: an exact hit or an
interpolation between them), **calibrated** (a model shifted by profiled rows of the GPU), **transfer** (the
GPU's measured relatives carried over by physics), **spec** (the efficiency learned across measured GPUs) and
**learned** (the tabular champion's prediction from the op's analytical and device features).

- Tensor-dtype GEMMs, attention, MoE and all-reduce (``data_tiers_answer``): measured > calibrated >
  transfer > spec (``OpEngine.predict``).
- The families the tabular champion answers well on a known GPU -- FP32/FP64 GEMMs (the vector pipes),
  elementwise, softmax, layer/RMS norm, convolution: **measured** where the engine holds the GPU's own
  kernels of (family, dtype) near the shape (``measured_answers``: NeuSight's FP32 ``linear`` rows of P4,
  P100, T4, V100, A100-PCIE-40GB today), else **learned** -- or **calibrated** where the GPU's calibration
  corrected the learned answer. The learned tier's prediction is the champion's, unchanged.

The engine sits below the predictors (``components.models``), so the learned tier's prediction is handed
to it by the caller (``components.serving.op_answers``); this module says which rows take it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.physics import roofline as physics
from components.physics.registry import family as family_of

LEARNED_TIER = "learned"  # the tabular champion's prediction, as one tier of the engine
# every tier an op answer may name (``OpTimes.tier`` and the learned tier)
TIERS: tuple[str, ...] = ("measured", "calibrated", "transfer", "spec", LEARNED_TIER)
VECTOR_GEMM_DTYPES: tuple[str, ...] = ("fp32", "fp64")  # GEMMs on the vector pipes: the learned tier's


def data_tiers_answer(family: str | None, dtype: str | None) -> bool:
    """True where the engine's data tiers (measured > calibrated > transfer > spec) answer every row of a
    (family, dtype) question; False where the learned tier answers the rows no measured kernel does."""
    fam = family_of(str(family))
    if not fam.tabular:
        return fam.engine
    return fam.engine and fam.name == "gemm" and dtype not in VECTOR_GEMM_DTYPES


def may_be_measured(family: str) -> bool:
    """Whether the measured tier keeps kernels of ``family`` at all (a layout of its sites): the other
    learned-tier families need no engine loaded."""
    from components.opmodel.measured import LAYOUTS

    return family_of(family).name in LAYOUTS


def measured_answers(
    engine: Any, family: str, dtype: str, shape: dict[str, np.ndarray], spec: Any
) -> Any | None:
    """The measured tier's answers (``engine.OpTimes``: NaN runtime where no measured kernel of the GPU is
    near the row) of rows of a learned-tier (family, dtype) question; None where the engine holds no
    measured kernel of the (family, dtype) on that GPU. Exact hits are the measured kernels (clamped at the
    roofline only), interpolations also under the achievable share of the pipe, as ``OpEngine.raw_predict``
    answers them."""
    from components.opmodel.engine import OpTimes
    from components.opmodel.measured import LAYOUTS

    name = family_of(family).name
    if engine is None or engine.measured is None or name not in LAYOUTS:
        return None
    roof = physics.roofline(name, dtype, shape, spec)
    resolved = engine.measured.resolve(name, roof.choice.dtype, shape, spec, roof.time_us)
    if resolved is None:
        return None
    n = len(roof.time_us)
    hit = np.isfinite(resolved.duration_us)
    duration, q_lo, q_hi = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    tier, support = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    engine.fill_measured(resolved, hit, duration, tier, support, (q_lo, q_hi))
    duration = physics.clamp(duration, roof)
    text = roof.note
    if engine.transfer is not None and engine.transfer.model.achievable:
        from components.opmodel.achievable import cap_achievable

        capped, peak = cap_achievable(
            duration, roof, engine.transfer.model.achievable, getattr(spec, "architecture", None), name
        )
        duration = np.where(resolved.exact, duration, capped)
        text = f"{text}; {peak}" if text else peak
    lo = physics.clamp(duration * np.exp(q_lo), roof)
    hi = np.fmax(duration * np.exp(q_hi), duration)
    note = np.full(n, text, dtype=object)
    return OpTimes(
        duration, lo, hi, tier, support, roof.bound_pipe, note, roof, np.full(n, None, dtype=object)
    )
