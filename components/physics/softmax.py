"""Softmax over B rows of H: max, subtract, exp (one MUFU ex2 + scale), sum, scale by 1/sum -- 5 FLOPs per
element by definition and on the FMA pipe, one special-function op; reads and writes the tensor once."""

from __future__ import annotations

from components.physics.base import Dims, OpFamily, Work, get, vector_work
from components.physics.dtypes import element_bytes

FLOPS_PER_ELEMENT: float = 5.0
FMA_PER_ELEMENT, SFU_PER_ELEMENT = 5.0, 1.0


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    elements = get(d, "B", 1.0) * d["H"]
    nbytes = 2.0 * element_bytes(dtype) * elements
    return vector_work(
        FLOPS_PER_ELEMENT * elements, nbytes, FMA_PER_ELEMENT * elements, SFU_PER_ELEMENT * elements
    )


FAMILY = OpFamily(
    name="softmax",
    required=("H",),
    optional=("B",),
    work=work,
    aliases=("log_softmax",),
    dim_aliases={"B": ("b", "batch", "rows"), "H": ("h", "hidden", "cols")},
    pipe="vector",
)
