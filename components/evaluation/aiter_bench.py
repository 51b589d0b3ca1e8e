"""The ``aiter-unseen-gpu`` split: MI300X held out of every source, answered from the other GPUs' rows.

The op engine's spec model is fitted on the measured store without MI300X (AIConfigurator's NVIDIA GPUs and
aiter's MI308X) exactly as ``aiconfigurator-unseen-gpu`` fits it for a held-out GPU, and scores MI300X's GEMMs
from its spec sheet: aiter's fp8 block-scaled and int8 GEMMs, and its batched bf16/int8 GEMMs (family ``bmm``
in the store, asked as GEMMs with a batch ``B``). The figures are per dtype (MI300X has no plain bf16 GEMM:
its bf16 rows are the batched ones). Beside the spec tier: the engine as it answers a GPU it never measured
(the transfer tier from MI300X's measured relatives -- MI308X, of its generation, first -- else the spec
tier; ``transfer_bench.held_gpu_scores``, the transfer model fitted on the other GPUs only), with the spec
tier on the same rows (``engine_mape`` / ``engine_spec_mape``).



"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SPLIT = "aiter-unseen-gpu"
HELD = "mi300x"
SIBLING = "mi308x"
FLOOR_US = 3.0  # the sibling rule's per-kernel latency floor
SHAPE = ("B", "M", "N", "K")
PAIR_ROWS = 80  # the transfer fit's rows per (GPU, dtype), as the aiconfigurator-unseen-gpu gate entry


def gemm_with_batches(store: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The store's GEMMs (B = 1) and its batched GEMMs in one frame."""
    parts = [store["gemm"].assign(B=1)] if "gemm" in store else []
    if "bmm" in store:
        parts.append(store["bmm"])
    return (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["device_id", "dtype", *SHAPE])
    )


def shared_shapes(frame: pd.DataFrame, held: str, sibling: str) -> pd.DataFrame:
    """``held``'s rows whose (dtype, shape) ``sibling`` measured too."""
    keys = ["dtype", *SHAPE]
    theirs = frame.loc[frame["device_id"] == sibling, keys].drop_duplicates()
    return frame[frame["device_id"] == held].merge(theirs, on=keys)


def sibling_physics(frame: pd.DataFrame, held_spec: Any, sibling_spec: Any) -> list[dict[str, Any]]:
    """Per dtype: the sibling rule's summed APE on the shapes both GPUs measured (``frame``: GEMMs with B)."""
    from components.physics import roofline as physics

    sibling = frame[frame["device_id"] == sibling_spec.id]
    both = shared_shapes(frame, held_spec.id, sibling_spec.id).merge(
        sibling, on=["dtype", *SHAPE], suffixes=("", "_sib")
    )
    out = []
    for dtype, part in both.groupby("dtype", sort=True):
        shape = {k: part[k].to_numpy(dtype="float64") for k in SHAPE}
        roof_x = physics.roofline("gemm", str(dtype), shape, held_spec).time_us + FLOOR_US
        roof_y = physics.roofline("gemm", str(dtype), shape, sibling_spec).time_us + FLOOR_US
        pred = part["latency_us_sib"].to_numpy(dtype="float64") * roof_x / roof_y
        true = part["latency_us"].to_numpy(dtype="float64")
        out.append(
            {"dtype": str(dtype), "n": len(part), "sum_ape": float(np.sum(np.abs(pred - true) / true))}
        )
    return out


