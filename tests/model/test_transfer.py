"""The transfer model: physics-consistent, monotone in the GPU's peaks, honest about what it cannot know.

Trained on our own H100 measurements (``profiled-data/``); queried on catalog GPUs and on synthetic
variants of them that differ in one spec only.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from components.models.tabular import TabularPredictor
from components.models.tabular_config import TabularConfig
from tests.conftest import H100_RUN

SMALL = dict(n_estimators=120, num_leaves=15, min_child_samples=10)
# (op, shape, dtype) queries spanning launch-bound to compute-bound, tensor and FMA pipes.
QUERIES: tuple[tuple[str, dict[str, int], str], ...] = tuple(
    [("gemm", {"M": s, "N": s, "K": s}, d) for s in (64, 512, 2048, 8192) for d in ("fp16", "bf16", "fp32")]
    + [("bmm", {"B": 8, "M": 1024, "N": 1024, "K": 128}, "fp16")]
    + [("add", {"N": n}, d) for n in (1_000, 1_000_000, 100_000_000) for d in ("fp16", "fp32")]
    + [("softmax", {"B": 4096, "H": h}, "fp32") for h in (128, 8192)]
    + [("layernorm", {"B": 8192, "H": 4096}, "bf16")]
)


@pytest.fixture(scope="module")
def catalog():
    from components.devices import load_catalog

    return load_catalog()


@pytest.fixture(scope="module")
def train_table(catalog) -> pd.DataFrame:
    from components.features.build import build_feature_table
    from components.ingest.profiled import ingest
    from components.ingest.schema import with_measurement_ids

    output = ingest(H100_RUN, catalog)
    measurements = output.measurements
    if measurements["measurement_id"].isna().any():
        measurements = with_measurement_ids(measurements)
    return build_feature_table(measurements, output.kernels, catalog)


@pytest.fixture(scope="module")
def fitted(train_table: pd.DataFrame) -> TabularPredictor:
    return TabularPredictor(TabularConfig(**SMALL)).fit(train_table)


def _variant(spec, suffix: str, dram: float = 1.0, compute: float = 1.0):
    peaks = {k: (None if v is None else v * compute) for k, v in spec.peak_tflops.model_dump().items()}
    return spec.model_copy(
        update={
            "id": f"{spec.id}-{suffix}",
            "name": f"{spec.name} {suffix}",
            "aliases": [],
            "dram_gbps": spec.dram_gbps * dram,
            "peak_tflops": type(spec.peak_tflops)(**peaks),
        }
    )


def _query_table(catalog, device_ids: list[str]) -> pd.DataFrame:
    from components.features.build import build_feature_table
    from components.serving.query import query_frames

    frames = []
    for op, shape, dtype in QUERIES:
        measurements, kernels = query_frames(op, shape, dtype, device_ids)
        frames.append(build_feature_table(measurements, kernels, catalog))
    return pd.concat(frames, ignore_index=True)


def test_inputs_are_never_absolute_rates_or_times(fitted: TabularPredictor) -> None:
    """Peaks, bandwidths, clocks and roofline times would let trees memorise the training GPUs."""
    forbidden = re.compile(
        r"(tflops$|gbps|clock_mhz$|_time_us$|_cycles$|peak_compute|ridge|memory_gb|tdp_w$)"
    )
    assert fitted.feature_columns
    assert not [c for c in fitted.feature_columns if forbidden.search(c) and not c.startswith("t_")]


@pytest.mark.parametrize("pair", [("h100-sxm", "h200"), ("a100-sxm4-40gb", "a100-sxm4-80gb")])
def test_more_bandwidth_same_compute_is_never_slower(fitted: TabularPredictor, catalog, pair) -> None:
    slow, fast = pair
    table = _query_table(catalog, [slow, fast])
    predicted = fitted.predict(table)["pred_duration_us"]
    by_device = {d: predicted[table["device_id"] == d].to_numpy() for d in pair}
    assert np.isfinite(by_device[slow]).all() and np.isfinite(by_device[fast]).all()
    assert (by_device[fast] <= by_device[slow] * (1 + 1e-9)).all(), (by_device[slow], by_device[fast])
    # And strictly faster where the roofline is bandwidth-bound on the slower card.
    assert (by_device[fast] < by_device[slow]).any()


@pytest.mark.parametrize("dram,compute", [(1.5, 1.0), (1.0, 1.5), (2.0, 2.0)])
def test_scaling_a_gpus_peaks_never_predicts_a_slower_kernel(
    fitted: TabularPredictor, catalog, dram, compute
) -> None:
    base = catalog.get("h100-sxm")
    variant = _variant(base, "x", dram=dram, compute=compute)
    extended = catalog.with_devices([variant])
    table = _query_table(extended, [base.id, variant.id])
    predicted = fitted.predict(table)["pred_duration_us"]
    slow = predicted[table["device_id"] == base.id].to_numpy()
    fast = predicted[table["device_id"] == variant.id].to_numpy()
    assert (fast <= slow * (1 + 1e-9)).all()


def test_rates_and_intensity_follow_from_one_runtime(fitted: TabularPredictor, catalog) -> None:
    table = _query_table(catalog, ["h100-sxm", "l4"])
    predicted = fitted.predict(table)
    runtime = predicted["pred_duration_us"]
    np.testing.assert_allclose(predicted["pred_gflops"], table["f_flops"] / (runtime * 1e3), rtol=1e-9)
    if "pred_achieved_gbps" in predicted:
        np.testing.assert_allclose(
            predicted["pred_arith_intensity"],
            predicted["pred_gflops"] / predicted["pred_achieved_gbps"],
            rtol=1e-9,
        )


def test_intervals_are_per_family_and_wider_out_of_range(fitted: TabularPredictor, catalog) -> None:
    by_family = fitted.conformal["by_family"]
    assert len(by_family) >= 2 and len(set(by_family.values())) >= 2
    table = _query_table(catalog, ["h100-sxm"])
    predicted = fitted.predict(table)
    width = predicted["pred_duration_us_hi"] / predicted["pred_duration_us"]
    assert (predicted["pred_duration_us_lo"] < predicted["pred_duration_us"]).all()
    ood = predicted["pred_ood"] == 1
    assert ood.any() and (~ood).any()  # 64^3 and 1e8 elements lie outside the profiled shapes
    assert width[ood].min() >= np.exp(fitted.conformal["ood"]) - 1e-9


def test_a_dtype_the_gpu_cannot_run_natively_is_flagged(fitted: TabularPredictor, catalog) -> None:
    table = _query_table(catalog, ["v100-pcie-32gb", "h100-sxm"])
    predicted = fitted.predict(table)
    on_v100_bf16 = ((table["device_id"] == "v100-pcie-32gb") & (table["dtype"] == "bf16")).to_numpy()
    notes = predicted["pred_note"].astype(object).to_numpy()
    assert all("not native" in str(n) and "emulation" in str(n) for n in notes[on_v100_bf16])
    assert all(n is None or n is pd.NA for n in notes[~on_v100_bf16])


def test_launch_floor_comes_from_the_smallest_kernels(
    fitted: TabularPredictor, train_table: pd.DataFrame
) -> None:
    """Every floor lies below every runtime of its source and family: it is a floor, not a fit."""
    for key, floor in fitted.floors.items():
        if "|" not in key:
            continue
        source, family = key.split("|")
        runtimes = train_table.loc[
            (train_table["source"] == source) & (train_table["family"] == family), "duration_us"
        ]
        assert 0 <= floor < runtimes.min()


def test_a_query_from_no_known_source_gets_a_bare_launch_floor() -> None:
    """A user's query carries no source's timing overhead (NeuSight's eager calls: ~25 us)."""
    from components.models.transfer import UNKNOWN_SOURCE_FLOOR, floor_of, launch_floors

    rows = []
    for source, overhead in (("neusight", 25.0), ("pipeweave", 4.0)):
        for i in range(200):
            rows.append(
                {
                    "source": source,
                    "family": "elementwise" if source == "neusight" else "gemm",
                    "f_roofline_time_us": 0.01 * (i + 1),
                    "duration_us": overhead + 0.01 * (i + 1),
                }
            )
    frame = pd.DataFrame(rows)
    floors = launch_floors(frame, frame["duration_us"].to_numpy())
    assert 20 < floors["neusight|elementwise"] < 25 and 3 < floors["pipeweave|gemm"] < 4
    assert floors[UNKNOWN_SOURCE_FLOOR] == floors["pipeweave|gemm"]
    query = pd.DataFrame(
        [{"source": "query", "family": "elementwise"}, {"source": "neusight", "family": "elementwise"}]
    )
    np.testing.assert_allclose(
        floor_of(query, floors), [floors["pipeweave|gemm"], floors["neusight|elementwise"]]
    )


def test_a_family_a_known_source_never_timed_gets_that_sources_floor() -> None:
    """The fixed cost follows how a source times (our CUDA events: 3-9 us), not the family: a family the
    source has no floor of (our first conv rows) takes the source's lowest floor, not another harness's."""
    from components.models.transfer import UNKNOWN_SOURCE_FLOOR, floor_of

    floors = {"kernelcast|gemm": 4.5, "kernelcast|elementwise": 3.2, "neusight|conv": 100.0}
    floors |= {"pipeweave|gemm": 2.4, "pipeweave|moe": 0.0, UNKNOWN_SOURCE_FLOOR: 2.4}
    query = pd.DataFrame(
        {
            "source": ["kernelcast", "kernelcast", "neusight", "query", "pipeweave"],
            "family": ["conv", "gemm", "softmax", "conv", "attention"],
        }
    )
    np.testing.assert_allclose(floor_of(query, floors), [3.2, 4.5, 100.0, 2.4, 2.4])
