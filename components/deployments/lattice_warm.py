"""The GEMM lattices every deployment's step model reads, made before the first question (at promotion).

The op engine's monotone envelope (``opmodel/envelope.py``) answers a GEMM question through a lattice of
18**3 sizes per (GPU, dtype, serving engine whose kernels answer it); a dense model's linear layers and
every model's LM head are GEMMs without a batch count, so they all read that one lattice, whatever the
model. A first whole-catalog ``rank --llm`` built them all (77 for bf16: about 5 CPU-s of its ~25). They
depend on the champion and the device catalog only, so ``serving/prepare.py`` makes them when a version
is promoted, through the same op-time function a question uses (``ops.engine_op_time``: each serving
engine's own kernels on a GPU that has them, the pooled tables elsewhere), and the first question reads
the saved files (``opmodel/lattice_cache.py``). A lattice is the engine's raw answers on fixed points, so
the saved one is the one the question would have built, to the bit. Attention and MoE lattices hold the
model's heads or experts and are still made by the question that needs them; the measured tier's attention
site tables (per GPU, dtype and KV dtype, model-independent) are built and saved here too
(``warm_site_tables``: 16 of them were about 1.5 CPU-s of that first rank).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

# the dtype every deployment's LM head (and a default question's linear layers) is asked in; an fp8
# question's lattices are made by the first one (adding fp8 here doubled what promotion pays: 120 more)
WARM_DTYPES: tuple[str, ...] = ("bf16",)


def gemm_lattice_fns(op_time: Callable[..., Any], spec: Any) -> list[Callable[..., Any]]:
    """The op-time functions whose GEMM lattices a step model on ``spec`` reads (``stepmodel``'s choice):
    each serving engine's own where ``spec`` has measured kernels, else the pooled ``op_time`` alone."""
    from components.deployments.engines.registry import ENGINES

    per_framework = getattr(op_time, "for_framework", None)
    own = getattr(op_time, "own_kernels", lambda spec: True)
    if per_framework is None or not own(spec):
        return [op_time]
    return [per_framework(name) for name in sorted(ENGINES)]


def warm_gemm_lattices(
    op_time: Callable[..., Any], specs: Iterable[Any], dtypes: Sequence[str] = WARM_DTYPES
) -> int:
    """Ask ``op_time`` one GEMM row per (GPU, serving engine, dtype), which makes and saves that lattice
    (an engine with lattice files: ``OpEngine.lattices``); the number of questions asked."""
    one = {"M": np.ones(1), "N": np.ones(1), "K": np.ones(1)}
    asked = 0
    for spec in specs:
        for fn in gemm_lattice_fns(op_time, spec):
            for dtype in dtypes:
                fn("gemm", dtype, one, spec)
                asked += 1
    return asked


def warm_site_tables(
    engines: Iterable[Any], families: Sequence[str] = ("attention",), dtypes: Sequence[str] = WARM_DTYPES
) -> int:
    """Build (and save, on a split store: ``store_cache.GroupFrames.table``) the measured tier's site tables
    of ``families`` and ``dtypes`` in each engine's store (``OpEngine.measured``); how many. The GEMM
    tables a rank reads are built by the GEMM lattices' own questions (``warm_gemm_lattices``)."""
    built = 0
    for engine in engines:
        measured = getattr(engine, "measured", None)
        if measured is None:
            continue
        for family, device, dtype, kv_dtype in list(measured.groups):
            if family in families and dtype in dtypes:
                measured.table(family, device, dtype, kv_dtype)
                built += 1
    return built
