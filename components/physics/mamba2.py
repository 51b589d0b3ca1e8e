"""Mamba2 (Nemotron-H, Nemotron-3 hybrids): a Mamba2 block's short causal conv1d and its state-space scan
(SSD), as one op of a serving step (its in/out projections are GEMMs, its gated RMSNorm a norm).

Dimensions: B sequences, S new tokens each (a prefill chunk; 1 for a decode step), H SSM heads of P
channels (``mamba_num_heads`` x ``mamba_head_dim``, after TP), G groups of B/C projections of state size N
(``n_groups``, ``ssm_state_size``), K the conv kernel width (``conv_kernel``), C the SSD chunk
(``chunk_size``). ``kv_dtype`` is the SSM state's dtype (``mamba_ssm_cache_dtype``: fp32 in Nemotron-3);
``dtype`` the activations' and the conv state's.

Each head keeps a P x N state ``h``. Prefill runs the chunked SSD (``mamba_chunk_scan_combined``, chunks of
C tokens): per token and head the chunk state B^T x (2 N P), the output from the carried state C h (2 N P)
and the intra-chunk (L o C B^T) x (2 C P); per token and group C B^T (2 C N). Decode
(``selective_state_update``, S = 1) is the recurrence h <- exp(dt A) h + dt B x, y = C h: 4 N P per head
-- the same formula at C = min(chunk, S) = 1 up to the 2 P of the one-token "chunk", so prefill and decode
are one continuous definition in S. The conv adds 2 K FLOPs per channel per token over the conv's
H P + 2 G N channels (x, B, C).

Minimum bytes: x, B, C (the conv's channels) and dt (H) read once, y (H P) written once, per token at
``dtype``; per sequence the SSM state (H P N at the state dtype) and the conv state (channels x (K - 1))
read and written once -- the fixed-size memory a Mamba layer keeps per request instead of a KV cache
(vLLM's ``MambaStateShapeCalculator.mamba2_state_shape``). Variants (``op``): ``conv`` or ``scan`` alone
(the tables time the conv kernels only), default both.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, PhysicsError, Work, get
from components.physics.dtypes import GEMM_DTYPE_TRAITS, gemm_bytes

CHUNK = 256.0  # the SSD chunk when the config names none (Mamba2's default; Nemotron-H uses 128)
VARIANTS = ("both", "conv", "scan")


def conv_channels(h: np.ndarray, p: np.ndarray, g: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Channels of the causal conv1d (and of its state): x of every head, B and C of every group."""
    return h * p + 2.0 * g * n


def state_elements(
    h: np.ndarray, p: np.ndarray, g: np.ndarray, n: np.ndarray, kernel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(SSM state, conv state) elements one sequence keeps in one Mamba2 layer."""
    return h * p * n, conv_channels(h, p, g, n) * (kernel - 1.0)


def _variant(op: str | None) -> str:
    name = str(op or "both")
    if name not in VARIANTS:
        raise PhysicsError(f"mamba2 op {op!r}: choose {', '.join(VARIANTS)}")
    return name


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    part = _variant(op)
    e = gemm_bytes(dtype)[0]
    state_name = kv_dtype or dtype
    se = gemm_bytes(state_name)[0] if state_name in GEMM_DTYPE_TRAITS else e
    b, s, h, p, g, n = d["B"], d["S"], d["H"], d["P"], d["G"], d["N"]
    kernel, chunk = get(d, "K", 4.0), np.minimum(get(d, "C", CHUNK), s)
    tokens = b * s
    channels = conv_channels(h, p, g, n)
    ssm, conv_state = state_elements(h, p, g, n, kernel)
    conv_flops = tokens * channels * 2.0 * kernel
    conv_bytes = 2.0 * tokens * channels * e + b * 2.0 * conv_state * e  # x, B, C in and out; its state
    scan_flops = tokens * (h * (4.0 * n * p + 2.0 * chunk * p) + g * 2.0 * chunk * n)
    scan_bytes = tokens * (channels + h + h * p) * e + b * 2.0 * ssm * se
    if part == "conv":
        return Work(conv_flops, conv_bytes, np.zeros_like(conv_flops))
    if part == "scan":
        return Work(scan_flops, scan_bytes, np.zeros_like(scan_flops))
    # the fused pair reads x, B, C once: the conv's output is the scan's input, not a second DRAM trip
    both = tokens * (channels + h + h * p) * e + b * 2.0 * (ssm * se + conv_state * e)
    flops = conv_flops + scan_flops
    return Work(flops, both, np.zeros_like(flops))


FAMILY = OpFamily(
    name="mamba2",
    required=("B", "S", "H", "P", "G", "N"),
    optional=("K", "C"),
    work=work,
    aliases=("mamba", "ssd"),
    dim_aliases={
        "B": ("b", "batch", "batch_size"),
        "S": ("s", "seq", "seq_len"),
        "H": ("nheads", "mamba_num_heads", "h"),
        "P": ("head_dim", "mamba_head_dim", "p"),
        "G": ("n_groups", "g"),
        "N": ("d_state", "ssm_state_size", "n"),
        "K": ("d_conv", "conv_kernel", "k"),
        "C": ("chunk_size", "chunk"),
    },
    engine=False,  # no Mamba2 table in the op engine's store: deployments read AIConfigurator's conv tables
    tabular=False,
)
