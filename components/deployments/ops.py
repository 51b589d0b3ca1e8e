"""Per-op times for the composition: an injected ``OpTimeFn`` and the default built on the roofline.

``OpTimeFn(family, dtype, shape_arrays, spec) -> microseconds`` (one value per element of the shape
arrays). The lead wires the op engine (measured > calibrated > spec tiers) in as the function; until
then :func:`roofline_op_time` answers: the speed-of-light time of ``components.physics.roofline`` (small
ops: ``features.analytical``'s FLOP and byte formulas) divided by a fixed efficiency per family and bound;
no launch cost (the framework-cost fit learns one per kernel). The efficiencies are constants of the
method, not fitted on any benchmark side: they say what fraction of peak a good library reaches on a
large op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

OpTimeFn = Callable[[str, str, Mapping[str, Any], Any], np.ndarray]

ACT_DTYPE = "bf16"  # small ops (norms, adds, rotary, SiLU x mul, sampling) costed on 16-bit activations
# Fraction of peak a tuned library reaches on a large op (compute-bound, memory-bound), by family.
EFFICIENCY: dict[str, tuple[float, float]] = {
    "gemm": (0.70, 0.80),
    "moe": (0.55, 0.70),
    "attention": (0.55, 0.75),
    "allreduce": (1.0, 1.0),
    "elementwise": (0.5, 0.75),
    "rmsnorm": (0.5, 0.75),
    # Gated DeltaNet (Triton/FlashInfer kernels): measured / speed of light on the H100's vLLM 0.24 gdn
    # table (out of the launch regime) is ~3.8 for a prefill chunk, ~1.17 for a decode step; the H200's
    # tables check it (benchmarks/gdn_tables_vs_roofline.py, docs/serving.md)
    "gdn": (0.25, 0.85),
    # DSA attention module (projections, indexer, top-k, FlashMLA sparse: a dozen kernels per layer)
    "dsa": (0.3, 0.6),
    # Mamba2's conv1d + SSD scan (Triton kernels, the same family of kernels as GDN's)
    "mamba2": (0.25, 0.85),
}
# Families the op engine holds no tables for: with an op engine, the GPU's measured tables where the
# datasets have them (``gdn_tables``), else -- and in the roofline composition -- the fixed-efficiency
# roofline (tier ``roofline``).
PHYSICS_ONLY_FAMILIES = ("gdn", "dsa", "mamba2")
# No launch cost and no all-reduce start-up latency here: both are parameters of the framework-cost fit
# (per kernel launched, per all-reduce and per all-reduce x GPU; ``compose.overhead_counts``), learned on
# each fold's training runs only -- never constants chosen by looking at a benchmark.


@dataclass(frozen=True)
class Timed:
    """Op times with the tier that answered them (what ``compose`` reads from an op engine too)."""

    duration_us: np.ndarray
    tier: Any  # one name, or one per row


def link_gbps(spec: Any) -> tuple[float, str | None]:
    """GPU-to-GPU bandwidth per direction (GB/s) and a note when assumed: ``physics.link_gbps``."""
    from components.physics.roofline import link_gbps as physics_link

    return physics_link(spec)


def _arr(shape: Mapping[str, Any], key: str, default: float | None = None) -> np.ndarray:
    return np.atleast_1d(np.asarray(shape.get(key, default), dtype="float64"))


def small_op_work(family: str, shape: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(FMA-pipe FLOPs, DRAM bytes) of elementwise and RMSNorm ops: the registry's (components/physics)."""
    if family not in SMALL_OP_FAMILIES:
        raise ValueError(f"op family {family!r}: not composed")
    from components.physics.registry import op_work

    dims = {k: v for k, v in shape.items() if k != "op"}
    work = op_work(
        family, ACT_DTYPE, dims, op=str(shape.get("op", "add")) if family == "elementwise" else None
    )
    return (work.flops if work.fma is None else work.fma), work.dram_bytes


