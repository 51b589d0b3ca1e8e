"""Per-op times for the composition: an injected ``OpTimeFn`` and the default built on the roofline.

``OpTimeFn(family, dtype, shape_arrays, spec) -> microseconds`` (one value per element of the shape
arrays). The lead wires the op engine (measured > calibrated > spec tiers) in as the function; until
then :func:`roofline_op_time` answers: the speed-of-light time of ``components.opmodel.physics`` (or,
where that package is absent, the same FLOP and byte counts below) divided by a fixed efficiency per
(family, bound) plus one kernel launch. The efficiencies are constants of the method, not fitted on
any benchmark side: they say what fraction of peak a good library reaches on a large op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from components.features.analytical import ELEMENTWISE_COST, RMSNORM_FMA

OpTimeFn = Callable[[str, str, Mapping[str, Any], Any], np.ndarray]

# Bytes per element the op streams (math dtype for activations; weight-only formats read packed weights).
ACT_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1, "int8": 1,
                               "int8_wo": 2, "int4_wo": 2, "nvfp4": 1}
WEIGHT_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1 + 1 / 128,
                                  "int8": 1, "int8_wo": 1, "int4_wo": 0.5 + 1 / 64, "nvfp4": 0.5 + 1 / 16}
# Tensor pipe per math dtype, fastest first; a GPU without the pipe falls back to the next.
PIPES: dict[str, tuple[str, ...]] = {
    "nvfp4": ("fp4_tensor", "fp8_tensor", "bf16_tensor", "fp16_tensor"),
    "fp8": ("fp8_tensor", "bf16_tensor", "fp16_tensor"), "fp8_block": ("fp8_tensor", "bf16_tensor", "fp16_tensor"),
    "int8": ("int8_tensor", "bf16_tensor", "fp16_tensor"),
    "bf16": ("bf16_tensor", "fp16_tensor", "fp32"), "fp16": ("fp16_tensor", "bf16_tensor", "fp32"),
    "int8_wo": ("bf16_tensor", "fp16_tensor", "fp32"), "int4_wo": ("bf16_tensor", "fp16_tensor", "fp32"),
    "fp32": ("tf32_tensor", "fp32"),
}
# Fraction of peak a tuned library reaches on a large op (compute-bound, memory-bound), by family.
EFFICIENCY: dict[str, tuple[float, float]] = {
    "gemm": (0.70, 0.80), "moe": (0.55, 0.70), "attention": (0.55, 0.75), "allreduce": (1.0, 1.0),
    "elementwise": (0.5, 0.75), "rmsnorm": (0.5, 0.75),
}
LAUNCH_US = 4.0  # one kernel launch + tail, the floor of any op
ALLREDUCE_LATENCY_US = 8.0  # per ring hop: NCCL/custom all-reduce start-up
PCIE_GBPS = 25.0  # per direction, PCIe 4.0 x16 as achieved, for a GPU whose catalog entry has no link_gbps


def peak_flops(dtype: str, spec: Any) -> tuple[float, str]:
    """(FLOP/s, pipe) of the first pipe the GPU has for ``dtype``."""
    for pipe in PIPES.get(dtype, ("fp32",)):
        value = getattr(spec.peak_tflops, pipe, None)
        if value:
            return float(value) * 1e12, pipe
    return float(spec.peak_tflops.fp32) * 1e12, "fp32"


def link_gbps(spec: Any) -> tuple[float, str | None]:
    """GPU-to-GPU bandwidth per direction in GB/s: the catalog's ``link_gbps``, else PCIe (noted)."""
    value = getattr(spec, "link_gbps", None)
    if value:
        return float(value), None
    return PCIE_GBPS, f"{spec.id}: no link_gbps in the catalog; all-reduce over PCIe ({PCIE_GBPS:g} GB/s)"


def _arr(shape: Mapping[str, Any], key: str, default: float | None = None) -> np.ndarray:
    value = shape.get(key, default)
    return np.asarray(value, dtype="float64")


