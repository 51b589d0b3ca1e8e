"""Achievable peaks per pipe and per (architecture, pipe): learned from synthetic int8 GEMM rows whose share
of the datasheet peak is set per GPU (Ampere's A100 at 0.9, Hopper's H200 at 0.5, as the measured store's
int8 GEMMs roughly are), and the engine's cap: a Hopper GPU's int8 answer carried from Ampere stays at
Hopper's share, with the figure in the note; a GPU whose architecture measured nothing of the pipe keeps
the pooled share."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

SIZES = 2.0 ** np.arange(11, 15)  # compute-bound int8 GEMMs on every GPU here
SHARES = {"a100-sxm4-80gb": 0.9, "h200": 0.5}


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def int8_gemm(catalog, shares: dict[str, float]) -> pd.DataFrame:
    """Compute-bound int8 GEMM rows per GPU at ``shares[device]`` of its datasheet int8 peak."""
    from components.physics import roofline as physics

    m, n, k = np.meshgrid(SIZES, SIZES, SIZES, indexing="ij")
    shape = {"M": m.ravel(), "N": n.ravel(), "K": k.ravel()}
    frames = []
    for device, share in shares.items():
        roof = physics.roofline("gemm", "int8", shape, catalog.get(device))
        assert np.all(roof.compute_us >= roof.memory_us)
        latency = roof.compute_us / share
        frames.append(
            pd.DataFrame(
                {
                    "device_id": device,
                    "dtype": "int8",
                    **shape,
                    "latency_us": latency,
                    "n_repeats": 1,
                    "latency_min_us": latency,
                    "latency_max_us": latency,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_each_architecture_learns_its_own_share_and_the_pool_keeps_the_highest(catalog) -> None:
    from components.opmodel.achievable import achievable_peaks

    gemm = int8_gemm(catalog, SHARES)
    peaks = achievable_peaks({"gemm": gemm}, {d: catalog.get(d) for d in SHARES})
    assert peaks["ampere:gemm:tensor|int8"] == pytest.approx(0.9)
    assert peaks["hopper:gemm:tensor|int8"] == pytest.approx(0.5)
    assert peaks["tensor|int8"] == pytest.approx(0.9)  # pooled: the high quantile is Ampere's


def test_an_architecture_with_too_few_rows_learns_no_share_of_its_own(catalog) -> None:
    from components.opmodel.achievable import MIN_ROWS, achievable_peaks

    gemm = int8_gemm(catalog, SHARES)
    few = gemm.groupby("device_id").head(MIN_ROWS - 1)  # each GPU below MIN_ROWS, the two together above
    assert achievable_peaks({"gemm": few}, {d: catalog.get(d) for d in SHARES}) == {
        "tensor|int8": pytest.approx(0.9)
    }


def test_share_of_prefers_the_architectures_family_then_the_pipe_then_any_compute_pipe() -> None:
    from components.opmodel.achievable import share_of

    learned = {"tensor|int8": 0.9, "hopper:gemm:tensor|int8": 0.5, "tensor|bf16": 0.8, "dram": 0.95}
    assert share_of(learned, "hopper", "gemm", "tensor|int8")[0] == 0.5
    assert share_of(learned, "hopper", "moe", "tensor|int8")[0] == 0.9  # Hopper's GEMMs bound no MoE kernel
    assert share_of(learned, "ada", "gemm", "tensor|int8")[0] == 0.9
    assert share_of(learned, "ada", "gemm", "tensor|fp8")[0] == 0.9  # the highest compute share, not DRAM's
    assert share_of({}, "ada", "gemm", "tensor|fp8") == (1.0, "the datasheet")


def test_a_hopper_int8_answer_carried_from_ampere_stays_at_hoppers_share(catalog) -> None:
    from components.opmodel.engine import OpEngine
    from components.opmodel.transfer import TransferModel, TransferSettings
    from components.physics import roofline as physics

    ampere = int8_gemm(catalog, {"a100-sxm4-80gb": 0.9})
    learned = {"tensor|int8": 0.9, "hopper:gemm:tensor|int8": 0.5}
    model = TransferModel(settings={"gemm": TransferSettings(1, 1.0, None)}, achievable=learned)
    engine = OpEngine.from_frames({"gemm": ampere}, None, model)
    shape = {"M": SIZES, "N": 8192.0, "K": 8192.0}
    h100 = engine.predict("gemm", "int8", shape, catalog.get("h100-sxm"))
    assert set(h100.tier) == {"transfer"}
    rates = physics.derive(h100.duration_us, h100.roof)["gflops"] * 1e9
    peak = h100.roof.peak_flops
    assert np.all(rates <= 0.5 * peak * (1 + 1e-9)) and np.any(rates >= 0.5 * peak * (1 - 1e-6))
    assert f"{0.5 * peak / 1e12:,.0f} TOP/s (50% of the datasheet's {peak / 1e12:,.0f}" in h100.note[0]
    assert "hopper's measured gemm kernels" in h100.note[0]
    l40s = engine.predict("gemm", "int8", shape, catalog.get("l40s"))  # Ada measured no int8: the pool's
    rates = physics.derive(l40s.duration_us, l40s.roof)["gflops"] * 1e9
    assert np.all(rates <= 0.9 * l40s.roof.peak_flops * (1 + 1e-9))
    assert "every measured GPU's kernels" in l40s.note[0]
