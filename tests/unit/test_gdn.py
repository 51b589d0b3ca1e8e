"""Gated DeltaNet (linear-attention) layers: the physics op's work, a hybrid config's shape, its composed
steps and its fixed-size per-request state (Qwen3.5/3.6 configs bundled with AIConfigurator)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.deployments.compose import compose_phases, memory_check, step_ops
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.memory import kv_bytes_per_token, state_bytes_per_request
from components.devices import load_catalog
from components.physics.registry import op_work
from components.platform.config import DEFAULT_DATASETS_DIR

AIC = DEFAULT_DATASETS_DIR / "aiconfigurator" / "aic-core" / "src" / "aiconfigurator_core" / "model_configs"
needs_data = pytest.mark.skipif(not AIC.is_dir(), reason="AIConfigurator model configs not present")
QWEN35 = "nvidia/Qwen3.5-122B-A10B-NVFP4"
# Qwen3.5-122B's GDN heads, one GPU of TP 1
HEADS = {"HK": 16, "HV": 64, "DK": 128, "DV": 128, "K": 4}
HYBRID = {
    "architectures": ["Qwen3NextForCausalLM"],
    "num_hidden_layers": 8,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "intermediate_size": 8192,
    "vocab_size": 151936,
    "layer_types": ["linear_attention"] * 3
    + ["full_attention"]
    + ["linear_attention"] * 3
    + ["full_attention"],
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
}


def _work(**dims):
    return op_work("gdn", "bf16", {**HEADS, **dims}, kv_dtype="fp32")


@pytest.mark.parametrize("axis", ["B", "S", "HV", "DK", "DV", "K"])
def test_gdn_work_is_positive_and_monotone_in_every_dimension(axis):
    base = {"B": 4.0, "S": 256.0, **HEADS}
    values = np.array([1, 2, 3, 8, 64, 65, 1000], dtype="float64") + (1 if axis == "K" else 0)
    work = op_work("gdn", "bf16", {**base, axis: values}, kv_dtype="fp32")
    for part in (work.flops, work.dram_bytes):
        assert np.all(part > 0)
        assert np.all(np.diff(part) > 0), (axis, part)


def test_gdn_decode_step_reads_and_writes_the_recurrent_state_once():
    one = _work(B=1, S=1)
    state = HEADS["HV"] * HEADS["DK"] * HEADS["DV"] * 4.0  # fp32 state of one sequence
    assert 2 * state < one.dram_bytes[0] < 2.2 * state  # the state dominates a decode step's bytes
    # the state is per sequence, not per token: a 1000-token chunk moves it once more, not 1000 times
    chunk = _work(B=1, S=1000)
    assert chunk.dram_bytes[0] < 2 * state + 1000 * 4 * (2 * 16 * 128 + 2 * 64 * 128)
    # a bf16 state halves the state traffic
    half = op_work("gdn", "bf16", {**HEADS, "B": 1, "S": 1}, kv_dtype="bf16")
    assert half.dram_bytes[0] < 0.6 * one.dram_bytes[0]


def test_gdn_chunked_prefill_flops_per_token_exceed_the_recurrent_step():
    # the chunked WY form adds C x C products: per token above decode's 6 DK DV per value head, and at
    # most a few times it (C = 64 chunks)
    per_token_decode = _work(B=1, S=1).flops[0]
    per_token_prefill = _work(B=1, S=4096).flops[0] / 4096
    assert per_token_decode < per_token_prefill < 3 * per_token_decode
    assert per_token_decode >= 6 * HEADS["HV"] * HEADS["DK"] * HEADS["DV"]


def test_hybrid_config_parses_gdn_fields_and_keeps_attention_for_the_rest():
    shape = model_shape(json.dumps(HYBRID))
    assert (shape.linear_layers, shape.attention_layers) == (6, 2)
    assert (shape.linear_key_heads, shape.linear_value_heads, shape.state_dtype) == (16, 32, "fp32")
    assert shape.parameter_counts()["linear_attention"] > 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"linear_num_value_heads": None}, "linear_num_value_heads"),
        ({"linear_num_value_heads": 24}, "linear_num_value_heads"),  # not a multiple of the key heads
        ({"layer_types": ["linear_attention"] * 7}, "layer_types"),  # 7 entries for 8 layers
        ({"layer_types": ["linear_attention"] * 8}, "layer_types"),  # no attention layer
        ({"linear_key_head_dim": -1}, "linear_key_head_dim"),
        ({"mamba_ssm_dtype": "float7"}, "mamba_ssm_dtype"),
    ],
)
def test_bad_hybrid_configs_name_the_field(change, field):
    with pytest.raises(DeploymentError, match=field) as info:
        model_shape({**HYBRID, **change})
    assert "\n" not in str(info.value)


def test_tp_must_divide_the_gdn_key_heads():
    gpu = load_catalog().resolve("h200")
    with pytest.raises(DeploymentError, match="tp 4: does not divide linear_num_key_heads 2"):
        Deployment(
            model=model_shape({**HYBRID, "linear_num_key_heads": 2, "num_attention_heads": 16}),
            gpu=gpu,
            isl=128,
            osl=8,
            tp=4,
        )


def test_gdn_state_is_fixed_per_request_and_the_kv_cache_counts_attention_layers_only():
    gpu = load_catalog().resolve("h200")
    d = Deployment(model=model_shape(HYBRID), gpu=gpu, isl=1024, osl=128)
    dense = model_shape({**HYBRID, "layer_types": ["full_attention"] * 8})
    assert kv_bytes_per_token(d) == pytest.approx(kv_bytes_per_token(d.with_(model=dense)) * 2 / 8)
    state = state_bytes_per_request(d)
    # 6 layers x (32 x 128 x 128 fp32 + (2 x 16 x 128 + 32 x 128) x 3 bf16)
    assert state == pytest.approx(6 * (32 * 128 * 128 * 4 + (4096 + 4096) * 3 * 2))
    assert state_bytes_per_request(d.with_(isl=8192)) == state  # does not grow with the context
    # fewer KV bytes per request than the all-attention model: more requests fit
    held = memory_check(d.with_(isl=65536, concurrency=100_000))["concurrent_requests"]
    held_dense = memory_check(d.with_(model=dense, isl=65536, concurrency=100_000))["concurrent_requests"]
    assert held > held_dense


def test_hybrid_steps_have_gdn_ops_and_stay_above_their_floor():
    gpu = load_catalog().resolve("h200")
    d = Deployment(model=model_shape(HYBRID), gpu=gpu, isl=1024, osl=64, concurrency=8)
    lines = step_ops(d, "decode", 8, 1.0, 1056.0)
    gdn = [x for x in lines if x.family == "gdn"]
    attn = [x for x in lines if x.family == "attention"]
    assert len(gdn) == 1 and gdn[0].count == 6 and gdn[0].kv_dtype == "fp32"
    assert sum(x.count for x in attn) == 2
    phases = compose_phases(d)
    for part in (phases.prefill, phases.decode):
        for line in part:
            assert line.time_us >= line.floor_us > 0 or line.count == 0
        assert any(x.kind == "linear_attention" and x.tier == "roofline" for x in part)


@needs_data
def test_bundled_qwen35_is_composed_with_its_gdn_layers():
    shape = model_shape(QWEN35)
    assert (shape.layers, shape.linear_layers, shape.attention_layers) == (48, 36, 12)
    assert shape.attn_output_gate and shape.is_moe
    assert 100e9 < shape.parameters < 130e9  # Qwen3.5-122B-A10B


@needs_data
def test_measured_gdn_tier_reads_the_gpus_table_and_leaves_the_rest_to_the_roofline():
    from components.deployments.gdn_tables import gdn_measured, gdn_table

    gpu = load_catalog().resolve("h200")
    table, source = gdn_table(str(DEFAULT_DATASETS_DIR), "h200", "vllm")
    assert source.startswith("vllm ")  # the framework's own table where it has a complete one
    heads = {"HK": 8.0, "HV": 32.0, "DK": 128.0, "DV": 128.0, "K": 4.0}  # Qwen3.5-122B at TP 2
    point = table[(table.phase == "generation") & (table.batch_size == 16) & (table.num_v_heads == 32)]
    point = point[(point.num_k_heads == 8) & (point.seq_len == 1)]
    # decode at a measured batch: the table's conv + rule; a batch between two points: between them;
    # heads the table lacks and a batch beyond it: NaN (the roofline answers)
    times, _ = gdn_measured(gpu, "vllm", {**heads, "B": [16.0, 24.0, 1e5], "S": 1.0}, DEFAULT_DATASETS_DIR)
    assert times[0] == pytest.approx(float(point.latency.iloc[0]))
    assert np.isnan(times[2])
    at32, _ = gdn_measured(gpu, "vllm", {**heads, "B": 32.0, "S": 1.0}, DEFAULT_DATASETS_DIR)
    assert min(times[0], at32[0]) <= times[1] <= max(times[0], at32[0])
    lacking, _ = gdn_measured(gpu, "vllm", {**heads, "HV": 40.0, "B": 16.0, "S": 1.0}, DEFAULT_DATASETS_DIR)
    assert np.isnan(lacking).all()
    # a prefill chunk grows with its tokens
    chunks, _ = gdn_measured(
        gpu, "vllm", {**heads, "B": 1.0, "S": [256.0, 1024.0, 4096.0]}, DEFAULT_DATASETS_DIR
    )
    assert np.all(np.diff(chunks) > 0)
    assert (
        gdn_measured(
            load_catalog().resolve("a10g"), None, {**heads, "B": 1.0, "S": 1.0}, DEFAULT_DATASETS_DIR
        )
        is None
    )


def test_tpot_floor_reads_the_gdn_states_of_the_decode_batch():
    from components.deployments.serve import physics_floors
    from components.deployments.stepmodel import build_step_models

    gpu = load_catalog().resolve("h200")
    d = Deployment(model=model_shape(HYBRID), gpu=gpu, isl=1024, osl=64, concurrency=64)
    step = build_step_models([d])[0]
    floor = physics_floors(d, step, 64.0)["tpot"]
    dram = float(gpu.dram_gbps) * 1e9
    states = 64 * state_bytes_per_request(d)
    assert floor * 1e-6 * dram >= states > 0  # the 64 requests' fixed states at least
    # decode steps of the step model carry the GDN op: a batch of 64 costs more than a batch of 1
    assert step.decode_us(64, 1056.0) > step.decode_us(1, 1056.0)


@needs_data
def test_models_list_shows_every_bundled_qwen35_and_qwen36_modelled():
    from components.deployments.model_list import bundled_models

    hybrids = [m for m in bundled_models() if "Qwen3.5" in m["name"] or "Qwen3.6" in m["name"]]
    assert len(hybrids) >= 8
    assert all(m["modelled"] for m in hybrids), [m["reason"] for m in hybrids if not m["modelled"]]


@needs_data
def test_gdn_tiers_measured_on_its_gpu_transferred_to_another_nvidia_gpu_roofline_elsewhere():
    from components.deployments.ops import sol_time, table_op_time

    catalog = load_catalog()
    shape = {"B": [1.0, 8.0], "S": 1.0, "HK": 8.0, "HV": 32.0, "DK": 128.0, "DV": 128.0, "K": 4.0}
    tiers = {}
    for gpu in ("h200", "b200", "mi300x"):
        spec = catalog.resolve(gpu)
        out = table_op_time("gdn", "bf16", shape, spec, "fp32", "vllm")
        tiers[gpu] = str(np.asarray(out.tier, dtype=object).ravel()[0])
        assert np.all(out.duration_us > 0)
        # time_ops lifts any row to its floor; the op times themselves are finite
        assert np.all(np.isfinite(out.duration_us)) and np.all(
            sol_time("gdn", "bf16", shape, spec, "fp32") > 0
        )
    assert tiers["h200"] == "measured:gdn vllm 0.24.0"
    assert tiers["b200"].startswith("transfer:gdn h200 vllm")
    assert tiers["mi300x"] == "roofline"  # another vendor's kernels: no NVIDIA table transfers
