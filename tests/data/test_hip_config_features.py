"""benchmark_hub's HIP tuning configurations: per-configuration static features joined into the
feature table, and the amd-source split (W6600 held out) on the real caches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from components.devices import load_catalog

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
HUB = DATASETS / "benchmark_hub"
DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc")
needs_hip = pytest.mark.skipif(
    shutil.which("hipcc") is None or not DEVICE_LIBS.is_file(),
    reason="HIP compiler absent: apt-get install hipcc rocm-device-libs",
)


@pytest.fixture(scope="module")
def hub() -> tuple[pd.DataFrame, pd.DataFrame]:
    if not HUB.is_dir():
        pytest.skip(f"dataset not present: {HUB}")
    from components.ingest.benchmark_hub import ingest
    from components.ingest.schema import with_measurement_ids

    out = ingest(HUB, load_catalog())
    measurements = out.measurements
    if measurements["measurement_id"].isna().any():
        measurements = with_measurement_ids(measurements)
    return measurements, out.kernels


def test_amd_source_split_holds_the_w6600_out_on_sampled_configurations(hub) -> None:
    from components.evaluation.amd_source import amd_source_split
    from components.features.build import build_feature_table

    measurements, kernels = hub
    table = build_feature_table(measurements, kernels, load_catalog())
    (fold,) = amd_source_split(table, share=0.002)
    test, train = table.loc[fold.test], table.loc[fold.train]
    assert fold.name == "amd-source:radeon-pro-w6600"
    assert set(test["device_id"]) == {"radeon-pro-w6600"} and "radeon-pro-w6600" not in set(
        train["device_id"]
    )
    assert set(train["config_id"]) <= set(
        test["config_id"]
    )  # only the drawn configurations (W6600 ran them all)
    assert set(train["source"]) == {"benchmark_hub"} and len(train) >= len(test)
    drawn = test.groupby("program")["config_id"].nunique()
    assert (
        set(drawn.index) == {"convolution_milo", "dedispersion_milo"} and 10 <= drawn.sum() <= 60
    )  # ~31 expected
    assert len(test) == drawn.sum()  # one W6600 row per configuration
    # the same configurations every time (hash-chosen), and a larger sample contains the smaller
    again = amd_source_split(table, share=0.004)[0]
    assert set(table.loc[fold.test, "config_id"]) <= set(table.loc[again.test, "config_id"])


def test_per_configuration_static_rows_join_by_configuration(hub) -> None:
    from components.features.build import build_feature_table
    from components.features.static.hip_table import config_id

    measurements, kernels = hub
    rows = measurements[measurements["kernel_id"] == measurements["kernel_id"].iloc[0]].head(3)
    static = pd.DataFrame(
        {
            "kernel_id": [rows["kernel_id"].iloc[0]] * 2,
            "params_json": [rows["params_json"].iloc[0], rows["params_json"].iloc[1]],
            "device_id": [rows["device_id"].iloc[0], "not-this-gpu"],
            "s_registers": [17.0, 99.0],
        }
    )
    table = build_feature_table(rows, kernels, load_catalog(), static)
    assert table["s_registers"].iloc[0] == 17.0 and table["s_registers"].iloc[1:].isna().all()
    assert table["config_id"].iloc[0] == config_id(rows["params_json"].iloc[0])


@needs_hip
def test_sampled_configurations_compile_with_their_macros(hub, tmp_path: Path) -> None:
    from components.features.static.hip_table import build_hip_config_table

    measurements, kernels = hub
    table, coverage = build_hip_config_table(
        measurements, kernels, load_catalog(), DATASETS, share=0.0003, cache_dir=tmp_path
    )
    assert 1 <= coverage["configs"] <= 12 and coverage.get("compile_failures", 0) == 0
    # RDNA2 (W6600) and the NVIDIA rows share one gfx1030 compile per configuration
    assert coverage["compiles"] == coverage["configs"]
    w6600 = table[table["device_id"] == "radeon-pro-w6600"]
    assert (
        len(w6600) == coverage["configs"]
        and (w6600["s_registers"] > 0).all()
        and (w6600["s_total"] > 0).all()
    )
    assert ((w6600["s_occupancy"] > 0) & (w6600["s_occupancy"] <= 1)).all()
    # the four GPUs of a configuration share its code features, occupancy is each GPU's own
    per_config = table.groupby("params_json")["s_total"].nunique()
    assert (per_config == 1).all() and table["device_id"].nunique() >= 3


def test_bench_scores_amd_source_per_kernel_beside_the_roofline(hub) -> None:
    from components.evaluation.bench import run_accuracy_bench
    from components.features.build import build_feature_table
    from components.models.roofline import RooflinePredictor

    measurements, kernels = hub
    table = build_feature_table(measurements, kernels, load_catalog())
    result = run_accuracy_bench(
        table, ["roofline"], ["amd-source"], lambda *_: (RooflinePredictor(), 0.0), []
    )
    runtime = {r["target"]: r for r in result.rows if r["metric"] == "mape"}
    ops = {"duration_us[op=convolution_kernel]", "duration_us[op=dedispersion_kernel]"}
    assert ops <= set(runtime) and "duration_us[device=radeon-pro-w6600]" in runtime
    assert runtime["duration_us"]["n"] == sum(runtime[o]["n"] for o in ops) > 0
    # the roofline is a lower bound on runtime: its MAPE against measured time lies in (0, 100%)
    assert 0 < runtime["duration_us"]["ours"] < 1
