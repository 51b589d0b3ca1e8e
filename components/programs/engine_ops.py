"""A program's ops answered by the one op engine (``components.opmodel``) where it covers the family.

The engine answers GEMMs (``linear``: mm/addmm; ``bmm``) and attention from its tiers -- **measured** (the
GPU's own kernels near the shape), **calibrated**, **transfer** (the GPU's measured relatives carried over
by physics) and **spec** (the efficiency learned across every measured GPU). Every other kind (convolutions,
elementwise, norms, ...) keeps the tabular op predictor's answer: the engine's **learned** tier
(``components.opmodel.routing``). Each op row says which tier answered it (``tier``): an engine tier,
``learned`` or ``roofline`` (nothing answered: the speed of light). One engine answers a whole batch per
(family, dtype, GPU), with array work.

Which tier answers a program's GEMM is the one routing's (``routing.data_tiers_answer``), as for an op
question: tensor-dtype GEMMs from the data tiers (``OpEngine.predict``); FP32/FP64 GEMMs from the measured
tier where the GPU's own kernels are near (``routing.measured_answers``, the function ``predict`` asks),
else from ``FP32_FALLBACK``: the data tiers (an op question takes the learned tier there; inside a program
the tabular model is outside its training range on KernelBench's sizes, docs/programs.md "programs14").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# Program-op family -> (engine family, question shape name -> engine dimension name).
ENGINE_DIMS: dict[str, tuple[str, dict[str, str]]] = {
    "linear": ("gemm", {"M": "M", "N": "N", "K": "K"}),
    "bmm": ("gemm", {"B": "B", "M": "M", "N": "N", "K": "K"}),
    "attention": (
        "attention",
        {"B": "B", "seq": "S", "seq_kv": "KV", "heads": "H", "head_dim": "D", "causal": "causal"},
    ),
}
ENGINE_TIERS: tuple[str, ...] = ("measured", "calibrated", "transfer", "spec")
# The program-model op kinds of those families (``ops``: linear -> gemm): inside a program their ops are
# the engine's answers, which stand (the program model learns no factor for them).
ENGINE_KINDS: tuple[str, ...] = ("gemm", "bmm", "attention")
# what answers a program's FP32/FP64 GEMM no measured kernel of the GPU is near: "data" (the engine's data
# tiers) or "learned" (the tabular champion, as an op question): chosen on KernelBench's LOGO training sides
FP32_FALLBACK: str = "data"


def op_engine(predictor: Any) -> Any:
    """The op engine that answers a program's GEMMs and attention beside ``predictor`` (None: the roofline
    was asked for, so nothing learned answers)."""
    if predictor is None or getattr(predictor, "family", "") == "roofline":
        return None
    from components.opmodel.loading import engine_for

    return engine_for(predictor)


def engine_kinds(predictor: Any) -> tuple[str, ...]:
    """The op kinds the op engine beside ``predictor`` answers inside a program (none: no engine with data,
    the roofline basis)."""
    return ENGINE_KINDS if engine_answers(op_engine(predictor)) else ()


def engine_answers(engine: Any) -> bool:
    """Whether ``engine`` answers from data (a measured store or a learned spec model), not only its
    fixed fallback share of the roofline -- a bare engine must not overrule the tabular op predictor."""
    return engine is not None and (engine.measured is not None or engine.spec_model is not None)


def _shape_arrays(rows: pd.DataFrame, dims: dict[str, str]) -> dict[str, np.ndarray] | None:
    shapes = [dict(s) for s in rows["shape"]]
    out: dict[str, np.ndarray] = {}
    for name, dim in dims.items():
        values = [s.get(name) for s in shapes]
        if any(v is None for v in values):
            if name == "causal":
                continue
            return None
        out[dim] = np.asarray(values, dtype="float64")
    if "H" in out:  # the traced SDPA calls carry as many KV heads as query heads
        out["HKV"] = out["H"]
    return out


def engine_times(
    questions: pd.DataFrame, device_ids: Sequence[str], catalog: Any, engine: Any
) -> pd.DataFrame:
    """Per (kernel_id, device_id) the engine's runtime (``engine_us``) and tier (``tier``) for the rows of
    ``questions`` (kernel_id, family, shape -- a tuple of (name, value) --, dtype) in a family it covers;
    empty when the engine has no data to answer from."""
    columns = ["kernel_id", "device_id", "engine_us", "tier", "support"]
    if not engine_answers(engine) or questions.empty:
        return pd.DataFrame(columns=columns)
    parts = []
    covered = questions[questions["family"].isin(list(ENGINE_DIMS))]
    for (family, dtype), rows in covered.groupby(["family", "dtype"], sort=True):
        engine_family, dims = ENGINE_DIMS[str(family)]
        shape = _shape_arrays(rows, dims)
        if shape is None:
            continue
        for device in device_ids:
            if device not in catalog.ids():
                continue
            duration, tier, support = routed_times(
                engine, engine_family, str(dtype), shape, catalog.get(device)
            )
            parts.append(
                pd.DataFrame(
                    {
                        "kernel_id": rows["kernel_id"].to_numpy(),
                        "device_id": device,
                        "engine_us": np.asarray(duration, dtype="float64"),
                        "tier": np.asarray(tier, dtype=object),
                        "support": np.asarray(support, dtype=object),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def routed_times(
    engine: Any, family: str, dtype: str, shape: dict[str, np.ndarray], spec: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(runtime us, tier, support) of one (family, dtype, GPU) batch by the one routing: the data tiers
    where they answer (``routing.data_tiers_answer``); else the measured tier where the GPU's own kernels
    are near (exactly ``predict``'s answer) and ``FP32_FALLBACK`` elsewhere ("data": the data tiers'
    answer; "learned": NaN, so the op predictor's answer stands)."""
    from components.opmodel.routing import data_tiers_answer, measured_answers

    if data_tiers_answer(family, dtype):
        times = engine.predict(family, dtype, shape, spec)
        return times.duration_us, times.tier, times.support
    n = len(next(iter(shape.values())))
    measured = measured_answers(engine, family, dtype, shape, spec)
    if FP32_FALLBACK == "learned":
        duration = np.full(n, np.nan)
        tier, support = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    else:
        times = engine.predict(family, dtype, shape, spec)
        duration, tier, support = times.duration_us, times.tier, times.support
    if measured is None:
        return duration, tier, support
    hit = np.isfinite(measured.duration_us)
    return (
        np.where(hit, measured.duration_us, duration),
        np.where(hit, measured.tier, tier),
        np.where(hit, measured.support, support),
    )


def learned_gemm(family: str, dtype: str) -> bool:
    """Whether a program op of (family, dtype) is a GEMM the one routing gives the learned tier where no
    measured kernel is near (FP32/FP64 ``linear``/``bmm``)."""
    from components.opmodel.routing import data_tiers_answer

    return family in ("linear", "bmm") and not data_tiers_answer(family, dtype)
