"""The ``aiter-unseen-gpu`` split: MI300X held out of every source, scored per dtype beside the roofline and
the sibling-physics rule from MI308X; real tables (H100 GEMMs of one vLLM version, aiter's MI300X and MI308X
GEMMs) symlinked into a datasets folder under tmp_path, small caps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
TABLES = (
    (
        "aiconfigurator",
        "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet",
    ),
    ("aiter", "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv"),  # MI300X fp8_block
    (
        "aiter",
        "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv",
    ),  # MI308X fp8_block
    ("aiter", "aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv"),  # int8 on both
    ("aiter", "aiter/configs/bf16_tuned_batched_gemm.csv"),  # MI300X batched bf16
)
CAPS = {"train_per_group": 300, "test_per_group": 100, "rounds": 20}


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from components.opmodel.store import build_store

    root = tmp_path_factory.mktemp("datasets")
    for source, rel in TABLES:
        if not (DATASETS / source / rel).is_file():
            pytest.skip(f"{source} tables not present")
        (root / source / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / source / rel).symlink_to(DATASETS / source / rel)
    build_store(root, root / "store", families=("gemm", "bmm"))
    return root / "store"


def test_sibling_rule_is_the_roofline_ratio_on_shared_shapes() -> None:
    from components.devices import load_catalog
    from components.evaluation.aiter_bench import FLOOR_US, sibling_physics
    from components.physics import roofline as physics

    catalog = load_catalog(user_dir=None)
    x, y = catalog.get("mi300x"), catalog.get("mi308x")
    shape = {"B": np.array([1.0, 1.0]), "M": np.array([64.0, 4096.0]), "N": 7168.0, "K": 2048.0}
    ratio = (physics.roofline("gemm", "fp8", shape, x).time_us + FLOOR_US) / (
        physics.roofline("gemm", "fp8", shape, y).time_us + FLOOR_US
    )
    sibling_us = np.array([20.0, 300.0])
    frame = pd.DataFrame(
        {
            "device_id": ["mi308x", "mi308x", "mi300x", "mi300x", "mi300x"],
            "dtype": "fp8",
            "B": 1,
            "M": [64, 4096, 64, 4096, 128],  # M = 128: MI300X alone, not a shared shape
            "N": 7168,
            "K": 2048,
            "latency_us": [*sibling_us, *(sibling_us * ratio * [1.0, 1.1]), 50.0],
        }
    )
    (group,) = sibling_physics(frame, x, y)
    assert group["dtype"] == "fp8" and group["n"] == 2
    assert group["sum_ape"] == pytest.approx(abs(1 / 1.1 - 1))  # exact on the first, 10% high on the second


def test_mi300x_is_held_out_and_scored_per_dtype(store_dir: Path) -> None:
    from components.evaluation.aiter_bench import unseen_mi300x
    from components.opmodel.store import load_store

    store = load_store(store_dir)
    result = unseen_mi300x(store, None, **CAPS)
    assert "mi300x" not in result["train_gpus"] and {"mi308x", "h100-sxm"} <= set(result["train_gpus"])
    per = result["per_dtype"]["gemm"]
    assert set(per) == {"fp8_block", "int8", "bf16"}
    assert per["bf16"]["n"] == 26 and per["fp8_block"]["n"] == 100  # the batched bf16 GEMMs; the cap
    gemm = pd.concat([store["gemm"].assign(B=1), store["bmm"]])
    mi300x, mi308x = (gemm[gemm["device_id"] == d] for d in ("mi300x", "mi308x"))
    shared = mi300x.merge(mi308x, on=["dtype", "B", "M", "N", "K"])
    for dtype, part in shared.groupby("dtype"):
        assert per[dtype]["sibling_n"] == len(part)
        assert 0 < per[dtype]["sibling_mape"] < 5 and 0 < per[dtype]["shared_mape"] < 5
        # the engine on the same shapes (plain GEMMs: the batched ones have no relative's table)
        plain = int((part["B"] == 1).sum())
        assert per[dtype].get("engine_shared_n", 0) == plain and (
            not plain or per[dtype]["engine_shared_mape"] > 0
        )
    for entry in per.values():
        assert 0 < entry["mape"] < 5 and 0 < entry["roofline_mape"] < 1
    # the rule from the NVIDIA GPU: on the shapes both measured (DeepSeek-V3's fp8 block-scaled GEMMs)
    h100 = gemm[gemm["device_id"] == "h100-sxm"].merge(mi300x, on=["dtype", "B", "M", "N", "K"])
    for dtype, entry in per.items():
        n = int((h100["dtype"] == dtype).sum())
        assert entry.get("siblings", {}).get("h100-sxm", {}).get("n", 0) == n
    assert (
        per["fp8_block"]["siblings"]["h100-sxm"]["n"] > 0
        and per["fp8_block"]["siblings"]["h100-sxm"]["mape"] > 0
    )


def test_gate_entry_and_bench_rows_carry_the_sibling_baseline(store_dir: Path) -> None:
    from components.evaluation.opmodel_bench import (
        ENGINE_FAMILY,
        ROOFLINE_FAMILY,
        SIBLING_FAMILY,
        bench_rows,
        gate_entry,
    )

    entry = gate_entry("aiter-unseen-gpu", store_dir, None, CAPS)
    assert entry["status"] == "ok" and entry["folds"] == ["mi300x"]
    rows = {(r["family"], r["scope"]): r for r in bench_rows("aiter-unseen-gpu", entry)}
    per = entry["report"]["per_dtype"]["gemm"]
    assert rows[(ENGINE_FAMILY, "op=gemm,dtype=fp8_block")]["ours"] == round(per["fp8_block"]["mape"], 4)
    assert (ROOFLINE_FAMILY, "op=gemm,dtype=bf16") in rows
    sibling = rows[(SIBLING_FAMILY, "op=gemm,dtype=fp8_block,shared shapes")]
    assert sibling["ours"] == round(per["fp8_block"]["sibling_mape"], 4) and sibling["n"] > 0
    engine = rows[(ENGINE_FAMILY, "op=gemm,dtype=fp8_block,shared shapes")]
    assert engine["ours"] == round(per["fp8_block"]["engine_shared_mape"], 4)
