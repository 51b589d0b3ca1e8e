"""How far a kernel hides its math behind its memory traffic, in the transfer tier's carried ratio.

The roofline takes ``max(compute, memory)``: a kernel that overlaps its two pipes perfectly. A fused MoE
kernel does not: each touched expert's weights stream through a few routed rows, so its time grows with its
math well before the roofline turns compute-bound. Measured, the MoE time ratio of A100 to H100 (bf16, the
same shapes) climbs from 1.4x at under one token per expert to 2.1x at 8-32 and 2.6x at 32-128, where the
roofline holds the DRAM ratio (1.6x) until its ridge (150-300 tokens per expert) and then jumps to the
tensor-peak ratio (3.2x). Joining the two sides as a p-norm, ``(compute^p + memory^p)^(1/p)``, turns that
step into a slope: ``p`` = 1 adds them (no overlap), a large ``p`` is the roofline's maximum.

``p`` is one figure per family (``OVERLAP_FAMILIES``), chosen like the L2's usable share
(``l2_resident.choose_capacity``): by inner leave-one-GPU-out over the training GPUs, each answered from its
nearest other training GPU by plain physics; the roofline's maximum (None) wins ties. The engine's physics is
unchanged (a joined time is never below the roofline's maximum): only the carried ratio reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

OVERLAP_FAMILIES: tuple[str, ...] = ("moe",)  # the families whose carried ratio may join the two sides
OVERLAP_GRID: tuple[float, ...] = (4.0, 2.0, 1.0)  # p of the p-norm; None (the maximum) is tried first


def joined(compute_us: np.ndarray, memory_us: np.ndarray, overlap: float | None) -> np.ndarray:
    """``max(compute, memory)`` without an overlap, else their p-norm (``overlap`` = p >= 1): at or above the
    maximum, at most their sum."""
    c = np.asarray(compute_us, dtype="float64")
    m = np.asarray(memory_us, dtype="float64")
    top = np.maximum(c, m)
    if overlap is None:
        return top
    if overlap < 1.0:
        raise ValueError(f"overlap {overlap!r}: choose a p-norm exponent of at least 1")
    scale = np.where(top > 0, top, 1.0)
    return scale * ((c / scale) ** overlap + (m / scale) ** overlap) ** (1.0 / overlap)


def choose_overlap(
    groups: list, train: list[str], specs: dict[str, Any], model: Any
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Per family of ``OVERLAP_FAMILIES``: the p with the lowest mean per-GPU MAPE when each training GPU is
    answered from its nearest other training GPU by plain physics (the ratio of the two bases, the model's
    L2 capacity and floors), and the scores (``"max"`` and each figure of ``OVERLAP_GRID``). The maximum
    wins ties; a family without pairs keeps it."""
    from components.opmodel.l2_resident import effective_us, nearest_pieces, pair_capacity

    chosen: dict[str, float] = {}
    every: dict[str, dict[str, float]] = {}
    for family in OVERLAP_FAMILIES:
        pieces = nearest_pieces(groups, train, specs, model, family)
        if not pieces:
            continue
        scores: dict[str, float] = {}
        for p in (None, *OVERLAP_GRID):
            per_gpu: dict[str, list[np.ndarray]] = {}
            for target, actual, own, roofs, floors, pair in pieces:
                both = pair_capacity(model.l2_capacity, pair)
                base = [effective_us(r, s, both, p) + f for r, s, f in zip(roofs, pair, floors, strict=True)]
                ape = np.abs(own * base[0] / base[1] / actual - 1.0)
                per_gpu.setdefault(target, []).append(ape[np.isfinite(ape)])
            means = [float(np.mean(np.concatenate(v))) for v in per_gpu.values() if sum(map(len, v))]
            scores["max" if p is None else f"{p:g}"] = float(np.mean(means)) if means else np.nan
        best = min(scores, key=lambda k: (round(scores[k], 9), k != "max"))
        if best != "max":
            chosen[family] = float(best)
        every[family] = {k: round(v, 4) for k, v in scores.items()}
    return chosen, every
