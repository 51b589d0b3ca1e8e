"""Serving systems beyond H100/H200 (issue 35): AIConfigurator's system names reach their catalog GPUs, the
GB300 entry, collectives across the NVLink domain, and the withheld systems' runs answered by the silicon
bench's own path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.deployments.bench_coverage import WITHHELD_SYSTEMS, coverage, relabelled
from components.deployments.bench_engines import silicon_answers
from components.deployments.data import read_silicon_runs, silicon_device_ids
from components.deployments.ops import roofline_op_time
from components.devices import load_catalog
from components.devices.aiconfigurator_sheet import AICONFIGURATOR_SYSTEMS, aiconfigurator_device_id
from components.physics.collectives import DEFAULT_NETWORK_GBPS, link_rate_gbps
from components.physics.roofline import pipe_for, roofline
from components.platform.config import get_settings

DATA = get_settings().datasets_dir
needs_silicon = pytest.mark.skipif(
    not (DATA / "aiconfigurator").is_dir(), reason="aiconfigurator bundle not present"
)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(user_dir=None)


def test_every_aiconfigurator_system_reaches_its_catalog_gpu(catalog) -> None:
    expected = {
        "h100_sxm": "h100-sxm",
        "h200_sxm": "h200",
        "b200_sxm": "b200",
        "gb200_sxm": "gb200",
        "gb200": "gb200",
        "b300_sxm": "b300",
        "gb300_sxm": "gb300",
        "gb300": "gb300",
    }
    for system in AICONFIGURATOR_SYSTEMS:
        found = aiconfigurator_device_id(system, catalog)
        assert found is not None, system
        assert catalog.resolve(system).id == found  # the CLI's and the server's lookup agree
    assert {s: aiconfigurator_device_id(s, catalog) for s in expected} == expected
    systems = pd.Series(["gb300_sxm", "h200_sxm", "x99_sxm"])
    assert silicon_device_ids(systems).tolist() == [
        "gb300",
        "h200",
        "x99_sxm",
    ]  # unknown: kept, refused later


def test_gb300_is_blackwell_ultra_with_an_fp4_pipe_and_a_rack_domain(catalog) -> None:
    gb300, b300, gb200 = catalog.get("gb300"), catalog.get("b300"), catalog.get("gb200")
    peaks = gb300.peak_tflops
    assert peaks.fp4_tensor > peaks.fp8_tensor > peaks.bf16_tensor > peaks.fp32
    assert peaks.fp4_tensor >= b300.peak_tflops.fp4_tensor and peaks.fp4_tensor > gb200.peak_tflops.fp4_tensor
    assert gb300.memory_gb == b300.memory_gb and gb300.dram_gbps >= gb200.dram_gbps
    assert gb300.supports("nvfp4") and pipe_for("nvfp4", gb300).precision == "fp4"
    assert (gb300.nvlink_domain_gpus, gb200.nvlink_domain_gpus, b300.nvlink_domain_gpus) == (72, 72, 8)
    assert gb300.network_gbps > gb200.network_gbps  # ConnectX-8 against ConnectX-7


def test_nvfp4_gemm_runs_on_blackwells_fp4_pipe_never_slower_than_hopper(catalog) -> None:
    shape = {"M": np.array([1.0, 64, 1024, 8192]), "N": np.array([7168.0] * 4), "K": np.array([4096.0] * 4)}
    h200 = roofline_op_time("gemm", "nvfp4", shape, catalog.get("h200"))
    for gpu in ("b200", "gb200", "b300", "gb300"):
        assert pipe_for("nvfp4", catalog.get(gpu)).emulated_from is None
        assert (roofline_op_time("gemm", "nvfp4", shape, catalog.get(gpu)) <= h200).all(), gpu
    assert pipe_for("nvfp4", catalog.get("h200")).emulated_from == "nvfp4"  # Hopper has no fp4 pipe


def test_collectives_cross_the_network_only_beyond_the_link_domain(catalog) -> None:
    h200, gb200 = catalog.get("h200"), catalog.get("gb200")
    n = np.arange(1, 129, dtype=float)
    for spec in (h200, gb200):
        link = float(spec.link_gbps)
        for pattern in ("allreduce", "alltoall"):
            rate = link_rate_gbps(spec, link, n, pattern)
            assert (rate <= link).all() and (np.diff(rate) <= 1e-9).all()  # never faster than the link
            assert (rate[n <= spec.nvlink_domain_gpus] == link).all()
    # an all-to-all over two HGX boards: half its bytes leave through each GPU's own 400 Gb/s NIC
    a2a16 = float(link_rate_gbps(h200, 450.0, 16, "alltoall"))
    assert a2a16 == pytest.approx((15 / 16) / max(7 / 16 / 450.0, 8 / 16 / h200.network_gbps))
    assert a2a16 < 2.1 * h200.network_gbps
    # a ring spreads its channels over the board's 8 NICs: min(link, 8 x NIC)
    assert float(link_rate_gbps(h200, 450.0, 16, "allreduce")) == pytest.approx(min(450.0, 8 * 50.0))
    assert float(link_rate_gbps(gb200, 900.0, 16, "alltoall")) == 900.0  # NVL72: still one domain


def test_all_to_all_time_grows_with_bytes_and_with_a_group_beyond_the_board(catalog) -> None:
    h200 = catalog.get("h200")
    sizes = np.array([1e5, 1e6, 1e7, 1e8])
    times = {}
    for gpus in (8, 16, 32):
        shape = {"bytes": sizes, "gpus": np.full(4, float(gpus)), "op": "alltoall"}
        roof = roofline("allreduce", "bf16", shape, h200, op="alltoall")
        assert (np.diff(roof.time_us) >= 0).all()
        assert (roof.link_bytes / roof.link_us * 1e6 <= h200.link_gbps * 1e9 * (1 + 1e-9)).all()
        times[gpus] = roof.time_us
    assert (times[16] > 4 * times[8]).all() and (times[32] >= times[16]).all()


def test_a_spec_without_domain_fields_says_what_was_assumed() -> None:
    catalog = load_catalog(user_dir=None)
    l40s = catalog.get("l40s")  # PCIe part: no NVLink, no domain figures in the catalog
    roof = roofline("allreduce", "bf16", {"bytes": [1e8], "gpus": [16]}, l40s)
    assert "assumed" in (roof.note or "") and str(int(DEFAULT_NETWORK_GBPS)) in roof.note


@needs_silicon
def test_withheld_systems_are_answered_by_the_silicon_path_without_touching_the_measured_fits(
    catalog,
) -> None:
    runs = read_silicon_runs(DATA)
    small = runs[runs["model_path"].str.contains("Llama-3.1-8B|Qwen3-32B", regex=True)]
    subset = pd.concat([g.head(2) for _, g in small.groupby(["backend", "mode", "device_id"])])
    asked = relabelled(subset, ("gb200_sxm", "x99_sxm"))
    assert asked[["silicon_ttft_ms", "silicon_tpot_ms"]].isna().all().all()
    cov = coverage(subset, ("gb200_sxm", "x99_sxm"), catalog, DATA, roofline_op_time)
    counts = cov.counts()
    assert counts.loc["gb200_sxm", "answered"] == len(subset)
    assert counts.loc["x99_sxm", "answered"] == 0
    reasons = cov.reasons()
    assert (reasons["system"] == "x99_sxm").all() and reasons["reason"].str.contains("x99_sxm").all()
    done = cov.answered
    assert (done["device_id"] == "gb200").all()
    assert np.isfinite(done[["ttft_pred_ms", "tpot_pred_ms"]].to_numpy()).all()
    # the asked runs are answered, never fitted on: the measured runs' own held-out answers are unchanged
    alone = silicon_answers(subset, catalog, DATA, roofline_op_time)[0].set_index("id")
    both = silicon_answers(pd.concat([subset, asked]), catalog, DATA, roofline_op_time)[0].set_index("id")
    for target in ("ttft_pred_ms", "tpot_pred_ms"):
        assert np.allclose(both.loc[alone.index, target], alone[target])


def test_withheld_systems_named_are_the_aiconfigurator_blackwell_systems() -> None:
    assert set(WITHHELD_SYSTEMS) <= set(AICONFIGURATOR_SYSTEMS)
