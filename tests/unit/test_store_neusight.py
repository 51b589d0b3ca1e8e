"""NeuSight's FP32 ``linear`` rows in the measured store: only its training files, in microseconds, repeats
folded, rows faster than the FP32 roofline quarantined, kept apart from the rows the spec model, the transfer
fit and the op engine's gate splits read; and no row of the ``neusight`` split's test side in the store that
answers it (real NeuSight files, read in place)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
HEADER = "OPName,Latency,Device,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z,"
GEMM_HEADER = HEADER + "B,M,N,K\n"
ROW_HEADER = HEADER + "B,H\n"
V100 = "Tesla V100-PCIE-32GB"
H100 = "NVIDIA H100 80GB HBM3"


def _row(latency_ms: str, device: str, shape: str) -> str:
    return f"linear,{latency_ms},{device},volta_sgemm_128x64_tn,1,1,1,256,1,1,{shape}\n"


def _neusight_repo(root: Path) -> Path:
    """A NeuSight layout: one V100 training file (a shape measured twice, one row faster than any FP32 GEMM
    can run, one unreadable latency) and the published test files (an H100 and a V100 ``linear`` row)."""
    dataset = root / "neusight" / "scripts/asplos/data/dataset"
    train = dataset / "train/collect/linear/p2.1.0" / f"{V100}.csv"
    train.parent.mkdir(parents=True)
    train.write_text(
        GEMM_HEADER
        + _row("2.0", V100, "2,1024,4096,1024")  # 17.2 GFLOP: 8.6 TFLOP/s, below V100's 14 TFLOP/s FP32
        + _row("2.2", V100, "2,1024,4096,1024")  # the same kernel again: folded into the median
        + _row("0.5", V100, "1,4096,4096,4096")  # 137 GFLOP in 0.5 ms = 275 TFLOP/s: impossible
        + _row("abc", V100, "1,64,64,64")  # unreadable: counted, not stored
    )
    tests = dataset / "test"
    tests.mkdir(parents=True)
    (tests / "linear.csv").write_text(
        GEMM_HEADER + _row("1.0", H100, "2,1024,4096,1024") + _row("3.0", V100, "1,512,512,512")
    )
    (tests / "bmm.csv").write_text(GEMM_HEADER)
    for stem in ("elem", "ln", "softmax", "vec"):
        (tests / f"{stem}.csv").write_text(ROW_HEADER)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from components.opmodel.store import build_store

    root = _neusight_repo(tmp_path_factory.mktemp("datasets"))
    out = root.parent / "store"
    build_store(root, out)
    return out


def test_training_rows_fold_in_microseconds_and_impossible_rows_are_quarantined(built: Path) -> None:
    from components.opmodel.store import MANIFEST_NAME, MEASURED_ONLY_DIR, load_store

    manifest = json.loads((built / MANIFEST_NAME).read_text())
    assert manifest["sources"] == ["neusight"]
    rows = load_store(built, ("gemm",), measured_only=True)["gemm"]
    assert rows[["device_id", "dtype", "M", "N", "K"]].values.tolist() == [
        ["v100-pcie-32gb", "fp32", 2048, 4096, 1024]  # linear (B, M, K) x (N, K): a GEMM of B*M rows
    ]
    assert rows["latency_us"].tolist() == pytest.approx([2100.0])  # ms -> us, median of 2.0 and 2.2 ms
    assert rows["n_repeats"].tolist() == [2]
    quarantined = manifest["quarantined"]
    assert quarantined[f"{MEASURED_ONLY_DIR}/gemm"] == {
        "v100-pcie-32gb": {"faster than its compute roofline": 1}
    }
    assert sum(quarantined[f"{MEASURED_ONLY_DIR}/unreadable"].values()) == 1


def test_test_files_never_enter_and_the_gate_readers_do_not_see_the_rows(built: Path) -> None:
    from components.opmodel.store import load_store

    rows = load_store(built, ("gemm",), measured_only=True)["gemm"]
    assert set(rows["device_id"]) == {"v100-pcie-32gb"}  # the H100 test row is not there
    assert not ((rows["M"] == 512) & (rows["N"] == 512)).any()  # nor the V100 row of test/linear.csv
    # the spec model, the transfer fit and the op engine's gate splits read the store without them
    assert "gemm" not in load_store(built, ("gemm",))


@pytest.mark.parametrize("cached", [False, True])
def test_engine_answers_the_training_gpu_from_its_rows_and_not_the_held_out_one(
    built: Path, cached: bool, tmp_path: Path
) -> None:
    from components.devices.catalog import load_catalog
    from components.opmodel.engine import OpEngine

    catalog = load_catalog()
    engine = OpEngine.from_store(built, cache_dir=tmp_path if cached else None)  # the CLI's path: cached
    shape = {"M": np.array([2048.0]), "N": np.array([4096.0]), "K": np.array([1024.0])}
    v100 = engine.predict("linear", "fp32", shape, catalog.get("v100-pcie-32gb"))
    assert v100.tier.tolist() == ["measured"] and v100.duration_us == pytest.approx([2100.0])
    h100_spec = catalog.get(catalog.resolve(H100).id)
    h100 = engine.predict("linear", "fp32", shape, h100_spec)
    assert h100.tier.tolist() != ["measured"]
    # nor is any other GPU answered from NeuSight's rows as a relative (the transfer model never saw them)
    assert engine.transfer.relatives("gemm", "fp32", None, h100_spec) == []
    engine.transfer.not_relatives = frozenset()
    assert [d for d, _ in engine.transfer.relatives("gemm", "fp32", None, h100_spec)] == ["v100-pcie-32gb"]


@pytest.mark.skipif(not (DATASETS / "neusight").is_dir(), reason="NeuSight's files not present")
def test_no_row_of_the_neusight_split_test_side_is_in_the_store(tmp_path: Path) -> None:
    """The real split (``splits.neusight_split``) on the real canonical rows: none of its test rows, by GPU
    or by (GPU, shape), is in the store built from the same files; every stored row is a training row."""
    from components.devices.catalog import load_catalog
    from components.evaluation.splits import neusight_split
    from components.ingest.neusight import ingest
    from components.opmodel.store import build_store, load_store

    catalog = load_catalog(user_dir=None)
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "neusight").symlink_to(DATASETS / "neusight")
    build_store(tmp_path / "datasets", tmp_path / "store")
    stored = load_store(tmp_path / "store", ("gemm",), measured_only=True)["gemm"]
    keys = set(zip(stored["device_id"], stored["M"], stored["N"], stored["K"], strict=True))

    canonical = ingest(DATASETS / "neusight", catalog)
    table = canonical.measurements
    fold = neusight_split(table)[0]
    linear = set(canonical.kernels.loc[canonical.kernels["family"] == "linear", "kernel_id"])

    def linear_keys(index) -> set[tuple]:
        part = table.loc[index]
        part = part[part["kernel_id"].isin(linear)]
        shapes = [json.loads(p) for p in part["params_json"]]
        return {
            (device, s["B"] * s["M"], s["N"], s["K"])
            for device, s in zip(part["device_id"], shapes, strict=True)
        }

    test_keys = linear_keys(fold.test)
    assert test_keys, "the split's test side holds linear rows"
    assert not test_keys & keys
    assert not {k[0] for k in test_keys} & set(stored["device_id"])  # no held-out GPU in the store at all
    assert keys <= linear_keys(fold.train)  # every stored row is one of the split's training rows


AIC_TABLE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"


@pytest.mark.skipif(not (DATASETS / "aiconfigurator" / AIC_TABLE).is_file(), reason="AIConfigurator absent")
def test_trained_engine_carries_the_rows_for_their_own_gpu_only(tmp_path: Path) -> None:
    """``train_engine`` on one AIConfigurator table + the NeuSight layout: the saved engine answers the V100
    from its row, the transfer tier takes no NeuSight GPU as a relative, the spec model saw no FP32 row."""
    from types import SimpleNamespace

    from components.devices.catalog import load_catalog
    from components.opmodel.engine import OpEngine
    from components.opmodel.train import train_engine

    root = _neusight_repo(tmp_path / "datasets")
    (root / "aiconfigurator" / AIC_TABLE).parent.mkdir(parents=True)
    (root / "aiconfigurator" / AIC_TABLE).symlink_to(DATASETS / "aiconfigurator" / AIC_TABLE)
    settings = SimpleNamespace(datasets_dir=root, data_dir=tmp_path / "data", models_dir=tmp_path / "models")
    out = train_engine(settings, tmp_path / "predictor" / "opmodel")
    assert (out / "store" / "measured_only" / "gemm.parquet").is_file()
    engine = OpEngine.load(out, tmp_path / "cache")
    assert engine.meta["devices"] == ["h100-sxm"]  # the spec model's GPUs: no NeuSight one
    catalog = load_catalog()
    shape = {"M": np.array([2048.0]), "N": np.array([4096.0]), "K": np.array([1024.0])}
    v100 = engine.predict("linear", "fp32", shape, catalog.get("v100-pcie-32gb"))
    assert v100.tier.tolist() == ["measured"] and v100.duration_us == pytest.approx([2100.0])
    h100 = catalog.get("h100-sxm")
    assert engine.transfer.relatives("gemm", "fp32", None, h100) == []
    assert engine.predict("linear", "fp32", shape, h100).tier.tolist() != ["measured"]
