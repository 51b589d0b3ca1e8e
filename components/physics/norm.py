"""LayerNorm and RMSNorm over B rows of H, with an affine weight (LayerNorm: and bias) of H.

FLOPs by definition per element: layernorm 8 (mean, subtract, square, sum, rsqrt-scale, affine), rmsnorm 6.
FMA-pipe demand: layernorm ~7 (mean add, (x-mean)^2 fma, normalise sub+mul, affine fma), rmsnorm ~4
(square-accumulate fma, scale mul, weight mul); one rsqrt per row on the special-function pipe.
"""

from __future__ import annotations

from components.physics.base import Dims, OpFamily, Work, get, vector_work
from components.physics.dtypes import element_bytes

# family -> (FLOPs by definition, FMA-pipe FLOPs) per element, and parameter vectors of H read
LAYERNORM: tuple[float, float, float] = (8.0, 7.0, 2.0)
RMSNORM: tuple[float, float, float] = (6.0, 4.0, 1.0)


def _work(costs: tuple[float, float, float]):
    per_element, fma, params = costs

    def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
        rows, cols = get(d, "B", 1.0), d["H"]
        elements = rows * cols
        nbytes = element_bytes(dtype) * (2.0 * elements + params * cols)
        return vector_work(per_element * elements, nbytes, fma * elements, rows)

    return work


def _family(name: str, alias: str, costs: tuple[float, float, float]) -> OpFamily:
    dims = {"B": ("b", "batch", "rows"), "H": ("h", "hidden", "hidden_size", "cols")}
    return OpFamily(name, ("H",), ("B",), _work(costs), aliases=(alias,), dim_aliases=dims, pipe="vector")


LAYERNORM_FAMILY = _family("layernorm", "layer_norm", LAYERNORM)
RMSNORM_FAMILY = _family("rmsnorm", "rms_norm", RMSNORM)
