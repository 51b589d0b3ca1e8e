"""All-reduce of a ``bytes`` message held by each of ``gpus`` GPUs (tensor parallelism), as a ring.

A ring sends 2(n-1)/n of the message over each GPU's link; the reduction adds (n-1)/n of its elements on the
vector pipe; DRAM: each GPU reads its message and the chunks it receives, and writes the result. Variant
``op="alltoall"`` (expert-parallel dispatch/combine): each GPU sends (n-1)/n of a ``bytes`` buffer, no adds.
Where the group outgrows the GPU's link domain, ``physics.collectives`` says how fast those bytes move.
"""

from __future__ import annotations

import numpy as np

from components.physics.base import Dims, OpFamily, Work
from components.physics.dtypes import gemm_bytes


def work(dtype: str, d: Dims, op: str | None = None, kv_dtype: str | None = None) -> Work:
    message, gpus = d["bytes"], d["gpus"]
    if op == "alltoall":  # each GPU's buffer of ``bytes``: (n-1)/n leaves it, as much arrives; no adds
        share = np.where(gpus > 1, (gpus - 1.0) / gpus, 0.0)
        return Work(np.zeros_like(message), np.where(gpus > 1, message * (1.0 + share), 0.0), message * share)
    e = gemm_bytes(dtype)[0]
    share = np.where(gpus > 1, 2.0 * (gpus - 1.0) / gpus, 0.0)
    flops = np.where(gpus > 1, message / e * (gpus - 1.0) / gpus, 0.0)
    return Work(flops, np.where(gpus > 1, message * (1.0 + share), 0.0), message * share)


FAMILY = OpFamily(
    name="allreduce",
    required=("bytes", "gpus"),
    optional=(),
    work=work,
    aliases=("all_reduce",),
    dim_aliases={"bytes": ("size", "size_bytes", "message_bytes"), "gpus": ("num_workers", "world_size")},
    engine=True,
    tabular=False,
    pipe="link",
)
