"""What every op family module shares: the error, the work of a batch of rows, the family record.

An op family (``components/physics/<family>.py``) declares its canonical dimensions and the spellings the
data uses for them, and one work function: FLOPs by definition (what every GFLOP/s is computed on, measured
rows and answers alike), the minimum DRAM bytes (every operand read once, the result written once) and the
bytes over the GPU-to-GPU link, vectorised over rows. ``components.physics.registry`` collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from components.physics.errors import PhysicsError

__all__ = ["Dims", "OpFamily", "PhysicsError", "Work", "dims_of", "get", "vector_work"]


@dataclass(frozen=True)
class Work:
    flops: np.ndarray  # by the op's definition (FMA = 2): the numerator of every GFLOP/s
    dram_bytes: np.ndarray  # the minimum DRAM traffic: every operand read once, the result written once
    link_bytes: np.ndarray  # bytes each GPU sends over its link (all-reduce); 0 elsewhere
    # Per-pipe demand where it differs from ``flops`` (small ops): FMA-pipe FLOPs and special-function ops
    # the kernel executes (PyTorch's fp32 opmath, MUFU transcendentals). None: all of ``flops`` on the pipe.
    fma: np.ndarray | None = None
    sfu: np.ndarray | None = None


def vector_work(flops: np.ndarray, nbytes: np.ndarray, fma: np.ndarray, sfu: np.ndarray) -> Work:
    """The work of a small op on the vector pipes: no link traffic, its FMA and special-function demand."""
    return Work(flops, nbytes, np.zeros_like(flops), fma=fma, sfu=sfu)


Dims = dict[str, np.ndarray]
# (dtype, dims, op, kv_dtype) -> Work. ``op`` names the variant inside a family (an elementwise op, the MoE
# projection); ``kv_dtype`` the KV cache's dtype (attention).
WorkFn = Callable[[str, Dims, str | None, str | None], Work]


@dataclass(frozen=True)
class OpFamily:
    """One op family: its dimensions, their spellings, its work, and which parts of kernelcast answer it."""

    name: str
    required: tuple[str, ...]  # canonical dimensions; a tuple of alternatives is written "A|B" (first wins)
    optional: tuple[str, ...]
    work: WorkFn
    # Other family names in the data meaning this family (``linear``, ``bmm``), each with its own variant.
    aliases: tuple[str, ...] = ()
    # canonical dimension -> spellings the data uses (lower-case: NeuSight, PipeWeave, traced programs).
    dim_aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    engine: bool = False  # the op engine's data tiers (measured > calibrated > transfer > spec) answer it
    # the engine's learned tier (the tabular champion) answers its rows no measured kernel does (False: the
    # data tiers answer every row; components/opmodel/routing.py)
    tabular: bool = True
    pipe: str = "tensor"  # where its FLOPs run: the dtype's GEMM pipe, the fp32 "vector" pipe, or the "link"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _array(value: Any) -> np.ndarray:
    return np.atleast_1d(np.asarray(value, dtype="float64"))


def dims_of(family: OpFamily, shape: Mapping[str, Any]) -> Dims:
    """``shape``'s dimensions under their canonical names, as float arrays broadcast to one length.

    A canonical name wins over its spellings; "A|B" in ``required`` takes A, else B. Missing required
    dimensions raise one PhysicsError naming them."""
    found: dict[str, np.ndarray] = {}
    lowered = {str(k).lower(): v for k, v in shape.items()}
    for name in (*family.required, *family.optional):
        for dim in name.split("|"):
            if dim in shape:
                found[dim] = _array(shape[dim])
                continue
            for alias in family.dim_aliases.get(dim, ()):
                if alias in lowered:
                    found[dim] = _array(lowered[alias])
                    break
    missing = [name for name in family.required if not any(d in found for d in name.split("|"))]
    if missing:
        raise PhysicsError(f"{family.name} shape: missing {', '.join(missing)}")
    n = max(len(a) for a in found.values())
    return {k: np.broadcast_to(a, (n,)).astype("float64") for k, a in found.items()}


def rows(d: Dims) -> int:
    return len(next(iter(d.values())))


def get(d: Dims, name: str, default: float) -> np.ndarray:
    """An optional dimension, ``default`` where absent or NaN."""
    value = d.get(name)
    if value is None:
        return np.full(rows(d), float(default))
    return np.where(np.isfinite(value), value, float(default))
