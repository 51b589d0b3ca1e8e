"""Per-GPU memory of a deployment: weights, activations and the KV cache the engine's memory fraction leaves
(``memory_check``; ``DoesNotFit`` names what does not fit), and the bytes a decode step reads."""

from __future__ import annotations

import math

from components.deployments.config import Deployment, DeploymentError
from components.physics.dtypes import STORE_BYTES

# Usable fraction of each GPU's memory: vLLM's gpu_memory_utilization default (SGLang/TensorRT-LLM reserve
# about as much for the CUDA context, workspaces and fragmentation).
MEMORY_HEADROOM = 0.9
ACT_BYTES = 2  # activations in 16-bit
EMBED_BYTES = 2.0  # embeddings and LM head stay 16-bit in every quantised checkpoint we read
# Servers prefill in chunks of at most this many tokens (vLLM/SGLang max_num_batched_tokens defaults are
# 8k-16k): the activation memory of a prefill step is bounded by it, not by concurrency x isl.
MAX_BATCHED_TOKENS = 16384


class DoesNotFit(DeploymentError):
    """Weights + KV cache + activations exceed the GPUs' memory: the refusal names what does not fit."""


GIB = 2**30  # a GPU's "80 GB" is 80 GiB of HBM (nvidia-smi: 81,559 MiB on an H100 SXM)


def _kv_bytes_per_request(d: Deployment) -> float:
    """KV cache of one request at its full context (isl + osl) on one GPU, at the KV dtype; sliding-window
    layers keep only the window."""
    m = d.model
    seq = d.isl + d.osl
    full = m.attention_layers - m.sliding_layers
    tokens = full * seq + m.sliding_layers * min(seq, m.sliding_window or seq)
    return tokens * _token_bytes_per_layer(d) / d.pp + state_bytes_per_request(d)


def _token_bytes_per_layer(d: Deployment) -> float:
    """Cache bytes one token keeps in one attention layer on one GPU: its K/V (or MLA latent) at the KV
    dtype, or with sparse attention the latent row as the sparse kernels store it and the indexer's key
    (``physics.dsa``)."""
    m = d.model
    if m.is_dsa:
        from components.physics.dsa import index_key_bytes, latent_row_bytes

        row = latent_row_bytes(m.kv_lora_rank, m.qk_rope_head_dim, STORE_BYTES[d.kv_dtype])
        return float(row + index_key_bytes(m.index_head_dim))
    return m.kv_elements_per_token_layer(d.tp) * STORE_BYTES[d.kv_dtype]


def state_bytes_per_request(d: Deployment) -> float:
    """The fixed-size state one request keeps on one GPU in its GDN and Mamba2 layers, whatever its
    context: the recurrent / SSM state (``mamba_ssm_dtype``, ``mamba_ssm_cache_dtype``) and the conv state
    (16-bit) of each such layer."""
    m = d.model
    total = 0.0
    if m.linear_layers:
        from components.physics.gdn import state_elements

        dims = m.linear_dims(d.tp)
        recurrent, conv = state_elements(dims["HK"], dims["HV"], dims["DK"], dims["DV"], dims["K"])
        total += m.linear_layers * (recurrent * STORE_BYTES[m.state_dtype] + conv * ACT_BYTES)
    if m.mamba_layers:
        from components.physics.mamba2 import state_elements as mamba_state

        dims = m.mamba_dims(d.tp)
        ssm, conv = mamba_state(dims["H"], dims["P"], dims["G"], dims["N"], dims["K"])
        total += m.mamba_layers * (ssm * STORE_BYTES[m.state_dtype] + conv * ACT_BYTES)
    return float(total / d.pp)


# How a serving engine sizes its KV cache from its memory fraction f (``engines.base.ServingEngine``):
# "total": f x GPU memory holds weights, the activation peak and the KV cache (vLLM's gpu_memory_utilization);
# "free": the KV cache is f x what weights and activations leave (TensorRT-LLM's free_gpu_memory_fraction);
# "static": f x GPU memory holds weights and the KV pool, activations live in the rest (SGLang's
# mem_fraction_static).
KV_RULES = ("total", "free", "static")


