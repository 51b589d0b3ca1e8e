"""A memory-bound kernel's time beyond its roofline, carried as cycles rather than by the roofline ratio.

The carried ratio ``t_X = t_Y * base_X / base_Y`` scales the whole of a relative's time, its streaming at the
DRAM (or L2) and its fixed costs alike, by the ratio of the two GPUs' memory times. A decode attention
kernel's fixed costs (launch, the split-KV reduction, the softmax's passes, the tail wave's sync) are a count
of cycles on the SMs, not bytes: carried by the DRAM ratio they are inflated on a GPU with slower memory and
shrunk on one with faster memory. Here, on the rows the relative's roofline calls memory-bound, the time
beyond the relative's (L2-aware) roofline is carried at the ratio of the two boost clocks, as the twins' time
beyond the roofline is carried unchanged (``l2_resident.carry_times``) and the latency floors are paid per
cycle (``TransferModel.floor_of``):

    t_X = eff_X + (t_Y - eff_Y) * clock_Y / clock_X        (memory-bound on Y, t_Y >= eff_Y)

A row faster than its roofline (L2-resident beyond the model's share) keeps the ratio. Never below the
asked GPU's roofline; more memory bandwidth (a smaller ``eff_X``) is never slower.

Whether a family carries so is chosen by inner leave-one-GPU-out over the training GPUs, as the L2's usable
share and the pipes' overlap are (each training GPU answered from its nearest other training GPU; the ratio
wins ties): ``choose_beyond``. Measured on ``aiconfigurator-unseen-gpu``: docs/transfer-tier.md (branch
attn17).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BEYOND_FAMILIES: tuple[str, ...] = ("attention",)  # the families whose carry may hold cycles beyond the roof


def clock_ratio(x: Any, y: Any) -> float | None:
    """``clock_Y / clock_X`` (boost clocks), None where either GPU has none."""
    cx, cy = getattr(x, "boost_clock_mhz", None), getattr(y, "boost_clock_mhz", None)
    if not cx or not cy:
        return None
    return float(cy) / float(cx)


def beyond_at_clock(
    t_y: np.ndarray,
    by_ratio: np.ndarray,
    effs: tuple[np.ndarray, np.ndarray],
    memory_bound: np.ndarray,
    ratio: float | None,
) -> np.ndarray:
    """``by_ratio`` with its memory-bound rows (on the relative) whose time is at or above the relative's
    roofline ``effs[1]`` carried as ``effs[0] + (t_Y - effs[1]) * ratio`` (``ratio``: ``clock_ratio``; None:
    ``by_ratio`` unchanged)."""
    if ratio is None:
        return by_ratio
    eff_x, eff_y = effs
    beyond = np.asarray(t_y, dtype="float64") - eff_y
    rows = np.asarray(memory_bound, bool) & (beyond >= 0)
    return np.where(rows, eff_x + beyond * ratio, by_ratio)


def choose_beyond(
    groups: list, train: list[str], specs: dict[str, Any], model: Any
) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The families of ``BEYOND_FAMILIES`` whose carry holds the cycles beyond the roofline: those where it
    has the lower mean per-GPU MAPE when each training GPU is answered from its nearest other training GPU
    by plain physics (``l2_resident.carry_times`` with the model's L2 share, overlap and twins), and the
    scores (``"ratio"``, ``"cycles"``). The ratio wins ties; a family without pairs keeps it."""
    from components.opmodel.l2_resident import carry_times, nearest_pieces

    chosen: list[str] = []
    every: dict[str, dict[str, float]] = {}
    for family in BEYOND_FAMILIES:
        pieces = nearest_pieces(groups, train, specs, model, family)
        if not pieces:
            continue
        scores: dict[str, float] = {}
        for name, flag in (("ratio", False), ("cycles", True)):
            per_gpu: dict[str, list[np.ndarray]] = {}
            for target, actual, own, roofs, floors, pair in pieces:
                carry = (model.l2_capacity, True, model.overlap.get(family), flag)
                got = carry_times(own, roofs, pair, floors, *carry)[0]
                ape = np.abs(got / actual - 1.0)
                per_gpu.setdefault(target, []).append(ape[np.isfinite(ape)])
            means = [float(np.mean(np.concatenate(v))) for v in per_gpu.values() if sum(map(len, v))]
            scores[name] = float(np.mean(means)) if means else np.nan
        if scores["cycles"] < scores["ratio"] - 1e-9:
            chosen.append(family)
        every[family] = {k: round(v, 4) for k, v in scores.items()}
    return chosen, every
