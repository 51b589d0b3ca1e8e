"""Board power in the transfer tier: a GPU whose board power cannot feed its tensor array at the boost
clock runs its compute-bound kernels at the clock its power cap allows.

MI300X (304 CDNA3 CUs, 750 W) reaches at most 40% of its fp8 peak in aiter's tuned block-scaled GEMMs where
MI308X, the same die with 80 CUs, reaches 55% (70% in plain fp8): carried over from MI308X by the roofline
ratio alone, MI300X's large GEMMs come out 1.4x too fast. Tensor work costs energy per FLOP; a board that
cannot pay ``peak x energy`` watts runs ``peak x energy / tdp`` times slower than its datasheet peak on
compute-bound work. ``energy`` (W per dense 8-bit tensor TFLOP/s, one figure for every GPU) is chosen by
inner leave-one-GPU-out over the training GPUs (``choose_energy``): each is answered from its nearest other
training GPU by plain physics with the cap on both sides, and the figure with the lowest mean per-GPU error
wins; no cap wins ties. Without a capped GPU among the training GPUs nothing shows a cap, and none is
applied. The PipeWeave serving bench learns its own per-design figure from prefills
(``deployments/bench_pipeweave.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.physics import roofline as physics

ENERGY_GRID: tuple[float, ...] = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)  # W per dense 8-bit TFLOP/s


def tensor_peak_tflops(spec: Any) -> float:
    """The GPU's dense tensor peak in 8-bit-equivalent TFLOP/s (fp8 or int8; else twice the 16-bit peak): the
    whole tensor array busy at the boost clock, whatever dtype asks."""
    peaks = getattr(spec, "peak_tflops", None)
    eight = [getattr(peaks, k, None) for k in ("fp8_tensor", "int8_tensor")]
    sixteen = [getattr(peaks, k, None) for k in ("bf16_tensor", "fp16_tensor")]
    return float(max([x for x in eight if x] + [2.0 * x for x in sixteen if x] + [0.0]))


def slowdown(spec: Any, energy: float | None) -> float:
    """How much slower than its datasheet peak the GPU's tensor work runs under its board power (>= 1; 1
    without a learned energy or a board power)."""
    tdp = getattr(spec, "tdp_w", None)
    if not energy or not tdp:
        return 1.0
    return max(1.0, tensor_peak_tflops(spec) * float(energy) / float(tdp))


def capped_us(roof: physics.Roofline, factor: float) -> np.ndarray:
    """The roofline time with its compute part ``factor`` times slower (the memory side unchanged)."""
    return np.maximum(roof.time_us, roof.compute_us * factor)


def carry_factor(
    roof_x: physics.Roofline,
    roof_y: physics.Roofline,
    floors: tuple[float, float],
    slowdowns: tuple[float, float],
) -> np.ndarray:
    """What the power cap changes in a carried answer: the capped ratio over the plain one,
    ``(capped_X + floor_X) / (roof_X + floor_X) * (roof_Y + floor_Y) / (capped_Y + floor_Y)``."""
    fx, fy = floors
    x = (capped_us(roof_x, slowdowns[0]) + fx) / (roof_x.time_us + fx)
    y = (roof_y.time_us + fy) / (capped_us(roof_y, slowdowns[1]) + fy)
    return x * y


def choose_energy(
    groups: list, train: list[str], specs: dict[str, Any], model: Any
) -> tuple[float | None, dict]:
    """The energy per tensor TFLOP/s with the lowest mean per-GPU MAPE when each training GPU is answered from
    its nearest other training GPU (plain physics, the groups' carried answers: fitted without a cap), and the
    scores (``"none"`` and each figure of ``ENERGY_GRID``). No cap wins ties."""
    from components.opmodel.spec import regime

    allowed = set(train)
    pieces: list[tuple[str, np.ndarray, np.ndarray, dict]] = []  # (target, actual, carried, pair physics)
    for g in groups:
        if g.target not in allowed or g.shape is None:
            continue
        near = next((c for c in g.carried if c.device in allowed), None)
        if near is None or not np.isfinite(near.duration_us).any():
            continue
        numeric = {k: v for k, v in g.shape.items() if k != "distribution"}
        x, y = specs[g.target], specs[near.device]
        roofs = tuple(physics.roofline(g.family, g.dtype, numeric, s, g.kv) for s in (x, y))
        floors = tuple(model.floor_of(regime(g.family, g.dtype, s), s) for s in (x, y))
        pieces.append(
            (g.target, g.actual, near.duration_us, {"roofs": roofs, "floors": floors, "specs": (x, y)})
        )
    scores: dict[str, float] = {}
    for energy in (None, *ENERGY_GRID):
        per_gpu: dict[str, list[np.ndarray]] = {}
        for target, actual, carried, pair in pieces:
            factor = carry_factor(
                *pair["roofs"], pair["floors"], tuple(slowdown(s, energy) for s in pair["specs"])
            )
            ape = np.abs(carried * factor / actual - 1.0)
            per_gpu.setdefault(target, []).append(ape[np.isfinite(ape)])
        means = [float(np.mean(np.concatenate(v))) for v in per_gpu.values() if sum(map(len, v))]
        scores["none" if energy is None else f"{energy:g}"] = float(np.mean(means)) if means else float("nan")
    best = min(scores, key=lambda k: (scores[k], k != "none"))
    return (None if best == "none" else float(best)), scores


def apply_energy(groups: list, specs: dict[str, Any], model: Any) -> None:
    """Every carried answer of ``groups`` (carried without a cap) under ``model.tensor_energy`` (in place)."""
    from components.opmodel.spec import regime

    if not model.tensor_energy:
        return
    for g in groups:
        if g.shape is None:
            continue
        numeric = {k: v for k, v in g.shape.items() if k != "distribution"}
        x = specs[g.target]
        roof_x = physics.roofline(g.family, g.dtype, numeric, x, g.kv)
        floor_x = model.floor_of(regime(g.family, g.dtype, x), x)
        for c in g.carried:
            y = specs.get(c.device)
            if y is None:
                continue
            roof_y = physics.roofline(g.family, g.dtype, numeric, y, g.kv)
            floor_y = model.floor_of(regime(g.family, g.dtype, y), y)
            pair = (slowdown(x, model.tensor_energy), slowdown(y, model.tensor_energy))
            c.duration_us = c.duration_us * carry_factor(roof_x, roof_y, (floor_x, floor_y), pair)
