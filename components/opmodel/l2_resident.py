"""L2-resident working sets in the transfer tier: a memory-bound kernel whose bytes stay in the L2 across the
benchmark's repeats is served at the L2's bandwidth, not the DRAM's.

The carried ratio ``base_X / base_Y`` reads memory-bound rows at the two GPUs' DRAM bandwidths. Where the L2s
differ by class that is wrong for working sets one of them holds: L40S (96 MB of L2 at ~6 TB/s over 864 GB/s
of GDDR6) reaches 1.2-2.6x its DRAM peak on the 8-128 MB GEMMs, decodes and MoE layers of its tables, where
the HBM GPUs (40-50 MB of L2 at 1.6-2.6x their DRAM) stay below theirs; carried from H100 by the DRAM ratio
(3.9x), its rows of that size came out 1.6-2x too slow. H100 <-> H200 (one L2, 1.43x the DRAM) shows it from
the other side: their 8-64 MB GEMMs differ by less than the DRAM ratio.

The model: a share ``h = min(1, capacity x L2 size / bytes)`` of the working set is served from the L2 (all of
it when it fits, the L2's worth otherwise), the rest from DRAM; ``memory = bytes x (h / L2 bandwidth + (1 - h)
/ DRAM bandwidth)``. The L2 bandwidth is the spec sheet's where published, else the GPU's SMs x boost clock x
the bytes per clock per SM of its architecture's published parts (Ada's L40 and L20 for L40S), else of all
published parts. ``capacity`` (the usable share of the L2) is one figure for every GPU, chosen by inner
leave-one-GPU-out over the training GPUs (``choose_capacity``); none (DRAM only, as before) wins ties.
The engine's floor is still the DRAM roofline (``physics.clamp``); ``warm_roof`` sets the warm-L2 one
(``components.physics.l2``) on a roofline, not yet read by the engine (docs/transfer-l2.md, branch
transfer13: measured, it let L40S's carried GEMMs through too fast).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from components.physics import roofline as physics
from components.physics.l2 import warm_memory_us, with_l2

CAPACITY_GRID: tuple[float, ...] = (0.25, 0.5, 1.0)  # usable share of the L2 for a kernel's working set


@lru_cache(maxsize=1)
def _bytes_per_clock_sm() -> tuple[dict[str, float], float]:
    """Per architecture (and over all): the median L2 bytes per clock per SM of the catalog's parts that
    publish their L2 bandwidth (A100 21, H100 36, L40 16 B/clock/SM)."""
    from components.devices.catalog import load_catalog

    per_arch: dict[str, list[float]] = {}
    for spec in load_catalog(user_dir=None).all():
        if spec.l2_gbps and spec.sms and spec.boost_clock_mhz:
            rate = float(spec.l2_gbps) * 1e3 / (float(spec.sms) * float(spec.boost_clock_mhz))
            per_arch.setdefault(str(spec.architecture).lower(), []).append(rate)
    every = [r for rates in per_arch.values() for r in rates]
    return {a: float(np.median(r)) for a, r in per_arch.items()}, float(np.median(every)) if every else 0.0


def l2_bandwidth_bps(spec: Any) -> float | None:
    """The GPU's L2 bandwidth in bytes/s: published, else SMs x clock x its architecture's (else every
    part's) bytes per clock per SM; None without SMs or a clock."""
    published = getattr(spec, "l2_gbps", None)
    if published:
        return float(published) * 1e9
    sms, clock = getattr(spec, "sms", None), getattr(spec, "boost_clock_mhz", None)
    if not sms or not clock:
        return None
    per_arch, every = _bytes_per_clock_sm()
    rate = per_arch.get(str(getattr(spec, "architecture", "")).lower(), every)
    return float(sms) * float(clock) * 1e6 * rate if rate else None


def reads_l2(spec: Any) -> bool:
    """The GPU's L2 is known to outrun its DRAM (its size and bandwidth known, the bandwidth above the
    DRAM's). An estimate at or below the DRAM's says the estimate is wrong for that part (B200 from the
    workstation Blackwell parts' bytes per clock: 4.4 TB/s beside 8 TB/s of HBM3e), not that its L2 is
    slow."""
    l2_bps, dram = l2_bandwidth_bps(spec), getattr(spec, "dram_gbps", None)
    return bool(l2_bps and getattr(spec, "l2_mb", None) and dram and l2_bps > float(dram) * 1e9)


def pair_capacity(capacity: float | None, specs: tuple[Any, Any]) -> float | None:
    """The capacity a carry between two GPUs reads: the L2 on both sides or on neither (a GPU whose L2 is not
    known to outrun its DRAM carries as before, by the DRAM on both sides, whatever its relative's L2)."""
    return capacity if capacity and all(reads_l2(s) for s in specs) else None


def effective_us(
    roof: physics.Roofline, spec: Any, capacity: float | None, overlap: float | None = None
) -> np.ndarray:
    """The roofline time with its memory side served from the L2 for the share of the working set the L2 holds
    (``capacity`` x its size: ``components.physics.l2``); the roofline time itself without a capacity, an L2
    size or an L2 bandwidth. ``overlap``: the compute and memory sides joined by ``pipe_overlap.joined`` (not
    their maximum)."""
    from components.opmodel.pipe_overlap import joined

    if not capacity or not reads_l2(spec) or not roof.peak_bps:
        if overlap is None:
            return roof.time_us
        return np.maximum(joined(roof.compute_us, roof.memory_us, overlap), roof.link_us)
    held = capacity * float(spec.l2_mb) * 1e6
    memory = warm_memory_us(roof.dram_bytes, roof.peak_bps, held, l2_bandwidth_bps(spec))
    return np.maximum(joined(roof.compute_us, memory, overlap), roof.link_us)


def warm_roof(roof: physics.Roofline, spec: Any) -> physics.Roofline:
    """``roof`` with the warm-L2 roofline as its floor (the whole L2 at its bandwidth: no answer beats it)
    where the GPU's L2 is known to outrun its DRAM (``reads_l2``); ``roof`` itself elsewhere."""
    if not reads_l2(spec):
        return roof
    return with_l2(roof, float(spec.l2_mb) * 1e6, l2_bandwidth_bps(spec))


def carry_times(
    t_y: np.ndarray,
    roofs: tuple[physics.Roofline, physics.Roofline],
    specs: tuple[Any, Any],
    floors: tuple[float, float],
    l2_capacity: float | None,
    twins: bool = True,
    overlap: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The relative's time ``t_y`` carried to the asked GPU: (answer, the roofline-ratio answer, twin per
    row). ``t_X = t_Y * base_X / base_Y``, ``base`` the roofline time (its memory side served from the L2
    for the working set it holds: ``effective_us``, with a learned capacity; its two sides joined with the
    family's learned ``overlap``) + the regime's floor."""
    from components.opmodel.transfer import identical_pipe

    (roof_x, roof_y), (spec, other) = roofs, specs
    capacity = pair_capacity(l2_capacity, specs)
    eff_x, eff_y = (effective_us(r, s, capacity, overlap) for r, s in ((roof_x, spec), (roof_y, other)))
    by_ratio = t_y * (eff_x + floors[0]) / (eff_y + floors[1])
    same = identical_pipe(spec, other, roof_x, roof_y) & twins
    # a twin: only the roofline time differs (DRAM), its time beyond the roofline (fixed costs, waves,
    # the kernel's own inefficiency) is the same kernel's on the same SMs: carried as is. On H100 <-> H200
    # memory-bound GEMMs this errs less than the ratio with the floor (bf16 7.3 -> 5.0%, fp8 10.1 -> 7.3%
    # from H200; 6.4 -> 5.5, 9.2 -> 8.1 from H100). A row faster than its roofline (L2-resident) keeps
    # the ratio
    beyond = same & (t_y >= eff_y)
    return np.where(beyond, t_y + eff_x - eff_y, by_ratio), by_ratio, same


def choose_capacity(
    groups: list, train: list[str], specs: dict[str, Any], model: Any
) -> tuple[float | None, dict[str, float]]:
    """The usable L2 share with the lowest mean per-GPU MAPE when each training GPU is answered from its
    nearest other training GPU by plain physics (the roofline ratio with the floors) with the L2 on both
    sides (``pair_capacity``), and the scores (``"none"`` and each figure of ``CAPACITY_GRID``). None wins
    ties."""
    pieces = nearest_pieces(groups, train, specs, model)
    scores: dict[str, float] = {}
    for capacity in (None, *CAPACITY_GRID):
        per_gpu: dict[str, list[np.ndarray]] = {}
        for target, actual, own, roofs, floors, pair in pieces:
            both = pair_capacity(capacity, pair)
            base = [effective_us(r, s, both) + f for r, s, f in zip(roofs, pair, floors, strict=True)]
            ape = np.abs(own * base[0] / base[1] / actual - 1.0)
            per_gpu.setdefault(target, []).append(ape[np.isfinite(ape)])
        means = [float(np.mean(np.concatenate(v))) for v in per_gpu.values() if sum(map(len, v))]
        scores["none" if capacity is None else f"{capacity:g}"] = float(np.mean(means)) if means else np.nan
    best = min(scores, key=lambda k: (round(scores[k], 9), k != "none"))
    return (None if best == "none" else float(best)), {k: round(v, 4) for k, v in scores.items()}


def nearest_pieces(
    groups: list, train: list[str], specs: dict[str, Any], model: Any, family: str | None = None
) -> list[tuple]:
    """Each training GPU's pair groups (of ``family``, else all) with its nearest other training GPU that
    answers: (target, actual, that relative's own time, the two roofs, the two floors, the two specs), what
    a plain-physics carry between them needs (``choose_capacity``, ``pipe_overlap.choose_overlap``)."""
    from components.opmodel.spec import regime

    allowed = set(train)
    pieces = []
    for g in groups:
        if g.target not in allowed or g.shape is None or (family and g.family != family):
            continue
        near = next((c for c in g.carried if c.device in allowed), None)
        if near is None or near.own_us is None or not np.isfinite(near.own_us).any():
            continue
        numeric = {k: v for k, v in g.shape.items() if k != "distribution"}
        pair = (specs[g.target], specs[near.device])
        roofs = tuple(physics.roofline(g.family, g.dtype, numeric, s, g.kv) for s in pair)
        floors = tuple(model.floor_of(regime(g.family, g.dtype, s), s) for s in pair)
        pieces.append((g.target, g.actual, near.own_us, roofs, floors, pair))
    return pieces