def _sol_parts(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None, tensor: bool = False
) -> tuple[np.ndarray, ...]:
    """(compute, memory, link) speed-of-light microseconds: physics.roofline, or the small-op formulas;
    with ``tensor``, also whether the compute runs on a tensor pipe (what a power cap slows)."""
    if family in ("elementwise", "rmsnorm"):
        flops, nbytes = small_op_work(family, shape)
        compute = flops / (float(spec.peak_tflops.fp32) * 1e12) * 1e6
        parts = (compute, nbytes / (float(spec.dram_gbps) * 1e9) * 1e6, np.zeros_like(compute))
        return (*parts, False) if tensor else parts
    from components.physics.registry import family as family_of
    from components.physics.roofline import roofline

    op = shape.get("op")  # a family's variant (dsa: proj / attn)
    roof = roofline(family, dtype, shape, spec, kv_dtype=kv_dtype, op=None if op is None else str(op))
    parts = (roof.compute_us, roof.memory_us, roof.link_us)
    on_tensor = family_of(family).pipe == "tensor" and roof.choice.tensor
    return (*parts, on_tensor) if tensor else parts


def roofline_op_time(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
) -> np.ndarray:
    """Speed-of-light time over a fixed library efficiency (microseconds; launch and all-reduce latency are
    learned per step by the framework-cost fit)."""
    compute, memory, link = _sol_parts(family, dtype, shape, spec, kv_dtype)
    eff_c, eff_m = EFFICIENCY.get(family, (0.5, 0.7))
    if family == "allreduce":
        gpus = _arr(shape, "gpus")
        return np.where(gpus > 1, np.maximum(link, memory), 0.0)
    return np.maximum(compute / eff_c, memory / eff_m)


def sol_time(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
) -> np.ndarray:
    """The launch-free speed-of-light time: the floor no prediction goes below (microseconds)."""
    return np.maximum.reduce(_sol_parts(family, dtype, shape, spec, kv_dtype))


def sol_split(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(speed-of-light floor, its tensor-pipe part, its DRAM part, :func:`roofline_op_time` without the
    compute: DRAM and link times at the fixed efficiencies) in microseconds at the datasheet peaks: what
    ``physics.limits.GpuLimits.bound`` scales to the GPU's reachable rates (tensor part 0 for work off the
    tensor pipes)."""
    compute, memory, link, on_tensor = _sol_parts(family, dtype, shape, spec, kv_dtype, tensor=True)
    floor = np.maximum.reduce([compute, memory, link])
    rest = np.maximum(memory / EFFICIENCY.get(family, (0.5, 0.7))[1], link)
    return floor, (compute if on_tensor else np.zeros_like(compute)), memory, rest


SMALL_OP_FAMILIES = ("elementwise", "rmsnorm")


def with_small_ops(engine: Callable[..., Any]) -> OpTimeFn:
    """An ``OpTimeFn`` asking ``engine`` (e.g. ``OpEngine.predict``) for GEMM/attention/MoE/all-reduce
    and answers the small ops (norms, adds, rotary, SiLU x mul, sampling) with :func:`roofline_op_time`."""

    def op_time(
        family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
    ) -> Any:
        if family in SMALL_OP_FAMILIES:
            return roofline_op_time(family, dtype, shape, spec)
        if family in PHYSICS_ONLY_FAMILIES:
            return roofline_op_time(family, dtype, shape, spec, kv_dtype=kv_dtype)
        if family == "attention":
            return engine(family, dtype, shape, spec, kv_dtype=kv_dtype)
        return engine(family, dtype, shape, spec)

    return op_time


# ---------------------------------------------------------------- the op engine as the op-time function

ROOFLINE_SOURCE, ENGINE_SOURCE = "roofline", "engine"  # which op times a framework cost was fitted on


REFERENCE_GPUS = ("h200", "h100-sxm")  # GPUs with complete tables, newest architecture first


def _table_reader(family: str) -> Callable[..., Any]:
    """A GPU's measured times of a family read from AIConfigurator's tables (None without a table)."""
    if family == "dsa":
        from components.deployments.dsa_tables import dsa_measured

        return dsa_measured
    from components.deployments.gdn_tables import gdn_measured

    return gdn_measured


def _reference(
    read: Callable[..., Any], spec: Any, framework: str | None, shape: Mapping[str, Any], args: tuple
) -> tuple[np.ndarray, str, str] | None:
    """(times on the reference GPU, its id, "framework version") of the first ``REFERENCE_GPUS`` table that
    is not ``spec``'s own, for an NVIDIA GPU without one; None for another vendor (its kernels differ)."""
    from types import SimpleNamespace

    from components.deployments.config import _datasets_dir

    if str(getattr(spec, "vendor", "nvidia")) != "nvidia":
        return None
    for ref in REFERENCE_GPUS:
        found = (
            None
            if ref == str(spec.id)
            else read(SimpleNamespace(id=ref), framework, shape, _datasets_dir(), *args)
        )
        if found is not None:
            return found[0], ref, found[1]
    return None


