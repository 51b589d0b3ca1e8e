"""The mixers beside softmax attention and MLA, one GPU's ops each: Gated DeltaNet layers (Qwen3.5/3.6),
DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5), and the block layout of Mamba2 hybrids (Nemotron-H,
Nemotron-3), where every layer is ONE block -- a Mamba2 mixer, attention, an MLP or an MoE -- with one norm,
one residual add and one TP all-reduce each. ``compose._layer_ops`` calls them.
"""

from __future__ import annotations

from components.deployments.compose import (
    LayerSizes,
    OpLine,
    _attention_ops,
    _mlp_ops,
    gemm_dtype,
)
from components.deployments.config import Deployment

ACT_BYTES = 2  # activations and all-reduce messages in 16-bit


def gdn_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """The Gated DeltaNet mixer of ``layers`` linear-attention layers on one GPU (vLLM's and SGLang's
    Qwen3-Next/3.5 layout): in_proj (q, k, v, z) and the a/b gate projection as GEMMs, the conv1d + gated
    delta rule as one ``gdn`` op (a prefill chunk per sequence, or one recurrent decode step), the gated
    RMSNorm (norm x SiLU(z)) and out_proj. Its per-request state is fixed-size (``memory``)."""
    tokens, batch, q_len, _ctx, layers = sizes
    m, tp, wd, act = d.model, d.tp, gemm_dtype(d), "bf16"
    dims = m.linear_dims(tp)
    k, v = dims["HK"] * dims["DK"], dims["HV"] * dims["DV"]
    gdn = {"B": batch, "S": q_len, **dims}
    return [
        OpLine(
            phase,
            "gemm",
            "gemm",
            wd,
            {"M": tokens, "N": 2 * k + 2 * v + 2 * dims["HV"], "K": m.hidden},
            layers,
        ),
        OpLine(phase, "linear_attention", "gdn", act, gdn, layers, kv_dtype=m.state_dtype),
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens * dims["HV"], "H": dims["DV"]}, layers),
        OpLine(phase, "gate", "elementwise", act, {"N": tokens * v, "op": "silu_and_mul"}, layers),
        OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": m.hidden, "K": v}, layers),
    ]


def dsa_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """DeepSeek Sparse Attention of one layer on one GPU (DeepSeek-V3.2, GLM-5): the norms and residual
    adds around it, and the attention module AIConfigurator times (``dsa_tables``) as the ``dsa`` op in two
    parts: its projections (``proj``: per token -- a step runs them once for all its tokens) and its
    indexer + top-k + sparse MLA (``attn``: per sequence and context, like attention)."""
    tokens, batch, q_len, ctx, layers = sizes
    m, act, wd = d.model, "bf16", gemm_dtype(d)
    module = {"B": batch, "S": q_len, "KV": ctx, **m.dsa_dims(d.tp)}
    return [
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": m.hidden}, 2 * layers),
        OpLine(phase, "residual", "elementwise", act, {"N": tokens * m.hidden, "op": "add"}, 2 * layers),
        OpLine(phase, "attention_proj", "dsa", wd, {**module, "op": "proj"}, layers, kv_dtype=d.kv_dtype),
        OpLine(phase, "attention", "dsa", wd, {**module, "op": "attn"}, layers, kv_dtype=d.kv_dtype),
    ]


def mamba_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """``layers`` Mamba2 mixers on one GPU (vLLM's / TensorRT-LLM's Nemotron-H layout): in_proj (z, x, B,
    C, dt) as a GEMM, the conv1d + SSD scan as one ``mamba2`` op (a prefill chunk per sequence, or one
    decode state update), the gated RMSNorm (norm x SiLU(z)) and out_proj. Its per-request state is
    fixed-size (``memory``)."""
    tokens, batch, q_len, _ctx, layers = sizes
    m, wd, act = d.model, gemm_dtype(d), "bf16"
    dims = m.mamba_dims(d.tp)
    inner, bc = dims["H"] * dims["P"], 2 * dims["G"] * dims["N"]
    scan = {"B": batch, "S": q_len, **dims}
    return [
        OpLine(
            phase, "gemm", "gemm", wd, {"M": tokens, "N": 2 * inner + bc + dims["H"], "K": m.hidden}, layers
        ),
        OpLine(phase, "linear_attention", "mamba2", act, scan, layers, kv_dtype=m.state_dtype),
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": inner}, layers),
        OpLine(phase, "gate", "elementwise", act, {"N": tokens * inner, "op": "silu_and_mul"}, layers),
        OpLine(phase, "gemm", "gemm", wd, {"M": tokens, "N": m.hidden, "K": inner}, layers),
    ]


def block_ops(d: Deployment, phase: str, sizes: LayerSizes) -> list[OpLine]:
    """The ``layers`` blocks of a Mamba2 hybrid on one GPU, each kind its share of them: Mamba2 mixers,
    attention, (relu2) MLPs and MoEs (``compose._mlp_ops``: latent and relu2 experts), each block with its
    pre-norm, residual add and one TP all-reduce."""
    tokens, batch, q_len, ctx, layers = sizes
    m, act = d.model, "bf16"
    share = layers / m.layers  # the layers asked (all of them; a pipeline stage's share)
    ops = [
        OpLine(phase, "norm", "rmsnorm", act, {"B": tokens, "H": m.hidden}, layers),
        OpLine(phase, "residual", "elementwise", act, {"N": tokens * m.hidden, "op": "add"}, layers),
    ]
    if m.mamba_layers:
        ops += mamba_ops(d, phase, (tokens, batch, q_len, ctx, m.mamba_layers * share))
    if m.attention_blocks:
        ops += _attention_ops(d, phase, (tokens, batch, q_len, ctx, m.attention_blocks * share))
    ops += _mlp_ops(d, phase, tokens, layers, (m.mlp_blocks * share, m.moe_blocks * share))
    if d.tp > 1:
        message = {"bytes": tokens * m.hidden * ACT_BYTES, "gpus": d.tp}
        ops.append(OpLine(phase, "allreduce", "allreduce", act, message, layers))
    return ops
