"""Roofline estimate of one compiled CUDA kernel under a launch on a GPU, from its SASS alone.

Nothing runs: the static report gives per-thread instruction counts by class (straight-line and
inside loops), the launch gives the thread count, the device spec gives each pipe's throughput.
Per-thread dynamic counts assume every loop body runs ``loop_trips`` times (trip counts are not
in the SASS); that assumption is the estimate's main uncertainty and is stated in every note.

Per pipe (instructions/s of one thread-instruction): FP32 = peak_fp32 / 2 (an FFMA counts 2
FLOP), FP64 = peak_fp64 / 2, FP16 = peak_fp16 / 4 (HFMA2 packs two lanes), integer = half the FP32
lane rate (Ampere+ run INT32 on half the lanes; conservative elsewhere), SFU = 16 per SM per clock,
shared = 32 lanes x 4 B per SM per clock. DRAM traffic = global loads/stores x ``access_bytes``
per thread (no cache reuse: an upper bound for streaming kernels). The bound pipe is the slowest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from components.physics.dtypes import ELEM_BYTES

LOOP_TRIPS = 8.0  # assumed iterations of each loop body (see module doc)
LAUNCH_US = 2.5  # a bare kernel launch (the lowest xtime in gpuFLOPBench is 1.7 us)
# Achieved fraction of the slowest pipe's ceiling: 1 / the median measured/estimated ratio (1.10)
# over the 416 compiled CUDA kernels of gpuFLOPBench's bolet train side (RTX 3080, loop_trips 8).
EFFICIENCY = 1 / 1.10
# Bytes per global access of each dtype a kernel may be declared in: the registry's (components/physics).
ACCESS_BYTES = {d: ELEM_BYTES[d] for d in ("fp64", "fp32", "fp16", "bf16", "fp8", "int8")}
TENSOR_FLOPS_PER_THREAD = 128.0  # one m16n8k16 MMA: 4096 FLOP per warp


@dataclass
class KernelEstimate:
    kernel: str
    threads: int
    blocks: int
    flops: float
    int_ops: float
    dram_bytes: float
    times_us: dict[str, float] = field(default_factory=dict)
    roofline_us: float = 0.0
    bound_pipe: str = "launch"
    duration_us: float = 0.0
    # FLOPs by precision (fp32, fp64, fp16) when the static report counts them as Nsight does
    flops_by_precision: dict[str, float] = field(default_factory=dict)

    @property
    def arith_intensity(self) -> float | None:
        return self.flops / self.dram_bytes if self.dram_bytes > 0 else None

    @property
    def roofline_class(self) -> str:
        from components.physics.bounds import class_of_bound

        return class_of_bound(self.bound_pipe)


def dynamic_counts(
    instructions: dict[str, int], loop_instructions: dict[str, int], loop_trips: float = LOOP_TRIPS
) -> dict[str, float]:
    """Per-thread executed instructions by class: straight-line once, loop bodies ``loop_trips`` times."""
    return {
        c: float(n - loop_instructions.get(c, 0)) + loop_trips * float(loop_instructions.get(c, 0))
        for c, n in instructions.items()
        if c != "total"
    }


FLOP_KEYS: tuple[str, ...] = ("flop_fp32", "flop_fp64", "flop_fp16")  # as static.sass.FLOP_KEYS


def counted_instructions(kernel: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(instructions, loop instructions) of a static kernel with its FLOP counts as extra classes
    (``flop_fp32`` ...), when the report has them, so dynamic counts carry FLOPs as Nsight counts."""
    flops = getattr(kernel, "flops", None) or {}
    if not all(k in flops for k in FLOP_KEYS):
        return dict(kernel.instructions), dict(kernel.loop_instructions)
    return (
        {**kernel.instructions, **{k: flops[k] for k in FLOP_KEYS}},
        {**kernel.loop_instructions, **{k: flops.get(f"loop_{k}", 0) for k in FLOP_KEYS}},
    )


def nest_counts(
    instructions: dict[str, int], loop_instructions: dict[str, int], detail: list[dict], trips: list[float]
) -> dict[str, float]:
    """Per-thread executed instructions by class from the SASS loop nest: straight-line code once,
    each loop's own instructions (those whose innermost loop it is) times the product of its own
    and its enclosing loops' trip counts (``trips[i]`` for ``detail[i]``)."""
    runs: list[float] = []
    for i, loop in enumerate(detail):
        parent = int(loop.get("parent", -1))
        runs.append(trips[i] * (runs[parent] if 0 <= parent < i else 1.0))
    counts = {c: float(n - loop_instructions.get(c, 0)) for c, n in instructions.items() if c != "total"}
    for loop, n in zip(detail, runs, strict=True):
        for c, k in loop.get("own", {}).items():
            counts[c] = counts.get(c, 0.0) + n * float(k)
    return counts


