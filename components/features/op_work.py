"""The registry's op work (``components/physics``) over a feature frame's rows: FLOPs by definition, minimum
DRAM bytes and per-pipe demand, for rows of mixed dtypes and ops.

A family's work function takes one dtype (and one op variant): rows are grouped by their distinct labels (a
handful: fp32/bf16/fp8, an elementwise op) and each group computed on whole arrays, merged where it applies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from components.physics import dtypes
from components.physics.base import Dims, Work
from components.physics.registry import family as registry_family

WORK_KEYS: tuple[str, ...] = ("flops", "dram_bytes", "fma", "sfu")


def _groups(labels: Any, mask: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(label, rows) for each distinct label among the ``mask`` rows."""
    from components.features.arrays import label_codes

    codes, uniques = label_codes(labels)
    return [
        (str(label), mask & (codes == i)) for i, label in enumerate(uniques) if (mask & (codes == i)).any()
    ]


def work_dtype(label: str) -> str:
    """The dtype a row's work is costed in: its own, or fp32's 4 bytes for "mixed"/"unknown" rows."""
    return label if label in dtypes.GEMM_DTYPE_TRAITS else "fp32"


def registry_work(
    name: str,
    dtype: Any,
    mask: np.ndarray,
    dims: Dims,
    op: Any = None,
    variant: Any = None,
) -> Work:
    """Family ``name``'s work for the ``mask`` rows (NaN elsewhere): one call per distinct dtype (and op).

    ``op``: per-row op labels, each row's variant ``variant(op)`` (default: the label itself); None: no
    variant. A group the family cannot cost (an elementwise op without a cost entry) stays NaN."""
    fam = registry_family(name)
    n = len(mask)
    out = {key: np.full(n, np.nan) for key in WORK_KEYS}
    op_groups = [(None, mask)] if op is None else _groups(op, mask)
    for op_label, op_rows in op_groups:
        which = op_label if variant is None or op_label is None else variant(op_label)
        for label, rows in _groups(dtype, op_rows):
            index = np.flatnonzero(rows)  # the group's rows only: a formula per group, not per whole frame
            subset = {k: np.broadcast_to(v, (n,))[index] for k, v in dims.items()}
            try:
                work = fam.work(work_dtype(label), subset, which, None)
            except ValueError:
                continue
            values = {
                "flops": work.flops,
                "dram_bytes": work.dram_bytes,
                "fma": work.flops if work.fma is None else work.fma,
                "sfu": 0.0 if work.sfu is None else work.sfu,
            }
            for key, value in values.items():
                out[key][index] = value
    return Work(out["flops"], out["dram_bytes"], np.zeros(n), fma=out["fma"], sfu=out["sfu"])
