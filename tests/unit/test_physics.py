"""The speed-of-light physics of the op engine's families (components/physics/roofline.py)."""

from __future__ import annotations

import numpy as np
import pytest

from components.devices import load_catalog
from components.physics import roofline as physics


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_gemm_roofline_is_flops_over_the_dtype_s_tensor_peak(catalog) -> None:
    h100 = catalog.resolve("H100")
    roof = physics.roofline("gemm", "bf16", {"M": 8192, "N": 8192, "K": 8192}, h100)
    assert roof.time_us[0] == pytest.approx(2 * 8192**3 / 989.4e12 * 1e6)
    assert roof.bound_pipe[0] == "tensor"
    # decode-shaped: the weights dominate, DRAM bound
    roof = physics.roofline("gemm", "bf16", {"M": 8, "N": 7168, "K": 5120}, h100)
    assert roof.bound_pipe[0] == "dram"
    assert roof.time_us[0] == pytest.approx(2 * (8 * 5120 + 5120 * 7168 + 8 * 7168) / 3350e9 * 1e6)


@pytest.mark.parametrize(
    "dtype,pipe_key",
    [
        ("tf32", "tf32_tensor"),
        ("int8", "int8_tensor"),
        ("fp8", "fp8_tensor"),
        ("fp8_block", "fp8_tensor"),
        ("bf16", "bf16_tensor"),
    ],
)
def test_every_dtype_runs_on_its_own_pipe(catalog, dtype: str, pipe_key: str) -> None:
    h100 = catalog.resolve("H100")
    choice = physics.pipe_for(dtype, h100)
    assert choice.tensor and choice.emulated_from is None
    assert choice.peak_flops == pytest.approx(getattr(h100.peak_tflops, pipe_key) * 1e12)


def test_emulation_runs_on_the_fallback_pipe_and_says_so(catalog) -> None:
    a100 = catalog.resolve("A100")
    shape = {"M": [8, 8192], "N": [8192, 8192], "K": [8192, 8192]}
    fp8 = physics.roofline("gemm", "fp8", shape, a100)
    bf16 = physics.roofline("gemm", "bf16", shape, a100)
    assert fp8.choice.emulated_from == "fp8" and fp8.choice.dtype == "bf16"
    np.testing.assert_allclose(fp8.compute_us, bf16.compute_us)  # the bf16 pipe's rate, no faster
    assert np.all(fp8.time_us >= fp8.compute_us) and "no fp8 pipe" in fp8.note
    # fp8 operands stay 1 byte in memory: the memory-bound GEMV reads about half the bf16 one's bytes
    assert fp8.dram_bytes[0] < 0.6 * bf16.dram_bytes[0]


@pytest.mark.parametrize("device", ["v100-sxm2-32gb", "t4"])
def test_bf16_without_bf16_tensor_cores_is_bf16_bytes_at_the_fp32_fma_rate(catalog, device: str) -> None:
    """The settled disagreement: on a GPU without bf16 tensor cores cuBLAS reads bf16 (2 bytes) from memory
    and multiplies on the fp32 FMA pipe. The physics roofline counts those bytes, the same minimum the
    features count (``f_dram_bytes_min``), and the fp32 FMA peak, not the fp16 tensor pipe's."""
    import json

    import pandas as pd

    from components.features.analytical import analytical_features

    spec = catalog.get(device)
    shapes = [{"M": 1, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 4096}]
    roof = physics.roofline("gemm", "bf16", {k: [s[k] for s in shapes] for k in "MNK"}, spec)
    assert roof.choice.dtype == "fp32" and not roof.choice.tensor
    assert roof.peak_flops == pytest.approx(spec.peak_flops("fp32", tensor=False))
    assert roof.dram_bytes[0] == pytest.approx(2 * (4096 + 4096 * 4096 + 4096))  # bf16 x, W, y
    rows = pd.DataFrame(
        {
            "device_id": device,
            "family": "gemm",
            "op": "gemm",
            "dtype": "bf16",
            "shape_json": [json.dumps(s) for s in shapes],
            "params_json": None,
        }
    )
    features = analytical_features(rows, catalog)
    np.testing.assert_allclose(features["f_dram_bytes_min"].to_numpy(float), roof.dram_bytes, rtol=1e-9)
    # memory-bound GEMV: bf16's bytes at DRAM speed, half the fp32 kernel's time
    fp32 = physics.roofline("gemm", "fp32", {k: [s[k] for s in shapes] for k in "MNK"}, spec)
    assert roof.time_us[0] == pytest.approx(fp32.time_us[0] / 2, rel=1e-3)
    assert roof.time_us[1] == pytest.approx(fp32.time_us[1], rel=1e-9)  # compute-bound: fp32 FMA rate


def test_attention_pairs_causal_prefill_decode_and_window() -> None:
    s, kv = np.array([4.0, 1.0, 3.0]), np.array([4.0, 10.0, 10.0])
    assert physics.attention_pairs(s, kv).tolist() == [10.0, 10.0, 27.0]  # 1+2+3+4; 10; 8+9+10
    windowed = physics.attention_pairs(np.array([4.0, 1.0]), np.array([4.0, 10.0]), np.array([2.0, 4.0]))
    assert windowed.tolist() == [1.0 + 2.0 + 2.0 + 2.0, 4.0]


def test_allreduce_is_bound_by_the_link_and_assumes_pcie_without_one(catalog) -> None:
    h100, l40s = catalog.resolve("H100"), catalog.resolve("L40S")
    roof = physics.roofline("allreduce", "bf16", {"bytes": 1e8, "gpus": 8}, h100)
    assert roof.bound_pipe[0] == "link"
    assert roof.time_us[0] == pytest.approx(2 * 7 / 8 * 1e8 / 450e9 * 1e6)
    assert "PCIe" in physics.roofline("allreduce", "bf16", {"bytes": 1e8, "gpus": 2}, l40s).note


def test_rates_derive_from_one_clamped_runtime(catalog) -> None:
    h100 = catalog.resolve("H100")
    roof = physics.roofline("gemm", "bf16", {"M": [8, 8192], "N": [7168, 8192], "K": [5120, 8192]}, h100)
    rates = physics.derive(np.array([1.0, 1e9]), roof)  # 1 us is faster than physics allows: clamped
    assert rates["duration_us"][0] == pytest.approx(roof.time_us[0])
    assert rates["achieved_gbps"][0] == pytest.approx(3350.0)
    assert rates["gflops"][1] == pytest.approx(2 * 8192**3 / 1e9 / 1e3)
    assert rates["roofline_class"].tolist() == ["bandwidth", "compute"]


def test_an_unknown_family_or_missing_dimension_is_named() -> None:
    with pytest.raises(physics.PhysicsError, match="missing HKV"):
        physics.op_work("attention", "bf16", {"B": 1, "S": 1, "KV": 8, "H": 8, "D": 64})
    with pytest.raises(physics.PhysicsError, match="family 'fft'"):
        physics.op_work("fft", "bf16", {})
    with pytest.raises(physics.PhysicsError, match="conv shape: missing cin"):
        physics.op_work("conv", "bf16", {})


def test_every_gemm_dtype_gets_a_support_verdict_on_every_catalog_gpu(catalog) -> None:
    # The answer's note asks the catalog whether a dtype is native; a quantised format must never crash it.
    for spec in catalog.all():
        for dtype in physics.GEMM_DTYPES:
            reason = spec.unsupported_reason(dtype)
            assert reason is None or spec.name in reason
    assert catalog.resolve("H100").unsupported_reason("int4_wo") is None
    assert "fp8" in catalog.resolve("A100").unsupported_reason("fp8_block")
