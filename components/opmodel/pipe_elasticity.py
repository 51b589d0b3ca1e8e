"""How much of a pipe's peak difference a regime's kernels realise, in the transfer tier's carried ratio.

The carried ratio reads the compute side at each GPU's datasheet peak of the dtype's pipe: a kernel on a GPU
with 3x the tensor peak is taken to run its math 3x faster. Weight-only MoE kernels do not: W4A16 kernels
dequantize the weights in their main loop and issue the older GPUs' MMA instructions, so Hopper's wider
tensor pipe is not theirs. Measured on the same MoE rows (int4_wo, the roofline's compute-bound rows),
A100 runs 1.8x H100's time where the bf16 peak ratio is 3.2x, L40S 1.8x where it is 2.7x; their bf16 rows
follow the peak ratio (docs/transfer-moe.md, ``benchmarks/moe_pair_ratios.py``).

The elasticity ``a`` of a regime (``family|dtype``) restates the asked GPU's compute side as the relative's
times the peak ratio to the power ``a``: ``compute_X = compute_Y * (peak_Y / peak_X) ** a`` (``a`` = 1: the
roofline's ratio; ``a`` = 0: the relative's math rate carried unchanged). ``a`` is chosen per regime of the
``ELASTIC_FAMILIES`` like the pipe overlap (``pipe_overlap.choose_overlap``): by inner leave-one-GPU-out over
the training GPUs, each answered from its nearest other training GPU by plain physics (with the chosen L2
capacity and overlap); 1 (the roofline) wins ties. Two GPUs of one peak (H100 and H200) are untouched, and
with ``a`` >= 0 a GPU with more peak is never slower. The engine's own roofline is unchanged: only the
carried ratio reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from components.physics import roofline as physics

ELASTIC_FAMILIES: tuple[str, ...] = ("moe",)  # the families whose carried ratio may restate the compute side
ELASTICITY_GRID: tuple[float, ...] = (0.75, 0.5, 0.25)  # a; 1 (the roofline's ratio) is tried first


def restated(
    roof_x: physics.Roofline, roof_y: physics.Roofline, elasticity: float | None
) -> physics.Roofline:
    """``roof_x`` with its compute side the relative's times ``(peak_Y / peak_X) ** elasticity`` (and its
    time the maximum of its sides again); ``roof_x`` itself without an elasticity."""
    if elasticity is None or elasticity == 1.0:
        return roof_x
    if elasticity < 0.0:
        raise ValueError(f"elasticity {elasticity!r}: choose a power of the peak ratio of at least 0")
    scale = (float(roof_y.peak_flops) / float(roof_x.peak_flops)) ** elasticity
    compute = np.asarray(roof_y.compute_us, dtype="float64") * scale
    time = np.maximum.reduce([compute, roof_x.memory_us, roof_x.link_us])
    return dataclasses.replace(roof_x, compute_us=compute, time_us=time)


def choose_elasticity(
    groups: list, train: list[str], specs: dict[str, Any], model: Any
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Per regime (``family|dtype``) of ``ELASTIC_FAMILIES``: the elasticity with the lowest mean per-GPU
    MAPE when each training GPU is answered from its nearest other training GPU by plain physics (the model's
    L2 capacity, overlap and floors), and the scores (``"1"`` and each figure of ``ELASTICITY_GRID``). 1 wins
    ties and is not recorded; a regime without pairs keeps it."""
    from components.opmodel.l2_resident import effective_us, nearest_pieces, pair_capacity

    chosen: dict[str, float] = {}
    every: dict[str, dict[str, float]] = {}
    for family in ELASTIC_FAMILIES:
        overlap = model.overlap.get(family)
        for dtype in sorted({g.dtype for g in groups if g.family == family}):
            pieces = nearest_pieces([g for g in groups if g.dtype == dtype], train, specs, model, family)
            if not pieces:
                continue
            scores: dict[str, float] = {}
            for a in (1.0, *ELASTICITY_GRID):
                per_gpu: dict[str, list[np.ndarray]] = {}
                for target, actual, own, roofs, floors, pair in pieces:
                    both = pair_capacity(model.l2_capacity, pair)
                    asked = (restated(roofs[0], roofs[1], a), roofs[1])
                    base = [
                        effective_us(r, s, both, overlap) + f
                        for r, s, f in zip(asked, pair, floors, strict=True)
                    ]
                    ape = np.abs(own * base[0] / base[1] / actual - 1.0)
                    per_gpu.setdefault(target, []).append(ape[np.isfinite(ape)])
                means = [float(np.mean(np.concatenate(v))) for v in per_gpu.values() if sum(map(len, v))]
                scores[f"{a:g}"] = float(np.mean(means)) if means else np.nan
            best = min(scores, key=lambda k: (round(scores[k], 9), k != "1"))
            key = f"{family}|{dtype}"
            if best != "1":
                chosen[key] = float(best)
            every[key] = {k: round(v, 4) for k, v in scores.items()}
    return chosen, every
