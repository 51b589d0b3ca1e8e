"""GEMM: C[M, N] = A[M, K] @ B[K, N], batched (``bmm``: B independent products) or as a ``linear`` layer
(x[B, M, K] @ W[K, N]: one weight shared by the batch, read once).

Dimensions: M, N, K; B (batch, default 1). The pipe: the dtype's GEMM pipe (``dtypes.GEMM_DTYPE_TRAITS``).
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work, get
from components.physics.dtypes import gemm_bytes


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    """2*B*M*N*K FLOPs; A and C once per batch entry, B once per batch entry (``linear``: once)."""
    a, w, o = gemm_bytes(dtype)
    b, m, n, k = get(d, "B", 1.0), d["M"], d["N"], d["K"]
    weight_batch = np.ones_like(b) if op == "linear" else b
    nbytes = b * (a * m * k + o * m * n) + weight_batch * w * k * n
    return Work(2.0 * b * m * n * k, nbytes, np.zeros_like(m))


FAMILY = OpFamily(
    name="gemm",
    required=("M", "N", "K"),
    optional=("B",),
    work=work,
    aliases=("linear", "bmm", "matmul"),
    dim_aliases={"B": ("b", "batch", "batch_size", "bs"), "M": ("m",), "N": ("n",), "K": ("k",)},
    engine=True,
)
