"""Elementwise ops (``op`` names one: add, gelu, silu_and_mul, copy ...) over N elements (or B rows x H).

Two counts per element, deliberately apart: FLOPs by definition (what GFLOP/s is computed on: an arithmetic op
or one transcendental call counts 1, a copy 0) and the pipe demand the kernel executes (PyTorch computes in
fp32 "opmath"; transcendentals lower to MUFU ex2/lg2/rcp/tanh plus a few FMA-pipe fix-ups). The "u" ops take
a Python scalar, so they read one tensor, not two.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, PhysicsError, Work, get, vector_work
from components.physics.dtypes import element_bytes

# op -> (FMA-pipe FLOPs, special-function (MUFU/XU) ops, input tensors read) per output element
ELEMENTWISE_COST: dict[str, tuple[float, float, float]] = {
    "add": (1, 0, 2),
    "sub": (1, 0, 2),
    "mul": (1, 0, 2),
    "div": (2, 1, 2),
    "pow": (4, 2, 2),
    "addu": (1, 0, 1),
    "subu": (1, 0, 1),
    "mulu": (1, 0, 1),
    "divu": (1, 0, 1),
    "powu": (4, 2, 1),
    "relu": (1, 0, 1),
    "tanh": (6, 2, 1),
    "gelu": (12, 1, 1),
    "silu": (4, 2, 1),
    "sigmoid": (4, 2, 1),
    "exp": (2, 1, 1),
    "log": (2, 1, 1),
    "sqrt": (1, 1, 1),
    "rsqrt": (1, 1, 1),
    "neg": (1, 0, 1),
    "abs": (1, 0, 1),
    "copy": (0, 0, 1),
    "silu_and_mul": (5, 2, 2),
}
# FLOPs by definition per output element (measured rows' GFLOP/s and answers' both use this).
ELEMENTWISE_FLOPS_PER_ELEMENT: dict[str, float] = {
    **{op: 1.0 for op in ELEMENTWISE_COST},
    "copy": 0.0,
    "silu_and_mul": 2.0,  # silu, then the product
}


def numel(d: Dims) -> np.ndarray:
    """N, or B x H where the shape gives rows and columns."""
    n = get(d, "N", np.nan)
    return np.where(np.isfinite(n), n, get(d, "B", 1.0) * get(d, "H", np.nan))


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    name = str(op or "")
    if name not in ELEMENTWISE_COST:
        raise PhysicsError(
            f"elementwise op {op!r} has no cost entry; choose one of {', '.join(ELEMENTWISE_COST)}"
        )
    fma, sfu, inputs = ELEMENTWISE_COST[name]
    elements = numel(d)
    nbytes = element_bytes(dtype) * elements * (inputs + 1.0)
    return vector_work(ELEMENTWISE_FLOPS_PER_ELEMENT[name] * elements, nbytes, fma * elements, sfu * elements)


FAMILY = OpFamily(
    name="elementwise",
    required=("N|H",),
    optional=("B",),
    work=work,
    dim_aliases={"N": ("n", "numel", "elements", "n_elements"), "B": ("b", "batch"), "H": ("h", "cols")},
    pipe="vector",
)
