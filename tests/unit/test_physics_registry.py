"""The op-family registry (components/physics): one definition per op, and each settled disagreement.

Each ``test_settled_*`` pins a figure two copies of the physics used to disagree on, by what the kernel does.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components.devices import load_catalog
from components.features.analytical import analytical_features
from components.ingest.derived import op_flops
from components.physics import dtypes, moe, registry
from components.physics.base import PhysicsError
from components.physics.registry import op_work


def test_every_family_and_alias_resolves_and_costs_a_small_shape() -> None:
    shapes = {
        "gemm": {"M": 64, "N": 32, "K": 16},
        "attention": {"B": 1, "S": 8, "KV": 8, "H": 4, "HKV": 2, "D": 16},
        "moe": {"T": 8, "E": 8, "topk": 2, "H": 32, "I": 16},
        "allreduce": {"bytes": 1 << 20, "gpus": 4},
        "elementwise": {"N": 1000},
        "softmax": {"B": 4, "H": 100},
        "layernorm": {"B": 4, "H": 100},
        "rmsnorm": {"B": 4, "H": 100},
        "conv": {"B": 1, "cin": 3, "cout": 8, "ksize": 3, "insize": 32},
        "gdn": {"B": 2, "S": 16, "HK": 2, "HV": 4, "DK": 8, "DV": 8},
        "dsa": {
            "B": 1,
            "S": 8,
            "KV": 8,
            "H": 2,
            "HID": 64,
            "QL": 16,
            "KL": 16,
            "DR": 4,
            "DN": 8,
            "DV": 8,
            "IH": 2,
            "ID": 8,
            "TOPK": 4,
        },
        "mamba2": {"B": 2, "S": 16, "H": 4, "P": 8, "G": 1, "N": 8},
    }
    assert set(shapes) == set(registry.REGISTRY)
    for name, fam in registry.REGISTRY.items():
        for alias in fam.names:
            work = op_work(alias, "bf16", shapes[name], op="add" if name == "elementwise" else None)
            assert work.dram_bytes[0] > 0 and work.flops[0] >= 0, alias
    with pytest.raises(PhysicsError, match="family 'fft'"):
        registry.family("fft")


def test_one_dtype_table_answers_both_spelling_questions() -> None:
    assert dtypes.canonical_dtype("torch.bfloat16") == "bf16"
    assert dtypes.canonical_dtype("FP4") == "nvfp4" and dtypes.precision_of("fp4") == "fp4"
    assert dtypes.canonical_dtype("w8a8") == "int8" and dtypes.canonical_dtype("int4") == "int4_wo"
    assert dtypes.precision_of("fp8_block") == "fp8" and dtypes.precision_of("int64") is None
    assert dtypes.precision_of("mixed") is None
    with pytest.raises(PhysicsError, match="'fp12'"):
        dtypes.canonical_dtype("fp12")
    with pytest.raises(ValueError, match="'fp12'"):
        dtypes.precision_of("fp12")
    assert dtypes.traced_dtype("int64") == "fp64" and dtypes.traced_dtype("float8_e4m3fn") == "fp8"
    assert dtypes.element_bytes("nvfp4") == 0.5 and dtypes.element_bytes("unknown") == 4.0


def test_settled_moe_experts_touched_is_the_expected_distinct_count() -> None:
    # One token reads exactly its topk experts; min(E, T*topk) agrees there but over-counts at T = 16:
    # 16 tokens x top-2 of 64 experts hit 64*(1-(62/64)^16) = 25.5 experts on average, not 32.
    assert moe.experts_touched(np.array([1.0]), np.array([64.0]), np.array([2.0]))[0] == pytest.approx(2.0)
    hit = moe.experts_touched(np.array([16.0]), np.array([64.0]), np.array([2.0]))[0]
    assert hit == pytest.approx(64 * (1 - (62 / 64) ** 16)) and 25 < hit < 26
    # Monte Carlo of uniform routing (topk distinct experts per token) agrees within 1%.
    rng = np.random.default_rng(0)
    trials = [len({e for _ in range(16) for e in rng.choice(64, 2, replace=False)}) for _ in range(4000)]
    assert np.mean(trials) == pytest.approx(hit, rel=0.01)
    # and the bytes read follow: a decode step (T = 1) reads topk experts' weights, not E's
    w = op_work("moe", "bf16", {"T": 1, "E": 64, "topk": 2, "H": 1024, "I": 512})
    weights = 2 * 3 * 1024 * 512 * 2.0
    assert w.dram_bytes[0] == pytest.approx(weights + 1024 * 4 + 2 * 2 * 512 * 2)


def test_settled_moe_w13_is_gate_and_up_fused() -> None:
    # vLLM fused_moe's w13 holds gate and up: H -> 2N per routed row; w2 is N -> H; the layer is both.
    shape = {"M": 32, "E": 8, "topk": 2, "H": 256, "N": 128}
    rows = 32 * 2
    assert op_flops("moe", "w13", shape) == 2 * rows * 256 * (2 * 128)
    assert op_flops("moe", "w2", shape) == 2 * rows * 128 * 256
    layer = op_work("moe", "bf16", {"T": 32, "E": 8, "topk": 2, "H": 256, "I": 128}).flops[0]
    assert layer == op_flops("moe", "w13", shape) + op_flops("moe", "w2", shape)


def test_settled_attention_causal_prefill_is_half_and_decode_sees_all_keys() -> None:
    base = {"B": 1, "H": 8, "HKV": 8, "D": 128}
    prefill = op_work("attention", "bf16", {**base, "S": 4096, "KV": 4096}).flops[0]
    full = op_work("attention", "bf16", {**base, "S": 4096, "KV": 4096, "causal": 0}).flops[0]
    assert full == 4 * 8 * 128 * 4096 * 4096
    assert prefill / full == pytest.approx(4097 / 8192)
    decode = op_work("attention", "bf16", {**base, "S": 1, "KV": 4096}).flops[0]
    assert decode == 4 * 8 * 128 * 4096
    # PyTorch SDPA's is_causal is top-left aligned: 4 queries over 10 keys see 1+2+3+4 keys
    top_left = op_work("attention", "bf16", {**base, "S": 4, "KV": 10, "causal": 2}).flops[0]
    assert top_left == 4 * 8 * 128 * 10
    # the score matrix never reaches DRAM: Q and O once, K and V once per KV head
    gqa = op_work("attention", "bf16", {**base, "HKV": 2, "S": 4096, "KV": 4096}).dram_bytes[0]
    assert gqa == 2 * 4096 * 8 * 128 * 2 + 2 * 4096 * 2 * 128 * 2


def test_settled_linear_reads_its_shared_weight_once() -> None:
    shape = {"B": 4, "M": 128, "N": 256, "K": 64}
    linear, bmm = op_work("linear", "bf16", shape).dram_bytes[0], op_work("bmm", "bf16", shape).dram_bytes[0]
    assert bmm - linear == 3 * 64 * 256 * 2


def test_settled_weight_only_gemm_reads_quantised_weights() -> None:
    shape = {"M": 16, "N": 4096, "K": 4096}
    int4 = op_work("gemm", "int4_wo", shape).dram_bytes[0]
    assert int4 == 2 * 16 * 4096 + 0.5 * 4096 * 4096 + 2 * 16 * 4096


def test_features_and_measured_rows_count_the_same_flops() -> None:
    """A measured row's GFLOP/s (ingest) and an answer's (features) divide the same FLOPs."""
    rows = [
        ("moe", "w13", "bf16", {"M": 64, "E": 8, "topk": 2, "H": 1024, "N": 512}),
        ("linear", "linear", "fp32", {"B": 2, "M": 128, "N": 256, "K": 64}),
        ("elementwise", "gelu", "fp32", {"B": 64, "H": 1024}),
        ("layernorm", "ln", "fp32", {"B": 64, "H": 1024}),
        ("conv", "conv", "fp32", {"B": 2, "Input_Channel": 3, "Output_Channel": 8, "Input_Size": 16,
                                  "Kernel_Size": 3, "Stride": 1, "Padding": 1}),
    ]  # fmt: skip
    frame = pd.DataFrame(
        {
            "device_id": "h100-sxm",
            "family": [r[0] for r in rows],
            "op": [r[1] for r in rows],
            "dtype": [r[2] for r in rows],
            "shape_json": [json.dumps(r[3]) for r in rows],
            "params_json": None,
        }
    )
    features = analytical_features(frame, load_catalog())
    expected = [op_flops(family, op, shape) for family, op, _, shape in rows]
    assert features["f_flops"].tolist() == pytest.approx(expected)


@pytest.mark.parametrize("device_id", ["v100-sxm2-16gb", "t4"])
def test_settled_bf16_without_bf16_tensor_cores_runs_on_the_fp32_fma_pipe(device_id: str) -> None:
    """No bf16 tensor-core instruction before sm_80: cuBLAS runs a bf16 GEMM on V100/T4 as fp32 FMA math on
    up-converted inputs (measured slower than its fp32 GEMM), not on the fp16 tensor pipe. The physics
    (``pipe_for``) and the features (``f_peak_compute_flops``) both answer the fp32 vector peak."""
    from components.physics.roofline import pipe_for

    catalog = load_catalog()
    spec = catalog.get(device_id)
    fp32_vector = spec.peak_flops("fp32", tensor=False)
    assert not spec.has_pipe("bf16", tensor=True) and spec.has_pipe("fp16", tensor=True)
    assert dtypes.tensor_precisions("bf16") == ("bf16",)
    choice = pipe_for("bf16", spec)
    assert (choice.dtype, choice.tensor, choice.emulated_from) == ("fp32", False, "bf16")
    assert choice.peak_flops == pytest.approx(fp32_vector)
    frame = pd.DataFrame(
        {
            "device_id": [device_id, device_id, "a100-sxm4-80gb"],
            "family": "gemm",
            "op": "gemm",
            "dtype": ["bf16", "fp16", "bf16"],
            "shape_json": json.dumps({"M": 4096, "N": 4096, "K": 4096}),
            "params_json": None,
        }
    )
    features = analytical_features(frame, catalog)
    bf16, fp16, a100 = (features.iloc[i] for i in range(3))
    assert bf16["f_uses_tensor"] == 0.0 and bf16["f_peak_compute_flops"] == pytest.approx(fp32_vector)
    assert fp16["f_uses_tensor"] == 1.0 and fp16["f_peak_compute_flops"] == pytest.approx(
        spec.peak_flops("fp16", tensor=True)
    )  # the fp16 tensor pipe stays fp16's own
    a100_spec = catalog.get("a100-sxm4-80gb")
    assert a100["f_peak_compute_flops"] == pytest.approx(a100_spec.peak_flops("bf16", tensor=True))
    assert pipe_for("bf16", a100_spec).peak_flops == pytest.approx(a100["f_peak_compute_flops"])
