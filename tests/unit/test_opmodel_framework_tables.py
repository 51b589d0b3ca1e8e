"""The op engine answering for one serving framework (``components.opmodel.framework_tables``): the store
keeps each framework's repeats apart beside the pooled table, a framework's engine answers a GPU from that
framework's own measured kernels where it measured them and from the pooled table elsewhere (and says
which), and a GPU held out of the tier stays out under every framework."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.unit.test_opmodel_transfer import _model, synthetic_gemm

GPUS = ("h100-sxm", "h200")
SLOWER = {"vllm": 1.5, "trtllm": 1.0}  # vLLM's kernels measured 1.5x TensorRT-LLM's


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def _raw(catalog) -> pd.DataFrame:
    """AIConfigurator-like rows: every kernel measured by both frameworks (two vllm versions), except that
    vllm measured nothing on the H200."""
    base = synthetic_gemm(catalog, 0.0, GPUS)[["device_id", "dtype", "M", "N", "K", "latency_us"]]
    parts = []
    for framework, factor in SLOWER.items():
        for version in ("0.1", "0.2") if framework == "vllm" else ("1.0",):
            rows = base if framework != "vllm" else base[base["device_id"] == "h100-sxm"]
            parts.append(
                rows.assign(
                    latency_us=rows["latency_us"] * factor,
                    framework={"vllm": "VLLM", "trtllm": "TRTLLM"}[framework],  # as the tables spell them
                    version=version,
                    kernel_source=f"{framework}-kernel",
                )
            )
    return pd.concat(parts, ignore_index=True)


def _store(catalog, folder: Path) -> pd.DataFrame:
    from components.ingest.aiconfigurator import medians
    from components.opmodel.store import FRAMEWORK_DIR, framework_medians, save_store, store_keys

    raw = _raw(catalog)
    keys = store_keys("gemm")
    pooled = medians(raw, keys).sort_values(keys, kind="mergesort").reset_index(drop=True)
    save_store({"gemm": pooled, f"{FRAMEWORK_DIR}/gemm": framework_medians(raw, keys)}, folder)
    return raw


def test_the_store_keeps_each_frameworks_repeats_apart_and_names_their_versions(catalog, tmp_path) -> None:
    from components.opmodel.store import load_framework_rows, load_store

    raw = _store(catalog, tmp_path / "store")
    vllm = load_framework_rows(tmp_path / "store", "gemm", "vllm")
    trt = load_framework_rows(tmp_path / "store", "gemm", "trtllm")
    n_kernels = len(raw[raw["framework"] == "TRTLLM"])  # trtllm measured each kernel once
    assert len(trt) == n_kernels and set(trt["device_id"]) == set(GPUS)
    assert set(vllm["device_id"]) == {"h100-sxm"} and (vllm["n_repeats"] == 2).all()  # two versions folded
    pooled = load_store(tmp_path / "store", ("gemm",))["gemm"]
    assert len(pooled) == n_kernels  # the pooled table is unchanged: one row per kernel
    assert load_framework_rows(tmp_path / "store", "gemm", "sglang").empty
    assert load_framework_rows(tmp_path / "nothing", "gemm", "vllm") is None


@pytest.mark.parametrize("split", [False, True])
def test_a_framework_engine_answers_from_its_own_kernels_else_the_pooled_ones(
    catalog, tmp_path, split
) -> None:
    from components.deployments.ops import engine_op_time
    from components.opmodel.engine import OpEngine

    raw = _store(catalog, tmp_path / "store")
    cache = tmp_path / "cache" if split else None
    engine = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=cache)
    kernel = raw[(raw["device_id"] == "h100-sxm") & (raw["framework"] == "TRTLLM")].iloc[[40]]
    shape = {k: kernel[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    h100, h200 = catalog.get("h100-sxm"), catalog.get("h200")
    trt_us = float(kernel["latency_us"].iloc[0])
    got = {name: engine.for_framework(name).predict("gemm", "bf16", shape, h100) for name in SLOWER}
    assert got["vllm"].duration_us[0] == pytest.approx(trt_us * SLOWER["vllm"])
    assert got["trtllm"].duration_us[0] == pytest.approx(trt_us)
    pooled = engine.predict("gemm", "bf16", shape, h100).duration_us[0]
    assert pooled == pytest.approx(trt_us * 1.5)  # median of vllm's two repeats and trtllm's one
    # vllm measured no H200 kernel: its H200 answer is the pooled one, and the tier says so
    fn = engine_op_time(engine).for_framework("vllm")
    on_h200 = fn("gemm", "bf16", shape, h200)
    assert list(on_h200.tier) == ["measured:pooled"]
    assert on_h200.duration_us[0] == pytest.approx(engine.predict("gemm", "bf16", shape, h200).duration_us[0])
    assert list(fn("gemm", "bf16", shape, h100).tier) == ["measured:vllm"]
    assert list(engine_op_time(engine).for_framework("sglang")("gemm", "bf16", shape, h100).tier) == [
        "measured:pooled"
    ]


def test_a_gpu_held_out_of_the_tier_stays_out_under_every_framework(catalog, tmp_path) -> None:
    from components.opmodel.engine import OpEngine

    _store(catalog, tmp_path / "store")
    engine = OpEngine.from_store(tmp_path / "store", None, _model())
    for name in SLOWER:
        tier = engine.for_framework(name).measured.without("h100-sxm")
        assert tier.devices() == {"h200"} and tier.framework == name
        assert tier.table("gemm", "h100-sxm", "bf16", None) is None
        assert not any(k[1] == "h100-sxm" for k in tier.groups)
    shape = {"M": np.array([64.0]), "N": np.array([4096.0]), "K": np.array([4096.0])}
    held = engine.for_framework("vllm").measured.without("h100-sxm")
    assert held.resolve("gemm", "bf16", shape, catalog.get("h100-sxm"), np.array([1.0])) is None


def test_a_saved_engines_store_keeps_each_frameworks_kernels(catalog, tmp_path) -> None:
    """The engine the pipeline saves (a predictor folder, ``models/opmodel``) answers from a copy of the
    store: without its per-framework tables every serving engine was timed from the pooled kernels."""
    from components.deployments.ops import engine_op_time
    from components.opmodel.engine import OpEngine
    from components.opmodel.train import copy_engine_store

    raw = _store(catalog, tmp_path / "store")
    copy_engine_store(tmp_path / "store", tmp_path / "saved" / "store")
    engine = OpEngine.from_store(tmp_path / "saved" / "store", None, _model())
    kernel = raw[(raw["device_id"] == "h100-sxm") & (raw["framework"] == "TRTLLM")].iloc[[40]]
    shape = {k: kernel[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
    answer = engine_op_time(engine).for_framework("trtllm")("gemm", "bf16", shape, catalog.get("h100-sxm"))
    assert list(answer.tier) == ["measured:trtllm"]
    assert answer.duration_us[0] == pytest.approx(float(kernel["latency_us"].iloc[0]))


def test_a_split_store_keeps_each_frameworks_groups_and_answers_as_the_whole_rows(catalog, tmp_path) -> None:
    """With a split store (the CLI's and the server's engine) a framework's groups are read from the split,
    one group when asked, its table saved beside it (a later process reads no rows), and every answer is the
    one the engine gives from the per-framework rows read whole, to the bit; a GPU held out stays out."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.store_cache import GroupFrames

    raw = _store(catalog, tmp_path / "store")
    whole = OpEngine.from_store(tmp_path / "store", None, _model())
    rows = raw[raw["framework"] == "TRTLLM"]
    shape = {k: rows[k].to_numpy(dtype="float64")[::7] * 1.3 for k in ("M", "N", "K")}  # off the sites too
    for round_ in ("builds tables", "reads saved tables"):
        split = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=tmp_path / "cache")
        for name in (*SLOWER, "sglang"):
            engine = split.for_framework(name)
            own = engine.measured.groups.first
            assert isinstance(own, GroupFrames) and engine.measured.framework == name
            for gpu in GPUS:
                a = engine.predict("gemm", "bf16", shape, catalog.get(gpu))
                b = whole.for_framework(name).predict("gemm", "bf16", shape, catalog.get(gpu))
                assert np.array_equal(a.duration_us, b.duration_us) and list(a.tier) == list(b.tier)
            expected = {"vllm": {"h100-sxm"}, "trtllm": set(GPUS), "sglang": set()}[name]
            assert {k[1] for k in own} == expected
            if round_ == "reads saved tables":
                assert own.loaded_rows == 0
        fresh = OpEngine.from_store(tmp_path / "store", None, _model(), cache_dir=tmp_path / "cache")
        held = fresh.for_framework("vllm").measured.without("h100-sxm")
        assert held.table("gemm", "h100-sxm", "bf16", None) is None and held.devices() == {"h200"}