def work(family: str, dtype: str, shape: Mapping[str, Any], kv_dtype: str | None = None) -> tuple[np.ndarray, ...]:
    """(flops, dram bytes, link bytes) of one op -- the same counts as ``components.opmodel.physics.op_work``."""
    a, w = ACT_BYTES.get(dtype, 2), WEIGHT_BYTES.get(dtype, 2)
    if family == "gemm":
        m, n, k, b = _arr(shape, "M"), _arr(shape, "N"), _arr(shape, "K"), _arr(shape, "B", 1.0)
        return 2 * b * m * n * k, b * (a * m * k + w * k * n + 2 * m * n), np.zeros_like(m)
    if family == "attention":
        b, s, kv, h, hkv, d = (_arr(shape, x) for x in ("B", "S", "KV", "H", "HKV", "D"))
        pairs = s * kv - s * (s - 1) / 2
        kvb = ACT_BYTES.get(kv_dtype or dtype, 2)
        return 4 * b * h * d * pairs, b * (2 * a * s * h * d + 2 * kvb * kv * hkv * d), np.zeros_like(b)
    if family == "moe":
        t, e, topk, h, i = (_arr(shape, x) for x in ("T", "E", "topk", "H", "I"))
        tp, ep = _arr(shape, "tp", 1.0), _arr(shape, "ep", 1.0)
        routed, width, local = t * topk / ep, i / tp, e / ep
        active = np.minimum(local, routed)  # experts that receive at least one token (uniform routing)
        return (6 * routed * h * width, w * 3 * h * width * active + a * (2 * routed * h + t * h),
                np.zeros_like(t))
    if family == "allreduce":
        size, gpus = _arr(shape, "bytes"), _arr(shape, "gpus")
        moved = np.where(gpus > 1, 2 * (gpus - 1) / gpus * size, 0.0)
        return np.zeros_like(size), 2 * size, moved
    if family == "elementwise":
        numel = _arr(shape, "N")
        op = str(shape.get("op", "add"))
        fma, _, inputs = ELEMENTWISE_COST.get(op, (1, 0, 2))
        return fma * numel, a * numel * (inputs + 1), np.zeros_like(numel)
    if family == "rmsnorm":
        rows, cols = _arr(shape, "B", 1.0), _arr(shape, "H")
        return RMSNORM_FMA * rows * cols, a * (2 * rows * cols + cols), np.zeros_like(rows)
    raise ValueError(f"op family {family!r}: not composed")


def roofline_op_time(family: str, dtype: str, shape: Mapping[str, Any], spec: Any,
                     kv_dtype: str | None = None) -> np.ndarray:
    """Speed-of-light time over a fixed library efficiency, plus one launch (microseconds)."""
    flops, dram, link = work(family, dtype, shape, kv_dtype)
    vector = family in ("elementwise", "rmsnorm")
    peak = float(spec.peak_tflops.fp32) * 1e12 if vector else peak_flops(dtype, spec)[0]
    eff_c, eff_m = EFFICIENCY.get(family, (0.5, 0.7))
    compute = flops / peak / eff_c * 1e6
    memory = dram / (float(spec.dram_gbps) * 1e9) / eff_m * 1e6
    if family == "allreduce":
        gpus = _arr(shape, "gpus")
        comm = link / (link_gbps(spec)[0] * 1e9) * 1e6 + np.where(gpus > 1, ALLREDUCE_LATENCY_US * gpus, 0.0)
        return np.where(gpus > 1, comm, 0.0) + 0.0 * memory
    return np.maximum(compute, memory) + LAUNCH_US


def sol_time(family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None) -> np.ndarray:
    """The launch-free speed-of-light time: the floor no prediction goes below (microseconds)."""
    flops, dram, link = work(family, dtype, shape, kv_dtype)
    vector = family in ("elementwise", "rmsnorm")
    peak = float(spec.peak_tflops.fp32) * 1e12 if vector else peak_flops(dtype, spec)[0]
    times = [flops / peak * 1e6, dram / (float(spec.dram_gbps) * 1e9) * 1e6]
    if family == "allreduce":  # no floor from a guessed link: only a catalog link_gbps bounds it
        bw = getattr(spec, "link_gbps", None)
        times = [link / (float(bw) * 1e9) * 1e6 if bw else np.zeros_like(link)]
    return np.maximum.reduce(times)