def memory_check(
    d: Deployment,
    fraction: float = MEMORY_HEADROOM,
    batched_tokens: int = MAX_BATCHED_TOKENS,
    rule: str = "total",
) -> dict[str, float]:
    """Per-GPU GB of weights, KV cache and activations. DoesNotFit only when the weights, the activations
    and ONE request's full KV cache exceed the usable memory: with less room for the KV cache than
    concurrency x (isl + osl) needs, a server (vLLM, SGLang, TensorRT-LLM page their KV cache) runs the
    requests that fit at once and queues the rest -- that is noted (``concurrent_requests``), not refused.
    ``fraction``: the share of GPU memory the serving engine takes, read by ``rule`` (``KV_RULES``);
    ``batched_tokens``: its step budget (the activation peak). ``kv_tokens_per_gpu``: the tokens the KV cache
    left holds.
    """
    m, spec = d.model, d.gpu
    per_gpu = d.tp * d.pp
    weights = weight_bytes_per_gpu(d)
    per_request = _kv_bytes_per_request(d)
    kv = d.concurrency * per_request
    tokens = min(d.concurrency * d.isl, batched_tokens)
    widest = max(m.intermediate, m.moe_intermediate * max(m.topk, 1), (m.heads + 2 * m.kv_heads) * m.head_dim)
    activations = (
        tokens * (2 * m.hidden + 2 * widest / d.tp) * ACT_BYTES
        + min(d.concurrency, tokens) * m.vocab / d.tp * 4
    )
    memory = float(spec.memory_gb) * GIB
    budget = fraction * memory
    if rule == "free":
        room = fraction * (memory - weights - activations)
        budget = weights + activations + room
    elif rule == "static":
        room = budget - weights
    else:
        room = budget - weights - activations
    held = int(min(d.concurrency, room // per_request)) if room > 0 else 0
    figures = {
        "weights_gb": weights / 1e9,
        "kv_cache_gb": min(kv, max(room, 0.0)) / 1e9,
        "kv_cache_wanted_gb": kv / 1e9,
        "activations_gb": activations / 1e9,
        "total_gb": (weights + activations + min(kv, max(room, 0.0))) / 1e9,
        "budget_gb": budget / 1e9,
        "gpu_memory_gb": float(spec.memory_gb) * GIB / 1e9,
        "concurrent_requests": float(held),
        "kv_tokens_per_gpu": max(room, 0.0) / per_request * (d.isl + d.osl),
    }
    if held < 1:
        need = []
        if weights > budget:
            need.append(f"the weights alone need {math.ceil(weights * per_gpu / budget)} GPUs")
        raise DoesNotFit(
            f"does not fit on {spec.id} x{per_gpu} (tp={d.tp}, pp={d.pp}): per GPU weights "
            f"{weights / 1e9:.1f} GB + activations {activations / 1e9:.1f} GB + one request's KV cache "
            f"{per_request / 1e9:.2f} GB ({d.isl + d.osl} tokens, {d.kv_dtype}) > {budget / 1e9:.1f} GB "
            f"({fraction:g} x {spec.memory_gb:g} GiB)" + (f"; {need[0]}" if need else "")
        )
    return {k: round(v, 3) for k, v in figures.items()}


def weight_bytes_per_gpu(d: Deployment) -> float:
    """Bytes of weights one GPU holds (quantised layers at the weight dtype, embeddings 16-bit); with
    attention DP the routed experts are spread over all tp*pp*dp GPUs, the rest over tp*pp."""
    counts = d.model.parameter_counts()
    experts = counts["experts"] * STORE_BYTES[d.weight_dtype] / d.gpus
    quantised = sum(v for k, v in counts.items() if k not in ("embeddings", "experts"))
    rest = (quantised * STORE_BYTES[d.weight_dtype] + counts["embeddings"] * EMBED_BYTES) / (d.tp * d.pp)
    return rest + experts


def kv_bytes_per_token(d: Deployment) -> float:
    """KV-cache bytes one token of context holds on one GPU (all attention layers of its pipeline stage;
    GDN layers keep a fixed state instead: ``state_bytes_per_request``)."""
    m = d.model
    return m.attention_layers * _token_bytes_per_layer(d) / d.pp


def memory_notes(d: Deployment, memory: dict[str, float]) -> list[str]:
    """Say when the KV cache holds fewer requests than the concurrency (the others wait for room)."""
    held = int(memory["concurrent_requests"])
    if held >= d.concurrency:
        return []
    note = (
        f"KV cache: room for {held} of {d.concurrency} requests at {d.isl + d.osl} tokens "
        f"({memory['kv_cache_wanted_gb']:.1f} GB wanted, {memory['kv_cache_gb']:.1f} GB free per GPU); "
        "the server runs those and queues the rest (times assume all run at once)"
    )
    return [note]
