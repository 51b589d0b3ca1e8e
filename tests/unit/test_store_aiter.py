"""The measured store holds aiter's MI300X / MI308X rows beside AIConfigurator's, in the same per-family
layout, hash-deterministically; the measured tier answers an MI300X GEMM from them. Real tables (symlinked
in place)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
AIC_TABLE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
AITER_TABLES = (
    "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv",  # MI300X fp8 block-scaled
    "aiter/configs/model_configs/dsv3_a8w8_bpreshuffle_tuned_gemm.csv",  # MI308X fp8 (4 beat the roofline)
    "aiter/configs/bf16_tuned_batched_gemm.csv",  # MI300X batched bf16
    "aiter/configs/tuned_fmoe.csv",  # MI308X fused MoE
)


def _datasets(root: Path) -> Path:
    for source, rel in [("aiconfigurator", AIC_TABLE), *(("aiter", t) for t in AITER_TABLES)]:
        if not (DATASETS / source / rel).is_file():
            pytest.skip(f"{source} tables not present")
        link = root / source / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(DATASETS / source / rel)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    from components.opmodel.store import build_store

    root = _datasets(tmp_path_factory.mktemp("datasets"))
    first, second = root.parent / "store1", root.parent / "store2"
    rows = build_store(root, first)
    build_store(root, second)
    return first, second, rows


def test_store_is_hash_deterministic_and_names_its_sources(built) -> None:
    first, second, rows = built
    names = sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file())  # by_framework/ too
    assert names == sorted(str(p.relative_to(second)) for p in second.rglob("*") if p.is_file())
    assert "by_framework/gemm.parquet" in names
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    manifest = json.loads((first / "store.json").read_text())
    assert manifest["sources"] == ["aiconfigurator", "aiter"]
    assert manifest["gemm"]["devices"] == ["h100-sxm", "mi300x", "mi308x"]
    assert manifest["bmm"]["devices"] == ["mi300x"] and manifest["moe"]["devices"] == ["mi308x"]
    assert rows["gemm"] == manifest["gemm"]["rows"]


def test_aiter_rows_take_the_families_layout_and_none_beats_its_roofline(built) -> None:
    from components.devices import load_catalog
    from components.ingest.aiconfigurator import KERNEL_KEYS
    from components.opmodel.store import load_store
    from components.physics import roofline as physics

    store = load_store(built[0])
    gemm = store["gemm"]
    assert list(gemm.columns[: len(KERNEL_KEYS["gemm"])]) == KERNEL_KEYS["gemm"]
    assert all(gemm[k].dtype == np.int64 for k in ("M", "N", "K"))
    assert not gemm.duplicated(KERNEL_KEYS["gemm"]).any()
    catalog = load_catalog(user_dir=None)
    for (device, dtype), part in gemm[gemm["device_id"].str.startswith("mi")].groupby(["device_id", "dtype"]):
        shape = {k: part[k].to_numpy(dtype="float64") for k in ("M", "N", "K")}
        roof = physics.roofline("gemm", dtype, shape, catalog.get(device))
        assert (part["latency_us"].to_numpy() >= roof.time_us).all(), (device, dtype)
    assert set(gemm.loc[gemm["device_id"] == "mi308x", "dtype"]) == {"fp8"}
    assert set(store["bmm"]["B"]) == {16} and set(store["bmm"]["dtype"]) == {"bf16"}
    moe = store["moe"]
    assert set(moe["distribution"]) == {"balanced"} and (moe[["tp", "ep"]] == 1).all().all()


def test_measured_tier_answers_an_mi300x_gemm_exactly(built) -> None:
    import pandas as pd

    from components.devices import load_catalog
    from components.opmodel.engine import OpEngine

    store_dir = built[0]
    gemm = pd.read_parquet(store_dir / "gemm.parquet")
    row = gemm[(gemm["device_id"] == "mi300x") & (gemm["dtype"] == "fp8_block")].iloc[7]
    engine = OpEngine.from_store(store_dir)
    shape = {k: np.array([float(row[k])]) for k in ("M", "N", "K")}
    got = engine.predict("gemm", "fp8_block", shape, load_catalog(user_dir=None).get("mi300x"))
    assert got.tier[0] == "measured" and got.duration_us[0] == pytest.approx(row["latency_us"])


def test_a_store_built_before_aiter_is_rebuilt_once(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from components.opmodel.store import build_store, built_from
    from components.opmodel.train import ensure_store, state_store

    settings = SimpleNamespace(data_dir=tmp_path / "state", datasets_dir=_datasets(tmp_path / "datasets"))
    store = state_store(settings)
    build_store(settings.datasets_dir / "aiconfigurator", store, families=("gemm",))  # as before aiter
    assert built_from(store) == ["aiconfigurator"]
    said: list[str] = []
    assert ensure_store(settings, said.append) == store
    assert built_from(store) == ["aiconfigurator", "aiter"] and len(said) == 1
    ensure_store(settings, said.append)  # up to date: not rebuilt
    assert len(said) == 1


def test_an_aiter_folder_without_tuned_tables_adds_nothing(tmp_path: Path) -> None:
    """A project copy's empty stand-in for the aiter folder is no source (the store builds from the
    others)."""
    from components.opmodel.store import source_roots

    (tmp_path / "aiter").mkdir()
    (tmp_path / "aiconfigurator").mkdir()
    assert set(source_roots(tmp_path)) == {"aiconfigurator"}
