"""Training-side score of GEMM carry variants (docs/transfer-provenance.md): per outer fold of
``aiconfigurator-unseen-gpu`` (its held-out GPU never read), each training GPU's GEMM rows answered from its
nearest other training GPU (per dtype) by plain physics, ``t_X = t_Y * (roof_X + floor_X) / (roof_Y +
floor_Y)``, the roof's memory side with the L2 share; mean per-GPU MAPE. Variants change the compute side:

- ``clock θ``: the tensor pipe at a sustained clock ``base + θ (boost - base)`` instead of the clock its peak
  is stated at (a board that cannot hold its boost under a tensor load);
- ``tile T``: wave quantisation of a T x T output tile grid over the SMs,
  ``ceil(tiles / SMs) / (tiles / SMs)``.

    PYTHONPATH=. KERNELCAST_HOME=... python benchmarks/gemm_carry_variants.py STORE [ROWS_PER_DTYPE]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

OUTER = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
TENSOR_CLOCK_MHZ = {"h100-sxm": 1830.0, "h200": 1830.0}  # the clock their datasheet tensor peaks are at
VARIANTS: dict[str, dict[str, float]] = {
    "physics": {},
    "clock 0.75": {"theta": 0.75},
    "clock 0.5": {"theta": 0.5},
    "tile 128": {"tile": 128},
    "tile 256": {"tile": 256},
}


def pair_rows(store_dir: Path, per_dtype: int) -> pd.DataFrame:
    """Every (target, relative) GEMM pair row of the store: the target's time, the relative's own answer
    near its kernels, both roofline sides and floors."""
    from components.devices.catalog import load_catalog
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.spec import latency_floors, regime
    from components.opmodel.store import load_store
    from components.opmodel.transfer import TransferModel, TransferTier
    from components.opmodel.transfer_fit import at_clock, device_rows, pair_groups, reference_clock
    from components.physics import roofline as physics

    store = load_store(store_dir, ("gemm",))
    devices = sorted(map(str, store["gemm"]["device_id"].unique()))
    specs = {d: load_catalog().get(d) for d in devices}
    model = TransferModel(floor_clock_mhz=reference_clock(specs))
    rows = pd.concat([device_rows("gemm", store["gemm"], d, 3000, "floor", None) for d in devices])
    model.floors = latency_floors("gemm", at_clock(rows, specs, model.floor_clock_mhz), specs)
    tier = TransferTier(MeasuredTier(store, specs), None, model, None, hold=False)
    out = []
    for g in pair_groups(tier, store, devices, per_dtype, relatives=set(devices)):
        x = specs[g.target]
        roof_x = physics.roofline("gemm", g.dtype, g.shape, x, None)
        for c in g.carried:
            y = specs[c.device]
            roof_y = physics.roofline("gemm", g.dtype, g.shape, y, None)
            out.append(
                pd.DataFrame(
                    {
                        "target": g.target,
                        "relative": c.device,
                        "dtype": g.dtype,
                        "distance": c.distance,
                        **{k: g.shape[k] for k in ("M", "N", "K")},
                        "actual": g.actual,
                        "own": c.own_us,
                        "cx": roof_x.compute_us,
                        "mx": roof_x.memory_us,
                        "cy": roof_y.compute_us,
                        "my": roof_y.memory_us,
                        "bytes": roof_x.dram_bytes,
                        "fx": model.floor_of(regime("gemm", g.dtype, x), x),
                        "fy": model.floor_of(regime("gemm", g.dtype, y), y),
                    }
                )
            )
    frame = pd.concat(out, ignore_index=True)
    return frame[np.isfinite(frame["own"])]


def side_us(p: pd.DataFrame, who: str, theta: float | None, tile: float | None, l2: float | None):
    """(compute, memory) of one side (``x`` the target, ``y`` the relative) under a variant."""
    from components.devices.catalog import load_catalog
    from components.opmodel.l2_resident import l2_bandwidth_bps, reads_l2
    from components.physics.l2 import warm_memory_us

    device = p["target" if who == "x" else "relative"].iloc[0]
    spec = load_catalog().get(device)
    compute, memory = p[f"c{who}"].to_numpy(), p[f"m{who}"].to_numpy()
    if theta is not None and spec.base_clock_mhz:
        stated = TENSOR_CLOCK_MHZ.get(device, spec.boost_clock_mhz)
        held = spec.base_clock_mhz + theta * (spec.boost_clock_mhz - spec.base_clock_mhz)
        compute = compute * max(1.0, stated / held)
    if tile is not None:
        tiles = np.ceil(p["M"].to_numpy() / tile) * np.ceil(p["N"].to_numpy() / tile)
        compute = compute * np.ceil(tiles / spec.sms) / (tiles / spec.sms)
    if l2 is not None and reads_l2(spec):
        memory = warm_memory_us(
            p["bytes"].to_numpy(), spec.dram_gbps * 1e9, l2 * spec.l2_mb * 1e6, l2_bandwidth_bps(spec)
        )
    return compute, memory


def score(rows: pd.DataFrame, train: list[str], l2: float | None, **variant: float) -> float:
    """Mean per-GPU MAPE of each training GPU answered from its nearest other training GPU."""
    from components.devices.catalog import load_catalog
    from components.opmodel.l2_resident import reads_l2

    per_gpu: dict[str, list[np.ndarray]] = {}
    inside = rows[rows["target"].isin(train) & rows["relative"].isin(train)]
    for (target, _), g in inside.groupby(["target", "dtype"]):
        relative = g.sort_values(["distance", "relative"])["relative"].iloc[0]
        p = g[g["relative"] == relative]
        both = l2 if all(reads_l2(load_catalog().get(d)) for d in (target, relative)) else None
        cx, mx = side_us(p, "x", variant.get("theta"), variant.get("tile"), both)
        cy, my = side_us(p, "y", variant.get("theta"), variant.get("tile"), both)
        carried = p["own"] * (np.maximum(cx, mx) + p["fx"]) / (np.maximum(cy, my) + p["fy"])
        per_gpu.setdefault(target, []).append(np.abs(carried / p["actual"] - 1.0).to_numpy())
    return float(np.mean([np.concatenate(v).mean() for v in per_gpu.values()]))


def main(store_dir: str, per_dtype: str = "400") -> None:
    rows = pair_rows(Path(store_dir), int(per_dtype))
    for l2 in (None, 0.5, 1.0):
        for held in OUTER:
            train = sorted(set(rows["target"]) - {held})
            scores = {name: score(rows, train, l2, **v) for name, v in VARIANTS.items()}
            print(f"L2 {l2} without {held}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))


if __name__ == "__main__":
    main(*sys.argv[1:])