# The part of an op its table does not time, answered by its roofline beside the measured part: the
# Mamba2 tables time the causal conv1d kernels alone, the SSD scan is not measured.
UNMEASURED_PART = {"mamba2": "scan"}


def _unmeasured_us(family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None):
    part = UNMEASURED_PART.get(family)
    if part is None:
        return 0.0
    from components.physics.roofline import roofline

    roof = roofline(family, dtype, shape, spec, kv_dtype=kv_dtype, op=part)
    eff_c, eff_m = EFFICIENCY[family]
    return np.maximum(roof.compute_us / eff_c, roof.memory_us / eff_m)


def table_op_time(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None, framework: str | None
) -> Timed:
    """A GDN, Mamba2 or DSA op from AIConfigurator's measured kernels of this GPU (``gdn_tables``,
    ``dsa_tables``; the serving framework's own where measured, a part the table lacks at its roofline:
    ``UNMEASURED_PART``); on an NVIDIA GPU without a table, a measured GPU's times scaled by the
    speed-of-light ratio (transfer); the fixed-efficiency roofline where neither reaches."""
    from components.deployments.config import _datasets_dir

    read = _table_reader(family)
    args = (dtype, kv_dtype) if family == "dsa" else (family,)
    roof = roofline_op_time(family, dtype, shape, spec, kv_dtype=kv_dtype)
    found = read(spec, framework, shape, _datasets_dir(), *args)
    if found is not None:
        times, label = found[0], f"measured:{family} {found[1]}"
    else:
        ref = _reference(read, spec, framework, shape, args)
        if ref is None:
            return Timed(roof, "roofline")
        from components.devices import load_catalog

        ref_spec = load_catalog().resolve(ref[1])
        scale = sol_time(family, dtype, shape, spec, kv_dtype) / sol_time(
            family, dtype, shape, ref_spec, kv_dtype
        )
        times, label = ref[0] * scale, f"transfer:{family} {ref[1]} {ref[2]}"
    if family in UNMEASURED_PART:
        times = times + _unmeasured_us(family, dtype, shape, spec, kv_dtype)
        label = f"{label} ({UNMEASURED_PART[family]}: roofline)"  # no "+": it joins tiers
    hit = np.isfinite(times)
    return Timed(np.where(hit, times, roof), np.where(hit, label, "roofline").astype(object))


