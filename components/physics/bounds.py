"""What limits a kernel: every ``bound_pipe`` an answer may name, its roofline class and its meaning.

One table, so the class is derived from the bound (never decided apart from it: an answer cannot say
``class compute, bound launch``) and the user guide's list is generated from it (``docs/answers.md``, the
``bounds`` block; a unit test keeps it in step). A new pipe name anywhere in the predictors fails
:func:`class_of_bound` until it is added here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# bound_pipe -> (roofline class, what it means for the user)
BOUNDS: dict[str, tuple[str, str]] = {
    "tensor": ("compute", "the tensor (matrix) cores at the dtype's peak"),
    "fp64": ("compute", "the FP64 pipe"),
    "fp32": ("compute", "the FP32 vector pipe (FMA)"),
    "fp16": ("compute", "the FP16 vector pipe (half-precision math outside the tensor cores)"),
    "bf16": ("compute", "the BF16 vector pipe (outside the tensor cores)"),
    "int8": ("compute", "the INT8 pipe (outside the tensor cores)"),
    "int": ("compute", "the integer ALUs (index and address arithmetic of a CUDA/HIP source)"),
    "sfu": ("compute", "the special-function units (exp, log, rsqrt, sin)"),
    "dram": ("bandwidth", "DRAM (HBM/GDDR) bandwidth"),
    "l2": ("bandwidth", "L2 cache bandwidth"),
    "shared": ("bandwidth", "shared-memory / L1 (LDS on AMD) bandwidth of a CUDA/HIP source"),
    "link": ("bandwidth", "the GPU-to-GPU link (NVLink, Infinity Fabric, PCIe) of a collective"),
    "launch": (
        "latency",
        "fixed costs, not the work: a kernel too small to fill the GPU (launch and latency dominate), or a "
        "module whose time goes mostly to launching its kernels and the framework between them",
    ),
}


def class_of_bound(bound: str) -> str:
    """The roofline class of a bound pipe; ValueError for a pipe not in :data:`BOUNDS` (add it there)."""
    try:
        return BOUNDS[str(bound)][0]
    except KeyError:
        raise ValueError(f"bound pipe {bound!r} is not in components.physics.bounds.BOUNDS") from None


def classes_of_bounds(bounds: Any) -> np.ndarray:
    """:func:`class_of_bound` of each element of an array (vectorised: once per distinct pipe)."""
    bounds = np.asarray(bounds, dtype=object)
    if not bounds.size:
        return bounds.copy()
    names, inverse = np.unique(bounds.astype(str), return_inverse=True)
    return np.array([class_of_bound(n) for n in names], dtype=object)[inverse.reshape(bounds.shape)]


def busiest_on_side(times_us: dict[str, float], side: str) -> str | None:
    """The pipe of ``times_us`` with the most time among those of class ``side``: the bound that agrees with a
    class decided elsewhere (a learned classifier); None when no pipe of that side has time."""
    on_side = {p: t for p, t in times_us.items() if p in BOUNDS and BOUNDS[p][0] == side and t > 0}
    return max(on_side, key=lambda p: on_side[p]) if on_side else None


def bounds_table() -> str:
    """The Markdown table of every bound, its class and meaning (``docs/answers.md``'s ``bounds`` block)."""
    rows = ["| `bound_pipe` | `roofline_class` | what limits the kernel |", "|---|---|---|"]
    rows += [f"| `{pipe}` | `{cls}` | {meaning} |" for pipe, (cls, meaning) in BOUNDS.items()]
    return "\n".join(rows)
