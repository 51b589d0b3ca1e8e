"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the physics op's work, the config's indexer fields and
their errors, the composed steps, the indexer cache in memory, and the op's tiers from AIConfigurator's
measured module tables (bundled configs and tables read in place)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.deployments.compose import compose_phases, step_ops
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.memory import kv_bytes_per_token
from components.devices import load_catalog
from components.physics.dsa import causal_keys, latent_row_bytes
from components.physics.registry import op_work
from components.platform.config import DEFAULT_DATASETS_DIR

AIC = DEFAULT_DATASETS_DIR / "aiconfigurator" / "aic-core" / "src" / "aiconfigurator_core"
needs_data = pytest.mark.skipif(not (AIC / "model_configs").is_dir(), reason="AIConfigurator data absent")
# GLM-5's module on one GPU of TP 8
MODULE = {"H": 8, "HID": 6144, "QL": 2048, "KL": 512, "DR": 64, "DN": 192, "DV": 256, "IH": 32, "ID": 128}
MODULE["TOPK"] = 2048
SMALL_DSA = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "num_hidden_layers": 4,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "vocab_size": 32000,
    "kv_lora_rank": 128,
    "q_lora_rank": 256,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "index_n_heads": 8,
    "index_head_dim": 64,
    "index_topk": 256,
}


def _work(op=None, **dims):
    return op_work("dsa", "fp8_block", {**MODULE, **dims}, kv_dtype="fp8", op=op)


def test_causal_keys_match_a_direct_sum():
    for s, kv, cap in ((1, 1, 4), (5, 5, 3), (7, 20, 9), (64, 64, np.inf), (3, 100, 2048)):
        direct = sum(min(cap, j) for j in range(kv - s + 1, kv + 1))
        assert causal_keys(np.array([s]), np.array([kv]), cap)[0] == pytest.approx(direct)


@pytest.mark.parametrize("axis", ["B", "S", "KV"])
def test_dsa_work_grows_with_batch_chunk_and_context(axis):
    base = {"B": 2.0, "S": 256.0, "KV": 4096.0}
    values = np.array([256.0, 1024.0, 4096.0]) if axis == "S" else np.array([1.0, 4.0, 16.0]) * base[axis]
    work = _work(**{**base, axis: values})
    assert np.all(np.diff(work.flops) > 0) and np.all(np.diff(work.dram_bytes) > 0)


def test_an_fp8_latent_row_is_flashmlas_656_bytes():
    """512 fp8 latent values, 4 fp32 scales, 64 bf16 rotary values (vLLM / SGLang ``fp8_ds_mla``)."""
    assert latent_row_bytes(512, 64, 1.0) == 656 and latent_row_bytes(512, 64, 2.0) == 1152


def test_the_module_is_its_projections_and_its_attention():
    both, proj, attn = (_work(op=op, B=2.0, S=512.0, KV=4096.0) for op in (None, "proj", "attn"))
    assert both.flops[0] == pytest.approx(proj.flops[0] + attn.flops[0])
    assert both.dram_bytes[0] == pytest.approx(proj.dram_bytes[0] + attn.dram_bytes[0])
    longer = _work(op="proj", B=2.0, S=512.0, KV=65536.0)  # projections do not read the context
    assert longer.flops[0] == proj.flops[0] and longer.dram_bytes[0] == proj.dram_bytes[0]


def test_decode_reads_topk_latent_rows_and_every_indexer_key():
    """Past the top-k a longer context adds only indexer work: its keys' bytes and their scores."""
    short, long = _work(B=1.0, S=1.0, KV=4096.0), _work(B=1.0, S=1.0, KV=8192.0)
    index_key = 128 + 4  # fp8 key and its fp32 scale
    assert long.dram_bytes[0] - short.dram_bytes[0] == pytest.approx(4096 * index_key)
    assert long.flops[0] - short.flops[0] == pytest.approx(2 * 4096 * 32 * 128)


