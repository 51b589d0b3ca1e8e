"""The one registry of op families: every family's dimensions, spellings, work and where it is answered.

Adding a family: one module here with a ``FAMILY`` (see ``docs/contributing.md``, "Adding an op family");
``tests/unit/test_op_family_coverage.py`` fails until it is wired in every place that maps families.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from components.physics import (
    allreduce,
    attention,
    conv,
    dsa,
    elementwise,
    gdn,
    gemm,
    mamba2,
    moe,
    norm,
    softmax,
)
from components.physics.base import OpFamily, PhysicsError, Work, dims_of

REGISTRY: dict[str, OpFamily] = {
    f.name: f
    for f in (
        gemm.FAMILY,
        attention.FAMILY,
        moe.FAMILY,
        allreduce.FAMILY,
        elementwise.FAMILY,
        softmax.FAMILY,
        norm.LAYERNORM_FAMILY,
        norm.RMSNORM_FAMILY,
        conv.FAMILY,
        gdn.FAMILY,
        dsa.FAMILY,
        mamba2.FAMILY,
    )
}
_BY_NAME: dict[str, OpFamily] = {name: f for f in REGISTRY.values() for name in f.names}
# Families the op engine's data tiers answer (measured > calibrated > transfer > spec); which tier answers
# each question of every family: components/opmodel/routing.py.
ENGINE_FAMILIES: tuple[str, ...] = tuple(name for name, f in REGISTRY.items() if f.engine)


def family(name: str) -> OpFamily:
    """The family a name (or an alias: ``linear``, ``bmm``, ``layer_norm``) means; PhysicsError otherwise."""
    found = _BY_NAME.get(str(name))
    if found is None:
        raise PhysicsError(f"family {name!r}: choose one of {', '.join(REGISTRY)}")
    return found


def variant_of(name: str, op: str | None) -> str | None:
    """The variant a family's work reads: an alias family name (``linear``, ``bmm``) or the row's ``op``."""
    fam = family(name)
    return name if name != fam.name and fam.name == "gemm" else op


def op_work(
    name: str, dtype: str, shape: Mapping[str, Any], kv_dtype: str | None = None, op: str | None = None
) -> Work:
    """FLOPs, minimum DRAM bytes and link bytes of each row of ``shape`` (the op as asked, no GPU)."""
    fam = family(name)
    return fam.work(dtype, dims_of(fam, shape), variant_of(name, op), kv_dtype)


def shape_flops(name: str, op: str | None, shape: Mapping[str, Any], dtype: str = "fp32") -> float:
    """FLOPs by definition of one op (a scalar shape): what a measured row's GFLOP/s is computed on."""
    flops = op_work(name, dtype, shape, op=op).flops
    return float(np.asarray(flops, dtype="float64")[0])
