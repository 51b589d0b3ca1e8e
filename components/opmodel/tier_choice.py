"""How far a relative carries: the transfer tier's answer for a GPU whose nearest relative is of another
generation, chosen on the training GPUs only.

A relative of the same vendor and architecture (H100 for H200: the same SMs, clocks and pipes, more DRAM
bandwidth) carries over by physics (bf16 GEMM: 5% either way). A relative of another generation (A100 or
H100 for L40S, which has no Ada relative) carries kernel choices the asked GPU may not make: there the
answer is the transfer tier's, the spec tier's, or their geometric blend, per op family, whichever errs
least by inner leave-one-GPU-out over the training GPUs' regimes whose every relative is of another generation
(each answered by the transfer tier from the others, and by a spec model fitted without it: ``spec_without``,
supplied by the caller, who caches the fits). Transfer comes first, then blend, then spec: ties keep the
earlier one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FAR_CHOICES: tuple[str, ...] = ("transfer", "blend", "spec")


def near(x: Any, y: Any) -> bool:
    """Two GPUs of one generation: the same vendor and architecture."""
    return str(x.vendor).lower() == str(y.vendor).lower() and (
        str(x.architecture).lower() == str(y.architecture).lower()
    )


def combine(choice: str, transfer: np.ndarray, spec: np.ndarray) -> np.ndarray:
    """The answer of a far regime under ``choice`` (NaN where the transfer tier has none)."""
    if choice == "spec":
        return np.where(np.isfinite(transfer), spec, np.nan)
    if choice == "blend":
        return np.sqrt(transfer * spec)
    return transfer


def far_group(group: Any, train: list[str], specs: dict[str, Any]) -> bool:
    """A pair group is far when none of its relatives among the other training GPUs is of its GPU's
    generation: as ``TransferTier.far_choice`` decides per regime (H200's int8 GEMMs have A100 and L40S, no
    H100: far, though its bf16 ones have H100)."""
    relatives = {c.device for c in group.carried if c.device in train and c.device != group.target}
    return bool(relatives) and not any(near(specs[group.target], specs[d]) for d in relatives)


def far_targets(groups: list[Any], train: list[str], specs: dict[str, Any]) -> set[str]:
    """The training GPUs with a far pair group (``far_group``)."""
    return {g.target for g in groups if g.target in train and far_group(g, train, specs)}


def choose_far(
    groups: list[Any],
    train: list[str],
    specs: dict[str, Any],
    predict_without: Any,
    spec_without: Any,
) -> dict[str, dict[str, Any]]:
    """Per family: the far choice and its inner scores (mean per-GPU MAPE over the far training GPUs).
    ``predict_without(group, held)``: the transfer tier's answer of a pair group from the training GPUs
    but ``held``; ``spec_without(held)``: the spec model fitted without ``held``."""
    from components.opmodel.engine import OpEngine

    apes: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {}
    for held in sorted(far_targets(groups, train, specs)):
        engine = None
        for g in (
            g for g in groups if g.target == held and g.shape is not None and far_group(g, train, specs)
        ):
            got = predict_without(g, held)
            ok = np.isfinite(got)
            if not ok.any():
                continue
            engine = engine or OpEngine(None, spec_without(held))
            shape = {k: v[ok] for k, v in g.shape.items()}
            base = engine.raw_predict(g.family, g.dtype, shape, specs[held], g.kv).duration_us
            for name in FAR_CHOICES:
                ape = np.abs(combine(name, got[ok], base) - g.actual[ok]) / g.actual[ok]
                apes.setdefault(g.family, {}).setdefault(held, {}).setdefault(name, []).append(ape)
    out = {}
    for family, per_gpu in sorted(apes.items()):
        means = {
            name: float(np.mean([np.concatenate(v[name]).mean() for v in per_gpu.values()]))
            for name in FAR_CHOICES
        }
        best = min(FAR_CHOICES, key=lambda name: (round(means[name], 9), FAR_CHOICES.index(name)))
        out[family] = {"tier": best, **{k: round(v, 4) for k, v in means.items()}, "gpus": sorted(per_gpu)}
    return out