def test_config_reads_the_indexer_and_sizes_its_cache():
    m = model_shape(json.dumps(SMALL_DSA))
    assert m.is_dsa and (m.index_heads, m.index_head_dim, m.index_topk) == (8, 64, 256)
    dense = model_shape(json.dumps({k: v for k, v in SMALL_DSA.items() if not k.startswith("index")}))
    assert not dense.is_dsa
    gpu = load_catalog().resolve("h100-sxm")
    d, d_dense = (Deployment(model=x, gpu=gpu, isl=512, osl=64, kv_dtype="bf16") for x in (m, dense))
    assert kv_bytes_per_token(d) - kv_bytes_per_token(d_dense) == pytest.approx(4 * (64 + 4))
    assert m.parameters - dense.parameters == pytest.approx(4 * (8 * 64 * 256 + 1024 * (64 + 8)))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"index_n_heads": 0}, "index_n_heads: must be > 0"),
        ({"index_head_dim": None}, "index_head_dim: missing"),
        ({"index_topk": -1}, "index_topk: -1 is not a non-negative integer"),
        ({"kv_lora_rank": 0}, "index_topk: sparse .* without kv_lora_rank"),
        ({"indexer_types": ["full", "shared", "full", "shared"]}, "indexer_types: shared indexer layers"),
    ],
)
def test_dsa_config_errors_name_the_field(change, field):
    config = {k: v for k, v in {**SMALL_DSA, **change}.items() if v is not None}
    with pytest.raises(DeploymentError, match=field) as info:
        model_shape(config)
    assert "\n" not in str(info.value)


def test_dsa_steps_have_one_module_per_layer_in_two_parts_at_or_above_their_floor():
    gpu = load_catalog().resolve("mi300x")  # no table on this vendor: the roofline answers
    d = Deployment(model=model_shape(json.dumps(SMALL_DSA)), gpu=gpu, isl=1024, osl=64, concurrency=4)
    lines = step_ops(d, "decode", 4, 1.0, 1056.0)
    dsa = {x.shape["op"]: x for x in lines if x.family == "dsa"}  # the module: per token, per sequence
    assert sorted(dsa) == ["attn", "proj"] and all(
        x.count == 4 and x.kv_dtype == "bf16" for x in dsa.values()
    )
    assert dsa["attn"].kind == "attention" and dsa["proj"].kind == "attention_proj"
    assert not [x for x in lines if x.family == "attention"]
    phases = compose_phases(d)
    for part in (phases.prefill, phases.decode):
        for line in part:
            assert line.time_us >= line.floor_us > 0 or line.count == 0


@needs_data
def test_bundled_glm5_is_a_dsa_model_and_glm52_is_refused_by_its_layer_kind():
    m = model_shape("zai-org/GLM-5-FP8")
    assert m.is_dsa and m.dsa_dims(8) == {**MODULE, "H": 8.0}
    assert m.parameters == pytest.approx(744e9, rel=0.01)
    with pytest.raises(DeploymentError, match="indexer_types: shared indexer layers"):
        model_shape("zai-org/GLM-5.2")


@needs_data
@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("google/gemma-4-26B-A4B", "global_head_dim: global attention layers with another shape"),
        ("nvidia/Gemma-4-31B-IT-NVFP4", "global_head_dim: global attention layers with another shape"),
        ("deepseek-ai/DeepSeek-V4-Flash", "compress_ratios: compressed sparse attention layers"),
        ("moonshotai/Kimi-K3", "linear_attn_config: Kimi Delta Attention"),
        ("nvidia/GLM-5.2-NVFP4", "indexer_types: shared indexer layers"),
        ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "block_configs: layers of their own shape each"),
    ],
)
def test_refusals_name_the_layer_kind_not_modelled(model, reason):
    """A model with a layer kind the composition lacks is refused by that kind, not by a field that
    happens to be missing (Gemma 4's MoE names its top-k top_k_experts)."""
    with pytest.raises(DeploymentError, match=reason) as info:
        model_shape(model)
    assert "not modelled" in str(info.value) and "missing" not in str(info.value)
