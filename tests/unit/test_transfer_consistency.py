"""A GPU whose table of a regime measured another kernel than its relatives' (H100's int8_wo GEMMs: SGLang
where the others ran TensorRT-LLM's plugin) is set apart as a relative of that regime, and only it: synthetic
pair groups whose carried errors are known."""

from __future__ import annotations

import numpy as np


def _groups(odd_factor: float, gpus=("a", "b", "c")):
    from components.opmodel.transfer import Carried
    from components.opmodel.transfer_fit import PairGroup

    rng = np.random.default_rng(0)
    actual = np.linspace(10.0, 100.0, 40)
    out = []
    for regime in ("bf16", "int8_wo"):
        for target in gpus:
            carried = []
            for device in gpus:
                if device == target:
                    continue
                noise = np.exp(rng.normal(0.0, 0.03, len(actual)))
                odd = regime == "int8_wo" and "b" in (target, device)
                factor = (odd_factor if target == "b" else 1.0 / odd_factor) if odd else 1.0
                duration = actual / factor * noise
                carried.append(Carried(device, 1.0, duration, np.zeros(40, bool), np.zeros((40, 5))))
            out.append(PairGroup(target, "gemm", actual, carried, regime))
    return out


def test_the_gpu_that_disagrees_with_every_other_in_a_regime_is_set_apart() -> None:
    from components.opmodel.transfer_fit import inconsistent_relatives

    assert inconsistent_relatives(_groups(2.0), {"a", "b", "c"}) == {"gemm|int8_wo": ["b"]}


def test_small_disagreements_and_two_gpu_regimes_set_nothing_apart() -> None:
    from components.opmodel.transfer_fit import inconsistent_relatives

    assert inconsistent_relatives(_groups(1.15), {"a", "b", "c"}) == {}
    # with two GPUs of the regime there is no telling which table is the odd one
    assert inconsistent_relatives(_groups(2.0, ("a", "b")), {"a", "b"}) == {}


def test_a_set_apart_gpu_is_no_relative_of_the_regime_in_the_engine(tmp_path) -> None:
    import pandas as pd

    from components.devices.catalog import load_catalog
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer import TransferModel, TransferTier

    devices = ("a100-sxm4-80gb", "h100-sxm", "l40s")
    rows = pd.DataFrame(
        [(d, "int8_wo", m, 4096, 4096, 20.0 + m / 10) for d in devices for m in (1, 16, 256)],
        columns=["device_id", "dtype", "M", "N", "K", "latency_us"],
    )
    store = MeasuredTier({"gemm": rows}, {d: load_catalog().get(d) for d in devices})
    model = TransferModel(inconsistent={"gemm|int8_wo": ["h100-sxm"]})
    model.save(tmp_path)
    loaded = TransferModel.load(tmp_path)
    asked = load_catalog().get("h200")
    found = [d for d, _ in TransferTier(store, None, loaded).relatives("gemm", "int8_wo", None, asked)]
    assert found and "h100-sxm" not in found
    assert "h100-sxm" in [
        d for d, _ in TransferTier(store, None, None).relatives("gemm", "int8_wo", None, asked)
    ]


def test_a_memo_shared_across_folds_fits_what_fresh_fits_do() -> None:
    """The leave-one-GPU-out bench keeps sampled rows, curve tables, the pairs' relative answers and each
    GPU's achievable shares across its folds: every fold's model must be the one a fresh fit gives
    (synthetic bf16 GEMMs and MoE curves following known physics)."""
    import pandas as pd

    from components.devices.catalog import load_catalog
    from components.opmodel.measured import MeasuredTier
    from components.opmodel.transfer_fit import fit_transfer
    from components.physics import roofline as physics

    catalog = load_catalog()
    gpus = ("a100-sxm4-80gb", "h100-sxm", "h200", "l40s")
    gemm, moe = [], []
    sizes = 2.0 ** np.arange(0, 12)
    for i, device in enumerate(gpus):
        spec = catalog.get(device)
        m, n = np.meshgrid(sizes, (1024.0, 4096.0), indexing="ij")
        shape = {"M": m.ravel(), "N": n.ravel(), "K": np.full(m.size, 2048.0)}
        t = (physics.roofline("gemm", "bf16", shape, spec).time_us + 4.0) * (1.2 + 0.05 * i)
        gemm.append(pd.DataFrame({"device_id": device, "dtype": "bf16", **shape, "latency_us": t}))
        dims = {"T": sizes, "E": 64.0, "topk": 8.0, "H": 4096.0, "I": 1536.0, "tp": 1.0, "ep": 1.0}
        t = (physics.roofline("moe", "bf16", dims, spec).time_us + 8.0) * (1.5 + 0.1 * i)
        moe.append(pd.DataFrame({"device_id": device, "dtype": "bf16", **dims, "latency_us": t}))
    spread = {"n_repeats": 1}  # the store's repeat columns: one measurement per kernel
    store = {
        "gemm": pd.concat(gemm, ignore_index=True).assign(**spread),
        "moe": pd.concat(moe, ignore_index=True).assign(distribution="balanced", **spread),
    }
    for frame in store.values():
        frame["latency_min_us"] = frame["latency_max_us"] = frame["latency_us"]
    full = MeasuredTier({"gemm": store["gemm"]}, {d: catalog.get(d) for d in gpus})
    memo: dict = {}
    kept = []  # the pairs' relative answers the memo holds after each fold
    for held in gpus:
        train = {f: v[v["device_id"] != held] for f, v in store.items()}
        devices = [d for d in gpus if d != held]
        shared = fit_transfer(full.without(held), train, devices, 40, memo=memo)
        fresh = fit_transfer(full.without(held), train, devices, 40)
        assert shared.settings == fresh.settings and shared.floors == fresh.floors
        assert shared.relative_error == fresh.relative_error and shared.achievable == fresh.achievable
        assert shared.meta["inner_scores"] == fresh.meta["inner_scores"]
        assert shared.meta["l2_scores"] == fresh.meta["l2_scores"] and shared.overlap == fresh.overlap
        assert shared.meta["overlap_scores"] == fresh.meta["overlap_scores"]
        assert shared.corrections == fresh.corrections and shared.intervals == fresh.intervals
        kept.append(len(memo["pair_answers"]["answers"]))
    assert memo["curve_tables"]  # the MoE curves were built once and kept
    # every pair of the last fold (its three GPUs) was asked in an earlier fold: none answered again
    assert 0 < kept[0] < kept[-2] == kept[-1]
    assert memo["peak_shares"]  # each GPU's achievable shares, once
