"""LayerNorm and RMSNorm over B rows of H, with an affine weight (LayerNorm: and bias) of H.

FLOPs by definition per element: layernorm 8 (mean, subtract, square, sum, rsqrt-scale, affine), rmsnorm 6.
FMA-pipe demand: layernorm ~7 (mean add, (x-mean)^2 fma, normalise sub+mul, affine fma), rmsnorm ~4
(square-accumulate fma, scale mul, weight mul); one rsqrt per row on the special-function pipe.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work, get
from components.physics.dtypes import element_bytes

# family -> (FLOPs by definition, FMA-pipe FLOPs) per element, and parameter vectors of H read
LAYERNORM: tuple[float, float, float] = (8.0, 7.0, 2.0)
RMSNORM: tuple[float, float, float] = (6.0, 4.0, 1.0)


def _work(costs: tuple[float, float, float]):
    per_element, fma, params = costs

    def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
        rows, cols = get(d, "B", 1.0), d["H"]
        elements = rows * cols
        return Work(
            per_element * elements,
            element_bytes(dtype) * (2.0 * elements + params * cols),
            np.zeros_like(elements),
            fma=fma * elements,
            sfu=rows,
        )

    return work


DIMS = {"B": ("b", "batch", "rows"), "H": ("h", "hidden", "hidden_size", "cols")}
LAYERNORM_FAMILY = OpFamily(
    name="layernorm",
    required=("H",),
    optional=("B",),
    work=_work(LAYERNORM),
    aliases=("layer_norm",),
    dim_aliases=DIMS,
    pipe="vector",
)
RMSNORM_FAMILY = OpFamily(
    name="rmsnorm",
    required=("H",),
    optional=("B",),
    work=_work(RMSNORM),
    aliases=("rms_norm",),
    dim_aliases=DIMS,
    pipe="vector",
)
