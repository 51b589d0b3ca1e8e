"""NeuSight's AMD MI100 collection (MANIFEST section 7), read from the real files.

The AMD per-GPU files are copied whole (they are small) into an upstream-layout root beside short
excerpts of the NVIDIA files the adapter also requires; the device config is held against the
catalog's MI100 entry (Num_Sm = CUs, SingleFLOPsVEC / SingleFLOPsMM = FP32 vector / matrix peak).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from components.ingest.schema import MEASUREMENT_COLUMNS, with_measurement_ids
from kernelcast.settings import DEFAULT_DATASETS_DIR

NEUSIGHT = DEFAULT_DATASETS_DIR / "neusight"
DATA = Path("scripts/asplos/data")
AMD = DATA / "dataset_amd"
MI100_FILES = [f"train/collect/{op}/p2.4.1/AMD Instinct MI100.csv" for op in ("add", "gelu", "ln", "softmax")]
MI100_FILES += [f"test/collect/{op}/p2.4.1/AMD Instinct MI100.csv" for op in ("bmm", "linear")]
NVIDIA_FILES = [
    "dataset/train/collect/add/p2.1.0/Tesla T4.csv",
    *(f"dataset/test/{s}.csv" for s in ("bmm", "elem", "linear", "ln", "softmax", "vec")),
]

pytestmark = pytest.mark.skipif(not (NEUSIGHT / AMD).is_dir(), reason="NeuSight MI100 collection not present")


@pytest.fixture(scope="module")
def catalog():
    from components.devices import load_catalog

    return load_catalog(user_dir=None)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory, catalog):
    from components.ingest import neusight

    root = tmp_path_factory.mktemp("ns") / "neusight"
    for rel in NVIDIA_FILES:  # the adapter requires the NVIDIA layout: 5 real rows per file
        dst = root / DATA / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        pd.read_csv(NEUSIGHT / DATA / rel, dtype=str, keep_default_na=False, nrows=5).to_csv(dst, index=False)
    for rel in MI100_FILES:
        dst = root / AMD / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(NEUSIGHT / AMD / rel, dst)
    result = neusight.ingest(root, catalog)
    result.check_balance()
    return result


def _amd(out) -> pd.DataFrame:
    m = out.measurements
    return m[m["upstream_file"].str.contains("/dataset_amd/")]


def test_every_mi100_row_is_canonical(out) -> None:
    amd = _amd(out)
    expected = sum(len(pd.read_csv(NEUSIGHT / AMD / rel, dtype=str)) for rel in MI100_FILES)
    assert len(amd) == expected > 8000
    assert len(out.rejects) == 0
    assert list(out.measurements.columns) == list(MEASUREMENT_COLUMNS)
    assert set(amd["device_id"]) == {"mi100"} and set(amd["device_name_raw"]) == {"AMD Instinct MI100"}
    runs = set(amd["run_id"].str.replace(r"/rep\d+$", "", regex=True))
    assert runs == {"amd/train/collect", "amd/test/collect"}
    assert with_measurement_ids(out.measurements)["measurement_id"].is_unique
    families = amd["kernel_id"].map(out.kernels.set_index("kernel_id")["family"])
    assert set(families) == {"elementwise", "layernorm", "softmax", "bmm", "linear"}


def test_mi100_values_match_upstream_ms_to_us(out) -> None:
    rel = "test/collect/bmm/p2.4.1/AMD Instinct MI100.csv"
    raw = pd.read_csv(NEUSIGHT / AMD / rel, dtype=str, keep_default_na=False).iloc[7]
    amd = _amd(out)
    row = amd[(amd["upstream_file"] == (AMD / rel).as_posix()) & (amd["upstream_row"] == 7)].iloc[0]
    assert row["duration_us"] == pytest.approx(float(raw["Latency"]) * 1000.0)
    params = json.loads(row["params_json"])
    assert {k: params[k] for k in "BMNK"} == {k: int(raw[k]) for k in "BMNK"}
    # FP32 bmm FLOPs by definition (2BMNK), so the rate is derived from the one runtime.
    flops = 2.0 * int(raw["B"]) * int(raw["M"]) * int(raw["N"]) * int(raw["K"])
    assert row["flops"] == pytest.approx(flops)
    assert row["gflops"] == pytest.approx(flops / (float(raw["Latency"]) * 1e-3) / 1e9)


def test_mi100_rates_stay_under_the_catalog_peaks(out, catalog) -> None:
    """No bmm/linear row above the MI100's FP32 matrix peak (46.1 TFLOP/s): units and catalog agree."""
    amd = _amd(out)
    gemm = amd[amd["upstream_file"].str.contains("/(?:bmm|linear)/", regex=True)]
    peak = catalog.get("mi100").peak_flops("fp32", tensor=True) / 1e9
    assert gemm["gflops"].notna().all() and gemm["gflops"].max() <= peak


@pytest.mark.parametrize(
    "config",
    ["device_configs/AMD_Instinct_MI100.json", "dataset_amd/train/device_configs/AMD_Instinct_MI100.json"],
)
def test_mi100_device_config_agrees_with_the_catalog(config: str, catalog) -> None:
    figures = json.loads((NEUSIGHT / DATA / config).read_text())
    spec = catalog.resolve(figures["Device"])
    assert spec.id == "mi100" and spec.vendor == "amd"
    assert figures["Num_Sm"] == spec.sms  # NeuSight's Num_Sm is the CU count on AMD
    assert figures["Freq"] == pytest.approx(spec.boost_clock_mhz)
    assert figures["SingleFLOPsVEC"] / 1000 == pytest.approx(spec.peak_tflops.fp32, rel=0.01)
    assert figures["SingleFLOPsMM"] / 1000 == pytest.approx(spec.peak_tflops.fp32_tensor, rel=0.01)
    assert figures["Mem_Bw"] == pytest.approx(spec.dram_gbps, rel=0.01)
    assert figures["Dev_Mem"] == spec.memory_gb and figures["L2Cache"] == spec.l2_mb
