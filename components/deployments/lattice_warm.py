"""The GEMM lattices every deployment's step model reads, made before the first question (at promotion).

The op engine's monotone envelope (``opmodel/envelope.py``) answers a GEMM question through a lattice of
18**3 sizes per (GPU, dtype, serving engine whose kernels answer it); a dense model's linear layers and
every model's LM head are GEMMs without a batch count, so they all read that one lattice, whatever the
model. A first whole-catalog ``rank --llm`` built them all (77 for bf16: about 5 CPU-s of its ~25). They
depend on the champion and the device catalog only, so ``serving/prepare.py`` makes them when a version
is promoted, through the same op-time function a question uses (``ops.engine_op_time``: each serving
engine's own kernels on a GPU that has them, the pooled tables elsewhere), and the first question reads
the saved files (``opmodel/lattice_cache.py``). A lattice is the engine's raw answers on fixed points, so
the saved one is the one the question would have built, to the bit. An attention lattice holds the heads
per GPU, KV heads, head dim and window of a line, not the model: ``warm_attention_lattices`` makes those of
every option a rank of each bundled model forms (346 were about 6 of the 70B rank's ~21 CPU-s). MoE
lattices hold the experts and are still made by the question that needs them; the measured tier's
attention site tables (per GPU, dtype and KV dtype, model-independent) are built and saved here too
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

    names = sorted({step_fn_name(op_time, spec, name) for name in ENGINES})
    return [_named_fn(op_time, name) for name in names]


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


def step_fn_name(op_time: Callable[..., Any], spec: Any, framework: str) -> str:
    """Whose op times a step model of ``framework`` on ``spec`` is timed through (``stepmodel``'s choice):
    that serving engine's own where ``spec`` has measured kernels, else the pooled ones ("")."""
    own = getattr(op_time, "own_kernels", lambda spec: True)
    return framework if hasattr(op_time, "for_framework") and own(spec) else ""


def _named_fn(op_time: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The function ``step_fn_name`` names: a serving engine's own, or the pooled ``op_time`` ("")."""
    return op_time.for_framework(name) if name else op_time  # type: ignore[attr-defined]


def attention_lines(d: Any) -> list[Any]:
    """One decode row and one prefill row of each attention line of ``d``'s step grids: the same lines
    (heads per GPU, KV heads, head dim, window, dtypes) as ``stepmodel._grid_lines``'s, so the envelope
    groups they fall in, both phases', are the grid's."""
    from components.deployments.compose import SEQUENCE_KINDS, _layer_ops
    from components.opmodel.envelope import AXES

    layers = d.model.layers
    lines = _layer_ops(d, "decode", 1.0, 1.0, 1.0, 2.0, layers) + _layer_ops(
        d, "prefill", 1.0, 1.0, 1.0, 1.0, layers
    )
    return [x for x in lines if x.kind in SEQUENCE_KINDS and x.family in AXES]


def fitting_deployments(model: Any, spec: Any, frameworks: Sequence[str]) -> list[Any]:
    """Every option a ``rank --llm`` of ``model`` forms on ``spec`` (TP sizes that divide its heads, each
    serving engine, the checkpoint's dtypes) whose weights leave room for one one-token request: a superset
    of what any workload's rank composes there."""
    from components.deployments.config import DeploymentError
    from components.deployments.engines.registry import engine_for
    from components.deployments.serve import kv_capacity
    from components.deployments.service import deployment_from, rank_tps

    out = []
    for tp in rank_tps(model):
        for framework in frameworks:
            params = {"isl": 1, "osl": 1, "concurrency": 1, "tp": tp, "framework": framework}
            try:
                d = deployment_from(model, spec, params)
                kv_capacity(d, engine_for(framework, spec))
            except DeploymentError:
                continue
            out.append(d)
    return out


def warm_attention_lattices(op_time: Callable[..., Any], specs: Iterable[Any], models: Iterable[Any]) -> int:
    """Ask ``op_time`` one decode and one prefill row of each attention line of every option a rank of each
    model forms on each GPU, which makes and saves each (heads, KV heads, head dim, window, phase) lattice
    the rank's step grids read (an engine with lattice files: ``OpEngine.lattices``). One call per GPU,
    op-time function and *columns*: the envelope holds the dimensions a call's lines have (a model with
    windowed layers holds W = 0 on its others), so models whose lines have the same columns share a call
    (their lattices are the ones each model's own rank builds) and the others get their own. Lines asked
    before are not asked again (most of the catalog's dense LLMs share their heads per GPU). The number of
    calls."""
    from components.deployments.compose import time_ops
    from components.deployments.engines.registry import ENGINES

    models, asked = list(models), 0
    for spec in specs:
        batches: dict[tuple, dict[tuple, Any]] = {}  # (function, columns) -> distinct lines
        for model in models:
            per_fn: dict[str, list[Any]] = {}
            for d in fitting_deployments(model, spec, sorted(ENGINES)):
                per_fn.setdefault(step_fn_name(op_time, spec, d.framework), []).extend(attention_lines(d))
            for name, lines in per_fn.items():
                batch = batches.setdefault((name, _columns(lines)), {})
                for line in lines:
                    batch.setdefault(_line_signature(line), line)
        for (name, _), distinct in batches.items():
            if distinct:
                time_ops(list(distinct.values()), spec, _named_fn(op_time, name))
                asked += 1
    return asked


def _columns(lines: Sequence[Any]) -> frozenset:
    """Per (family, dtypes) of a model's lines, the union of their columns (``compose.time_ops`` stacks them:
    a column one line lacks takes its neutral value)."""
    union: dict[tuple, set[str]] = {}
    for line in lines:
        union.setdefault((line.family, line.dtype, line.kv_dtype, line.shape.get("op")), set()).update(
            line.shape
        )
    return frozenset((key, frozenset(names)) for key, names in union.items())


def _line_signature(line: Any) -> tuple:
    """An attention line at the warming's fixed points, whole: its family, dtypes and shape."""
    shape = tuple(sorted((k, str(v)) for k, v in line.shape.items()))
    return (line.family, line.dtype, line.kv_dtype, shape)


def catalog_models(datasets_dir: Any = None) -> list[Any]:
    """The shapes of the bundled model configs ``--llm`` takes by name that the composition models."""
    from components.deployments.config import DeploymentError, bundled_configs, model_shape

    out = []
    for _, path in sorted(bundled_configs(datasets_dir).items()):
        try:
            out.append(model_shape(str(path)))
        except DeploymentError:
            continue
    return out
