"""Gated DeltaNet (Qwen3-Next / Qwen3.5 / Qwen3.6 linear-attention layers): the short causal conv1d over the
q/k/v channels and the gated delta rule, as one op of a serving step (its projections are GEMMs).

Dimensions: B sequences, S new tokens each (a prefill chunk; 1 for a decode step), HK key heads, HV value
heads (HV >= HK: queries and keys are shared by HV / HK value heads), DK key head dim, DV value head dim,
K the conv kernel width (``linear_conv_kernel_dim``, 4). ``kv_dtype`` is the recurrent state's dtype
(``mamba_ssm_dtype``: fp32 in the Qwen3.5 configs); ``dtype`` the activations' and the conv state's.

Each value head keeps a DK x DV state ``St``. Per token the rule is ``St <- a St (I - b k k^T) + b v k^T``,
``o = St^T q`` -- three DK x DV matrix-vector products (S^T k, the rank-1 update, S^T q): 6 DK DV FLOPs.
Prefill runs it chunked (FLA's ``chunk_gated_delta_rule``, chunks of C = 64 tokens, as vLLM and SGLang
call it): inside a chunk the WY form adds C x C products -- Q K^T, K K^T, A K, A V and the masked P V --
about 2 C (3 DK + 2 DV) FLOPs per token more. Decode (``fused_recurrent_gated_delta_rule``, S = 1) is the
recurrent form; the formula takes C = min(64, S), so both are one continuous definition in S. The conv
adds 2 K FLOPs per channel per token over conv_dim = 2 HK DK + HV DV channels.

Minimum bytes: q, k, v (conv_dim per token) and the a, b gates (2 HV) read once, o (HV DV) written once;
per sequence the recurrent state (HV DK DV at the state dtype) and the conv state (conv_dim x (K - 1))
read and written once -- the fixed-size memory a GDN layer keeps per request instead of a KV cache
(vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``).
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work, get
from components.physics.dtypes import GEMM_DTYPE_TRAITS, gemm_bytes

CHUNK = 64.0  # FLA's chunk size for the chunked gated delta rule


def conv_channels(hk: np.ndarray, hv: np.ndarray, dk: np.ndarray, dv: np.ndarray) -> np.ndarray:
    """Channels of the causal conv1d (and of its state): q and k of every key head, v of every value head."""
    return 2.0 * hk * dk + hv * dv


def state_elements(
    hk: np.ndarray, hv: np.ndarray, dk: np.ndarray, dv: np.ndarray, kernel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(recurrent state, conv state) elements one sequence keeps in one GDN layer."""
    return hv * dk * dv, conv_channels(hk, hv, dk, dv) * (kernel - 1.0)


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    e = gemm_bytes(dtype)[0]
    state_name = kv_dtype or dtype
    se = gemm_bytes(state_name)[0] if state_name in GEMM_DTYPE_TRAITS else e
    b, s, hk, hv, dk, dv = d["B"], d["S"], d["HK"], d["HV"], d["DK"], d["DV"]
    kernel = get(d, "K", 4.0)
    tokens = b * s
    chunk = np.minimum(CHUNK, s)
    channels = conv_channels(hk, hv, dk, dv)
    rule = tokens * hv * (6.0 * dk * dv + 2.0 * chunk * (3.0 * dk + 2.0 * dv))
    conv = tokens * channels * 2.0 * kernel
    flops = rule + conv
    recurrent, conv_state = state_elements(hk, hv, dk, dv, kernel)
    per_token = (channels + 2.0 * hv + hv * dv) * e
    per_sequence = 2.0 * (recurrent * se + conv_state * e)
    nbytes = tokens * per_token + b * per_sequence
    return Work(flops, nbytes, np.zeros_like(flops))


FAMILY = OpFamily(
    name="gdn",
    required=("B", "S", "HK", "HV", "DK", "DV"),
    optional=("K",),
    work=work,
    aliases=("gated_delta_net",),
    dim_aliases={
        "B": ("b", "batch", "batch_size"),
        "S": ("s", "seq", "seq_len"),
        "HK": ("num_k_heads", "hk"),
        "HV": ("num_v_heads", "hv"),
        "DK": ("head_k_dim", "dk"),
        "DV": ("head_v_dim", "dv"),
        "K": ("d_conv", "conv_kernel", "k"),
    },
    engine=False,  # no measured GDN table in the op engine's store yet: the roofline answers it
    tabular=False,
)