def unseen_mi300x(
    store: dict[str, pd.DataFrame],
    datasets_root: Path | None,
    *,
    train_per_group: int = 1000,
    test_per_group: int | None = 400,
    rounds: int | None = 60,
) -> dict[str, Any]:
    """The spec tier fitted without MI300X scores MI300X's GEMMs (per dtype), beside the roofline and the
    sibling rule from MI308X."""
    from components.devices.catalog import load_catalog
    from components.evaluation.opmodel_bench import _summary, score_held_gpu
    from components.opmodel import spec as spec_tier

    catalog = load_catalog()
    rows = spec_tier.training_rows(store, datasets_root, per_group=train_per_group)
    train = {f: r[r["device_id"] != HELD] for f, r in rows.items()}
    specs = {
        str(d): catalog.get(str(d)) for f in train.values() for d in f["device_id"].unique() if d in catalog
    }
    model = spec_tier.fit(train, specs, **({"rounds": rounds} if rounds else {}))
    gemms = gemm_with_batches(store)
    held = catalog.get(HELD)
    groups = score_held_gpu(model, {"gemm": gemms}, HELD, held, test_per_group)
    out = _summary(groups)
    per_dtype: dict[str, dict[str, Any]] = {}
    for group in groups:
        per_dtype[group["dtype"]] = {
            "mape": group["sum_ape"] / group["n"],
            "roofline_mape": group["sum_roof"] / group["n"],
            "n": group["n"],
        }
        out["metrics"][f"gemm_{group['dtype']}_runtime_mape"] = group["sum_ape"] / group["n"]
    sibling = sibling_physics(gemms, held, catalog.get(SIBLING))
    for group in sibling:
        entry = per_dtype.setdefault(group["dtype"], {})
        entry["sibling_mape"], entry["sibling_n"] = group["sum_ape"] / group["n"], group["n"]
        out["metrics"][f"gemm_{group['dtype']}_sibling_mape"] = group["sum_ape"] / group["n"]
    # the rule from every other measured GPU too (NVIDIA's fp8 block-scaled GEMMs share many shapes)
    for other in sorted(set(map(str, gemms["device_id"])) - {HELD, SIBLING}):
        for group in sibling_physics(gemms, held, catalog.get(other)):
            siblings = per_dtype.setdefault(group["dtype"], {}).setdefault("siblings", {})
            siblings[other] = {"mape": group["sum_ape"] / group["n"], "n": group["n"]}
    # the engine on exactly the shapes the sibling rule answers (uncapped), for a like-for-like comparison
    shared = shared_shapes(gemms, HELD, SIBLING)
    for group in score_held_gpu(model, {"gemm": shared}, HELD, held, None):
        per_dtype[group["dtype"]]["shared_mape"] = group["sum_ape"] / group["n"]
    # the engine (transfer tier, else spec) on MI300X's plain GEMMs (bmm rows have no relative's table)
    from components.evaluation.transfer_bench import held_gpu_scores

    for group in held_gpu_scores(store, HELD, model, test_per_group, PAIR_ROWS)[0]:
        if group["family"] == "gemm":
            entry = per_dtype.setdefault(group["dtype"], {})
            entry["engine_mape"] = group["sum_ape"] / group["n"]
            entry["engine_spec_mape"] = group["sum_spec"] / group["n"]
            entry["engine_n"], entry["transfer_share"] = group["n"], group["transfer_share"]
            out["metrics"][f"gemm_{group['dtype']}_engine_mape"] = entry["engine_mape"]
    # the engine on the plain GEMM shapes the sibling rule answers: the like-for-like comparison (the capped
    # rows are MI300X's at random; MI308X measured 3 of the 400 fp8_block ones, so the two were not compared)
    keys = ["dtype", "M", "N", "K"]
    plain = store["gemm"]
    mine = plain[plain["device_id"] == HELD].merge(
        shared.loc[shared["B"] == 1, keys].drop_duplicates(), on=keys
    )
    on_shared = {**store, "gemm": pd.concat([plain[plain["device_id"] != HELD], mine], ignore_index=True)}
    for group in held_gpu_scores(on_shared, HELD, model, None, PAIR_ROWS)[0]:
        if group["family"] == "gemm" and group["dtype"] in per_dtype:
            per_dtype[group["dtype"]]["engine_shared_mape"] = group["sum_ape"] / group["n"]
            per_dtype[group["dtype"]]["engine_shared_n"] = group["n"]
    out["per_dtype"] = {"gemm": per_dtype}
    out["groups"] = groups
    out["sibling"] = sibling
    out["caps"] = {"train_per_group": train_per_group, "test_per_group": test_per_group}
    out["train_gpus"] = sorted(specs)
    return out