def engine_op_time(
    engine: Any, unseen: frozenset[str] = frozenset(), framework: str | None = None
) -> OpTimeFn:
    """The op engine (``components.opmodel.engine.OpEngine``) as the composition's op-time function.

    GEMM, attention and MoE go to ``engine.predict`` (its tier per row: measured where the GPU's kernel
    tables hold the op, calibrated, else spec); norms, adds, rotary, SiLU x mul, sampling and the TP
    all-reduce to :func:`roofline_op_time` (the link's physics, its start-up latency fitted with the
    framework cost: the engine answers all-reduces with one median-efficiency prior, which made the
    all-reduces 68% of a Llama-70B TP-4 prefill on an H100; the benches answer them from PipeWeave's
    measured collective tables where a GPU has one). A GPU in ``unseen`` is answered as one no file has:
    the engine without its measured tables or calibration (spec tier only) -- what transfers to a GPU
    nobody measured.
    """
    from components.opmodel.engine import OpEngine
    from components.opmodel.framework_tables import tier_label

    spec_only = OpEngine(
        None, engine.spec_model, None, engine.intervals, engine.meta, None, engine.fallback_util
    )
    seen = with_small_ops(engine.predict)
    blind = with_small_ops(spec_only.predict)

    def op_time(
        family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
    ) -> Any:
        if family == "allreduce":
            return Timed(roofline_op_time(family, dtype, shape, spec), "roofline")
        if family in PHYSICS_ONLY_FAMILIES and spec.id not in unseen:
            return table_op_time(family, dtype, shape, spec, kv_dtype, framework)
        fn = blind if spec.id in unseen else seen
        out = fn(family, dtype, shape, spec, kv_dtype=kv_dtype)
        if not hasattr(out, "duration_us"):
            return Timed(np.asarray(out, dtype="float64"), "roofline")
        tier = np.asarray(out.tier, dtype=object)
        label = None if spec.id in unseen else tier_label(engine, family, dtype, spec, kv_dtype)
        if label is not None:  # whose kernels: the serving framework's own tables, or every framework's
            tier = np.where(np.isin(tier, ("measured", "transfer")), tier + f":{label}", tier)
        return Timed(np.asarray(out.duration_us, dtype="float64"), tier)

    def for_framework(name: str) -> OpTimeFn:
        """The same op times from ``name``'s own measured kernels where it measured them (each serving
        engine's step: ``stepmodel.build_step_models``)."""
        return (
            engine_op_time(engine.for_framework(name), unseen, name)
            if hasattr(engine, "for_framework")
            else op_time
        )

    def own_kernels(spec: Any) -> bool:
        """Whether ``spec`` is a GPU with measured kernels (its steps differ per framework); the others
        share one timing of the pooled tables (a whole-catalog rank over three engines times them once)."""
        from components.opmodel.measured import physics_key

        measured = getattr(engine, "measured", None)
        return measured is not None and spec.id not in unseen and physics_key(spec) in measured.by_physics

    op_time.for_framework = for_framework  # type: ignore[attr-defined]
    op_time.own_kernels = own_kernels  # type: ignore[attr-defined]
    return op_time


def has_data(engine: Any) -> bool:
    """An engine with a measured store or a learned spec model (a bare one is the roofline at 50%)."""
    return engine is not None and (engine.measured is not None or engine.spec_model is not None)


_PRODUCTION: dict[str, tuple[OpTimeFn, str]] = {}


def production_op_time() -> tuple[OpTimeFn, str]:
    """(op-time function, source) for production answers: the op engine the state folder holds (the
    champion's, ``components.opmodel.loading.engine_for``), or the fixed-efficiency roofline where there is
    none -- each with the framework cost fitted on the same op times (``framework_cost``), and each
    bounded by the GPU's reachable rates learned on measured steps (``op_limits.production_limits``)."""
    from components.platform.config import get_settings

    key = str(get_settings().models_dir)
    if key not in _PRODUCTION:
        from components.deployments.op_limits import limited, production_limits
        from components.opmodel.loading import engine_for

        engine = engine_for(None)
        fn, source = (
            (engine_op_time(engine), ENGINE_SOURCE)
            if has_data(engine)
            else (roofline_op_time, ROOFLINE_SOURCE)
        )
        out = limited(fn, production_limits())
        if fn is not roofline_op_time:  # its grids come from the op engine: kept on disk between processes
            out = with_step_cache(out)
        _PRODUCTION[key] = (out, source)
    return _PRODUCTION[key]


def with_step_cache(fn: OpTimeFn, engine_dir: Any = None, constants: Any = None) -> OpTimeFn:
    """``fn`` (an op engine's op times, :func:`engine_op_time` under ``op_limits.limited``) carrying where
    its step models are kept on disk between processes and the tag of the state they come from
    (``step_cache``): the op engine's folder (``engine_dir``, default the state folder's champion), the
    measured store, the calibrations, the engines' constants file (``constants``, default the package's)."""
    from pathlib import Path

    from components.deployments.engines.base import CONSTANTS_FILE
    from components.deployments.step_cache import CACHE_DIR, state_tag
    from components.opmodel.calibrated import calibration_dir
    from components.opmodel.loading import ENGINE_DIR
    from components.platform.config import get_settings

    settings = get_settings()
    inputs = [
        Path(engine_dir) if engine_dir is not None else settings.models_dir / ENGINE_DIR,
        settings.data_dir / "opmodel" / "store" / "store.json",
        calibration_dir(settings.state_dir),
        Path(constants) if constants is not None else Path(CONSTANTS_FILE),
    ]
    fn.step_cache = (settings.cache_dir / CACHE_DIR, state_tag(inputs))  # type: ignore[attr-defined]
    return fn
