"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): one layer's attention module on one GPU, as
AIConfigurator times it (``dsa_{context,generation}_module``: projections, the lightning indexer, top-k
selection and sparse multi-head latent attention, one forward of the module).

Dimensions: B sequences, S new tokens each (a prefill chunk; 1 for a decode step) ending at context KV
(KV >= S), H query heads on this GPU, HID the hidden size, QL ``q_lora_rank``, KL ``kv_lora_rank``, DR
``qk_rope_head_dim``, DN ``qk_nope_head_dim``, DV ``v_head_dim``, IH / ID the indexer's heads and head dim
(``index_n_heads`` / ``index_head_dim``: the indexer is replicated on every TP rank), TOPK ``index_topk``.

Work per module call (FMA = 2 FLOPs):
- projections, weights read once: q_a (HID x QL), kv_a (HID x (KL + DR)), q_b (QL x H (DN + DR)), o
  (H DV x HID), the indexer's wq_b (QL x IH ID), wk (HID x ID) and head weights (HID x IH); the latent
  absorption (H heads of DN x KL and KL x DV) per new token;
- the indexer: each new token scores every key before it with IH heads of ID (the causal context);
- sparse MLA: each new token attends to min(TOPK, its context) latent rows, QK over KL + DR and PV over
  KL (the absorbed MQA form the sparse kernels run).
Minimum bytes: the weights (at ``dtype``) once; the hidden state in and out (16-bit); per sequence the
latent rows the chunk touches (min(KV, S TOPK) rows: ``latent_row_bytes``) and every indexer key (KV
rows: ``index_key_bytes``) read once, the S new rows of both written.
The one definition of S, KV and TOPK below makes prefill and decode one continuous formula in S. Variants
(``op``): ``proj`` (the projections: per token, whatever the context) and ``attn`` (indexer + sparse MLA:
per sequence and context), default both -- a serving step runs the projections of all its tokens at once
and the attention per sequence.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, PhysicsError, Work
from components.physics.dtypes import GEMM_DTYPE_TRAITS, gemm_bytes

ACT_BYTES = 2.0
# the module's dimensions beside the heads, and the config fields that give them
SIGNATURE = ("HID", "QL", "KL", "DR", "DN", "DV", "IH", "ID", "TOPK")
CONFIG_FIELDS = (
    "hidden_size",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
)  # hidden states in and out in 16-bit


def index_key_bytes(head_dim: np.ndarray | float) -> np.ndarray:
    """Bytes of one token's indexer key: fp8 elements and an fp32 scale per 128 (DeepSeek-V3.2's
    reference, vLLM's and SGLang's index cache)."""
    return np.asarray(head_dim, dtype="float64") + 4.0 * np.ceil(
        np.asarray(head_dim, dtype="float64") / 128.0
    )


def latent_row_bytes(kl: np.ndarray | float, dr: np.ndarray | float, kv_bytes: float) -> np.ndarray:
    """Bytes of one cached latent row: KL + DR at the KV dtype, or -- an 8-bit cache -- FlashMLA's fp8 layout
    the sparse kernels read (vLLM's and SGLang's ``fp8_ds_mla``): the KL latent in fp8 with an fp32 scale
    per 128, the DR rotary key kept in 16-bit (656 bytes for DeepSeek-V3.2 and GLM-5)."""
    kl, dr = np.asarray(kl, dtype="float64"), np.asarray(dr, dtype="float64")
    if kv_bytes == 1.0:
        return kl + 4.0 * np.ceil(kl / 128.0) + 2.0 * dr
    return (kl + dr) * kv_bytes


def causal_keys(s: np.ndarray, kv: np.ndarray, cap: np.ndarray | float = np.inf) -> np.ndarray:
    """Sum over the S new tokens (positions KV-S+1 .. KV) of min(cap, position): the keys they attend to."""
    s, kv = np.asarray(s, dtype="float64"), np.asarray(kv, dtype="float64")
    cap = np.broadcast_to(np.asarray(cap, dtype="float64"), np.broadcast(s, kv).shape)
    first = kv - s + 1.0
    below = np.clip(np.minimum(kv, cap) - first + 1.0, 0.0, None)  # positions up to the cap: their sum
    top = first + below - 1.0
    summed = np.where(below > 0, below * (first + top) / 2.0, 0.0)
    return summed + (s - below) * np.where(np.isfinite(cap), cap, 0.0)


def weight_elements(d: Dims) -> np.ndarray:
    """Weight elements one GPU's module reads (projections, indexer, latent absorption)."""
    hid, ql, kl, h = d["HID"], d["QL"], d["KL"], d["H"]
    dn, dr, dv, ih, idim = d["DN"], d["DR"], d["DV"], d["IH"], d["ID"]
    q = hid * ql + ql * h * (dn + dr)
    kv = hid * (kl + dr)
    absorb = h * kl * (dn + dv)
    out = h * dv * hid
    indexer = ql * ih * idim + hid * idim + hid * ih
    return q + kv + absorb + out + indexer


PARTS = ("both", "proj", "attn")


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    part = str(op or "both")
    if part not in PARTS:
        raise PhysicsError(f"dsa op {op!r}: choose {', '.join(PARTS)}")
    e = gemm_bytes(dtype)[0]
    kv_name = kv_dtype or dtype
    kv_e = gemm_bytes(kv_name)[0] if kv_name in GEMM_DTYPE_TRAITS else e
    b, s, kv = d["B"], d["S"], np.maximum(d["KV"], d["S"])
    h, kl, dr, ih, idim, topk = d["H"], d["KL"], d["DR"], d["IH"], d["ID"], d["TOPK"]
    tokens = b * s
    weights = weight_elements(d)
    proj_flops = 2.0 * tokens * weights
    proj_bytes = weights * e + tokens * 2.0 * d["HID"] * ACT_BYTES
    indexer = 2.0 * b * causal_keys(s, kv) * ih * idim
    attended = b * causal_keys(s, kv, topk)
    attn_flops = indexer + 2.0 * attended * h * (2.0 * kl + dr)
    rows = np.minimum(kv, s * topk)
    key, row = index_key_bytes(idim), latent_row_bytes(kl, dr, kv_e)
    attn_bytes = b * (rows * row + kv * key) + tokens * (row + key)
    flops = {"proj": proj_flops, "attn": attn_flops}.get(part, proj_flops + attn_flops)
    nbytes = {"proj": proj_bytes, "attn": attn_bytes}.get(part, proj_bytes + attn_bytes)
    return Work(flops, nbytes, np.zeros_like(flops))


FAMILY = OpFamily(
    name="dsa",
    required=("B", "S", "KV", "H", *SIGNATURE),
    optional=(),
    work=work,
    aliases=("sparse_attention", "dsa_module"),
    # the config fields that name each dimension (no data source spells them otherwise)
    dim_aliases={"B": ("batch_size",), "S": ("isl",), "KV": ("context",), "H": ("num_heads",)}
    | {dim: (name,) for dim, name in zip(SIGNATURE, CONFIG_FIELDS, strict=True)},
    engine=False,  # no DSA table in the op engine's store: deployments read AIConfigurator's (dsa_tables)
    tabular=False,
)
