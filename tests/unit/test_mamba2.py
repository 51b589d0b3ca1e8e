"""Mamba2 hybrids (Nemotron-H, Nemotron-3): the mamba2 op's work, the block layout read from a config and
its errors, the composed steps, the fixed per-request state, and the op's tiers from AIConfigurator's
measured conv tables (bundled configs and tables read in place)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.deployments.compose import compose_phases, step_ops
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.memory import kv_bytes_per_token, memory_check, state_bytes_per_request
from components.devices import load_catalog
from components.physics.registry import op_work
from components.platform.config import DEFAULT_DATASETS_DIR

AIC = DEFAULT_DATASETS_DIR / "aiconfigurator" / "aic-core" / "src" / "aiconfigurator_core"
needs_data = pytest.mark.skipif(not (AIC / "model_configs").is_dir(), reason="AIConfigurator data absent")
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
# Nemotron-3 Nano's Mamba2 block at TP 1
BLOCK = {"H": 64, "P": 64, "G": 8, "N": 128, "K": 4, "C": 128}
HYBRID = {
    "architectures": ["NemotronHForCausalLM"],
    "hybrid_override_pattern": "M-M*-ME",
    "num_hidden_layers": 7,
    "hidden_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 4096,
    "mlp_hidden_act": "relu2",
    "vocab_size": 32000,
    "mamba_num_heads": 32,
    "mamba_head_dim": 64,
    "n_groups": 4,
    "ssm_state_size": 64,
    "conv_kernel": 4,
    "chunk_size": 128,
    "mamba_ssm_cache_dtype": "float32",
    "n_routed_experts": 16,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 512,
    "moe_shared_expert_intermediate_size": 1024,
}


def _work(op=None, **dims):
    return op_work("mamba2", "bf16", {**BLOCK, **dims}, kv_dtype="fp32", op=op)


@pytest.mark.parametrize("axis", ["B", "S", "H", "N"])
def test_mamba2_work_grows_in_every_dimension(axis):
    base = {"B": 2.0, "S": 512.0}
    values = np.array([1.0, 2.0, 4.0]) * {**BLOCK, **base}[axis]
    work = _work(**{**base, axis: values})
    assert np.all(np.diff(work.flops) > 0) and np.all(np.diff(work.dram_bytes) > 0)


def test_decode_step_reads_and_writes_the_ssm_and_conv_state_once():
    one = _work(B=1.0, S=1.0)
    ssm = 64 * 64 * 128 * 4  # H P N at fp32
    conv = (64 * 64 + 2 * 8 * 128) * 3 * 2  # channels x (K - 1) at bf16
    per_token = (64 * 64 + 2 * 8 * 128 + 64 + 64 * 64) * 2
    assert one.dram_bytes[0] == pytest.approx(per_token + 2 * (ssm + conv))
    assert one.flops[0] == pytest.approx(
        _work("conv", B=1.0, S=1.0).flops[0] + _work("scan", B=1.0, S=1.0).flops[0]
    )


def test_chunked_scan_costs_more_per_token_than_the_recurrent_step():
    prefill, decode = _work("scan", B=1.0, S=1024.0), _work("scan", B=1.0, S=1.0)
    assert prefill.flops[0] / 1024 > decode.flops[0]


def test_block_layout_is_read_from_the_pattern():
    m = model_shape(json.dumps(HYBRID))
    assert (m.layers, m.mamba_layers, m.attention_layers, m.mlp_blocks, m.moe_layers) == (7, 3, 1, 2, 1)
    assert not m.gated_mlp and m.shared_experts == 2 and m.state_dtype == "fp32"
    listed = {k: v for k, v in HYBRID.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    names = {"M": "mamba", "-": "mlp", "*": "attention", "E": "moe"}
    listed["layers_block_type"] = [names[c] for c in HYBRID["hybrid_override_pattern"]]
    assert model_shape(json.dumps(listed)) == m.__class__(**{**m.__dict__, "name": model_shape(listed).name})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hybrid_override_pattern": "M-X*"}, "hybrid_override_pattern: 'X' blocks are not modelled"),
        ({"hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern: 4 blocks for num_hidden_layers 7"),
        ({"hybrid_override_pattern": ""}, "hybrid_override_pattern: not a string"),
        ({"mamba_num_heads": 0}, "mamba_num_heads: must be > 0"),
        ({"ssm_state_size": None}, "ssm_state_size: missing"),
        ({"n_groups": 3}, "n_groups: 3 does not divide mamba_num_heads 32"),
        ({"mamba_ssm_cache_dtype": "float7"}, "mamba_ssm_cache_dtype 'float7': unknown dtype"),
        ({"layer_types": ["linear_attention"] * 7}, "layer_types: linear_attention layers in a Mamba2"),
        ({"num_attention_heads": 0}, "num_attention_heads: must be > 0"),
    ],
)
def test_block_layout_errors_name_the_field(change, message):
    config = {k: v for k, v in {**HYBRID, **change}.items() if v is not None}
    with pytest.raises(DeploymentError, match=message) as info:
        model_shape(config)
    assert "\n" not in str(info.value)


def test_tp_must_divide_the_mamba_heads_and_groups():
    gpu = load_catalog().resolve("h100-sxm")
    m = model_shape(json.dumps(HYBRID))
    with pytest.raises(DeploymentError, match="tp 8: does not divide n_groups 4"):
        Deployment(model=m, gpu=gpu, isl=128, osl=8, tp=8)


def test_mamba_state_is_fixed_per_request_and_only_attention_blocks_cache_kv():
    gpu = load_catalog().resolve("h200")
    d = Deployment(model=model_shape(json.dumps(HYBRID)), gpu=gpu, isl=1024, osl=64, concurrency=4)
    ssm, conv = 32 * 64 * 64 * 4, (32 * 64 + 2 * 4 * 64) * 3 * 2
    assert state_bytes_per_request(d) == pytest.approx(3 * (ssm + conv))
    assert state_bytes_per_request(d.with_(isl=65536)) == state_bytes_per_request(d)
    assert kv_bytes_per_token(d) == pytest.approx(1 * 2 * 2 * 128 * 2)  # one attention block, 2 KV heads
    assert memory_check(d)["kv_cache_gb"] > 0


def test_block_steps_have_one_line_per_block_kind_at_or_above_their_floor():
    gpu = load_catalog().resolve("mi300x")  # no table for this vendor: the roofline answers
    d = Deployment(model=model_shape(json.dumps(HYBRID)), gpu=gpu, isl=1024, osl=64, concurrency=4, tp=2)
    lines = step_ops(d, "decode", 4, 1.0, 1056.0)
    counts = {
        f: sum(x.count for x in lines if x.family == f and x.kind != "moe") for f in ("mamba2", "attention")
    }
    assert counts == {"mamba2": 3, "attention": 1}
    assert sum(x.count for x in lines if x.kind == "allreduce") == 7  # one per block
    assert lines[0].family == "rmsnorm" and lines[0].count == 7  # each block's pre-norm
    assert any(x.family == "moe" and x.shape["I"] == pytest.approx(512 * 2 / 3) for x in lines)  # relu2
    phases = compose_phases(d)
    for part in (phases.prefill, phases.decode):
        for line in part:
            assert line.time_us >= line.floor_us > 0 or line.count == 0


@needs_data
@pytest.mark.parametrize(
    ("model", "billions"),
    [
        ("nvidia/Nemotron-H-56B-Base-8K", 56),
        (NANO, 31.6),  # 31.6 B total, 3 B active
        ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120),
        ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 550),
    ],
)
def test_bundled_nemotron_hybrids_parse_to_their_size(model, billions):
    m = model_shape(model)
    assert (
        m.mamba_layers > 0
        and m.attention_layers > 0
        and m.parameters == pytest.approx(billions * 1e9, rel=0.02)
    )


@needs_data
def test_models_list_shows_every_bundled_nemotron_hybrid_modelled():
    from components.deployments.model_list import bundled_models

    hybrids = [m for m in bundled_models() if "Nemotron-H" in m["name"] or "Nemotron-3" in m["name"]]
    assert len(hybrids) >= 9
    assert all(m["modelled"] for m in hybrids), [m["reason"] for m in hybrids if not m["modelled"]]


@needs_data
def test_a_tp_share_of_the_conv_is_read_at_its_channel_count():
    """The conv1d runs over H P + 2 G N channels: Nano at TP 2 (3,072 channels) sits between the tables'
    1,536 (a 1k generic block) and 6,144 (Nano whole), and at TP 4 it is the 1,536 rows themselves."""
    from components.deployments.gdn_tables import gdn_measured

    gpu = load_catalog().resolve("h200")
    m = model_shape(NANO)
    shape = {"B": [1.0, 64.0], "S": 1.0}
    times = {
        tp: gdn_measured(gpu, "trtllm", {**shape, **m.mamba_dims(tp)}, DEFAULT_DATASETS_DIR, "mamba2")[0]
        for tp in (1, 2, 4)
    }
    assert np.all(np.isfinite(times[2])) and np.all(times[4] <= times[2]) and np.all(times[2] <= times[1])
    generic_1k = {"H": 16, "P": 64, "G": 4, "N": 64, "K": 4}
    same, _ = gdn_measured(gpu, "trtllm", {**shape, **generic_1k}, DEFAULT_DATASETS_DIR, "mamba2")
    np.testing.assert_allclose(times[4], same)
