"""Attention (FlashAttention-style: the S x KV score matrix never goes to DRAM), prefill and decode.

Dimensions: B sequences, S query tokens each, KV context length (the keys each sequence holds, its own
queries included), H query heads, HKV KV heads (grouped-query attention), D head dim; W a sliding
window (0 = none) and ``causal``: 1, the default: query i of S sits at position KV-S+i and sees the keys up
to it (bottom-right aligned: a serving engine's prefill and decode); 2: query i sees keys 0..i (top-left
aligned: PyTorch SDPA's ``is_causal`` mask); 0: every query sees all KV keys (SDPA without a mask).

Settled (tests/unit/test_physics_registry.py): a causal prefill computes ~half the pairs of the full S x KV
matrix -- the kernel skips the masked blocks -- and decode (S = 1) attends to all KV. The score matrix is
never written: the minimum bytes are Q and O once and K, V once per KV head.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work, get
from components.physics.dtypes import GEMM_DTYPE_TRAITS, gemm_bytes


def attention_pairs(s: np.ndarray, kv: np.ndarray, window: np.ndarray | None = None) -> np.ndarray:
    """(query, key) pairs per head of causal attention: S queries at positions KV-S+1 .. KV, each attending to
    every earlier position (at most ``window`` of them when a sliding window is set, 0 = none)."""
    s = np.minimum(s, kv)
    first = kv - s + 1.0
    full = s * (first + kv) / 2.0  # sum of positions first..kv
    if window is None:
        return full
    w = np.where(window > 0, window, np.inf)
    # positions p <= w attend p keys, the rest attend w: sum over p in [first, kv] of min(p, w)
    below_hi = np.clip(np.minimum(kv, w), first - 1.0, None)  # last position still under the window
    n_below = np.clip(below_hi - first + 1.0, 0.0, None)
    sum_below = n_below * (first + below_hi) / 2.0
    n_above = s - n_below
    windowed = sum_below + n_above * np.where(np.isfinite(w), w, 0.0)
    return np.where(np.isfinite(w), windowed, full)


def top_left_pairs(s: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """(query, key) pairs per head under a top-left causal mask: query i (1-based) sees min(i, KV) keys."""
    inside = np.minimum(s, kv)
    return inside * (inside + 1.0) / 2.0 + np.clip(s - kv, 0.0, None) * kv


def pairs(d: Dims) -> np.ndarray:
    """(query, key) pairs per (sequence, head): by the ``causal`` mode, windowed where W > 0."""
    s, kv = d["S"], d["KV"]
    window = d.get("W")
    causal = get(d, "causal", 1.0)
    full = s * (kv if window is None else np.where(window > 0, np.minimum(kv, window), kv))
    return np.select(
        [causal == 1.0, causal == 2.0], [attention_pairs(s, kv, window), top_left_pairs(s, kv)], full
    )


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    """4*B*H*D per pair (QK^T and PV); Q read and O written once, K and V read once per KV head."""
    e = gemm_bytes(dtype)[0]
    kv_name = kv_dtype or dtype
    kv_e = gemm_bytes(kv_name)[0] if kv_name in GEMM_DTYPE_TRAITS else e
    b, s, kv, h, dd = d["B"], d["S"], d["KV"], d["H"], d["D"]
    hkv = d["HKV"]
    window = d.get("W")
    kv_read = kv if window is None else np.where(window > 0, np.minimum(kv, window + s), kv)
    flops = 4.0 * b * h * dd * pairs(d)
    nbytes = 2.0 * b * s * h * dd * e + 2.0 * b * kv_read * hkv * dd * kv_e
    return Work(flops, nbytes, np.zeros_like(flops), sfu=b * h * pairs(d))


FAMILY = OpFamily(
    name="attention",
    required=("B", "S", "KV", "H", "HKV", "D"),
    optional=("W", "causal"),
    work=work,
    aliases=("sdpa",),
    dim_aliases={
        "B": ("b", "batch", "batch_size", "bs"),
        "S": ("seq", "seq_len", "s", "sq"),
        "KV": ("seq_kv", "skv", "kv_len", "kv"),
        "H": ("heads", "num_heads", "nh", "h"),
        "HKV": ("kv_heads", "num_kv_heads", "hkv"),
        "D": ("head_dim", "d", "hd"),
        "W": ("window", "sliding_window", "w"),
    },
    engine=True,
    tabular=False,
)