def _dims(values: Any, what: str) -> tuple[int, int, int]:
    if isinstance(values, int):
        values = [values]
    if not isinstance(values, Sequence) or isinstance(values, str) or not 1 <= len(values) <= 3:
        raise ValueError(f"launch {what}: expected 1 to 3 positive integers, got {values!r}")
    dims = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"launch {what}: expected positive integers, got {values!r}")
        dims.append(int(v))
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def launch_dims(launch: dict[str, Any]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) from a launch dict; ValueError naming the bad field."""
    if "grid" not in launch or "block" not in launch:
        missing = [k for k in ("grid", "block") if k not in launch]
        raise ValueError(f'launch: missing {" and ".join(missing)} (e.g. {{"grid": [256], "block": [256]}})')
    grid, block = _dims(launch["grid"], "grid"), _dims(launch["block"], "block")
    if math.prod(block) > 1024:
        raise ValueError(f"launch block: {math.prod(block)} threads per block; at most 1024")
    return grid, block


def estimate_kernel(
    name: str,
    instructions: dict[str, int],
    loop_instructions: dict[str, int],
    grid: tuple[int, ...],
    block: tuple[int, ...],
    spec: Any,
    dtype: str | None = None,
    loop_trips: float = LOOP_TRIPS,
    efficiency: float = EFFICIENCY,
    dynamic: dict[str, float] | None = None,
) -> KernelEstimate:
    """Counts, per-pipe times and the bound pipe of one kernel under one launch on one GPU.

    ``dynamic`` (per-thread executed instructions by class, e.g. from ``nest_counts`` with the
    source's trip counts) replaces the ``loop_trips`` assumption when given."""
    threads = math.prod(grid) * math.prod(block)
    dyn = dynamic if dynamic is not None else dynamic_counts(instructions, loop_instructions, loop_trips)
    fp32, fp64, fp16 = dyn.get("fp32", 0.0), dyn.get("fp64", 0.0), dyn.get("fp16", 0.0)
    tensor = dyn.get("tensor", 0.0)
    access = ACCESS_BYTES.get(dtype, 8 if fp64 > fp32 else 4)
    mem_ops = (
        dyn.get("global_ld", 0.0)
        + dyn.get("global_st", 0.0)
        + dyn.get("atomic", 0.0)
        + dyn.get("texture", 0.0)
        + dyn.get("local_ld", 0.0)
        + dyn.get("local_st", 0.0)
    )
    if all(k in dyn for k in FLOP_KEYS):  # FLOP per instruction as Nsight counts (FMA 2, add 1)
        per_thread = sum(dyn[k] for k in FLOP_KEYS)
    else:  # older static reports: every FP instruction counted as an FMA
        per_thread = 2 * fp32 + 2 * fp64 + 4 * fp16
    flops = threads * (per_thread + TENSOR_FLOPS_PER_THREAD * tensor)
    int_ops = threads * dyn.get("int", 0.0)
    dram = threads * mem_ops * access
    peaks = spec.peak_tflops
    clock = spec.boost_clock_mhz * 1e6
    fp32_rate = peaks.fp32 * 1e12 / 2
    times = {
        "fp32": threads * fp32 / fp32_rate,
        "fp64": threads * fp64 / ((peaks.fp64 or peaks.fp32 / 64) * 1e12 / 2),
        "fp16": threads * fp16 / ((peaks.fp16 or peaks.fp32) * 1e12 / 4),
        "int": int_ops / (fp32_rate / 2),
        "sfu": threads * dyn.get("sfu", 0.0) / (spec.sms * 16 * clock),
        "shared": threads * (dyn.get("shared_ld", 0.0) + dyn.get("shared_st", 0.0)) / (spec.sms * 32 * clock),
        "dram": dram / spec.dram_bytes_per_s,
    }
    if tensor:
        tensor_peak = peaks.fp16_tensor or peaks.bf16_tensor or peaks.fp32
        times["tensor"] = threads * tensor * TENSOR_FLOPS_PER_THREAD / (tensor_peak * 1e12)
    times_us = {k: v * 1e6 for k, v in times.items()}
    bound = max(times_us, key=lambda k: times_us[k])
    roofline = times_us[bound]
    if roofline < LAUNCH_US:
        bound = "launch"
    duration = max(roofline / efficiency, 0.0) + LAUNCH_US
    return KernelEstimate(
        name,
        threads,
        math.prod(grid),
        flops,
        int_ops,
        dram,
        times_us,
        max(roofline, LAUNCH_US),
        bound,
        duration,
        {k.removeprefix("flop_"): threads * dyn[k] for k in FLOP_KEYS if k in dyn},
    )


__all__ = [
    "ACCESS_BYTES",
    "FLOP_KEYS",
    "LAUNCH_US",
    "LOOP_TRIPS",
    "KernelEstimate",
    "counted_instructions",
    "dynamic_counts",
    "estimate_kernel",
    "launch_dims",
    "nest_counts",
]
