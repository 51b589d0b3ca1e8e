"""Speed-of-light physics of the modern op families: GEMM in every serving dtype, attention, MoE, all-reduce.

One place says how much work an op is (FLOPs, minimum DRAM bytes, bytes over the GPU-to-GPU link), which pipe
does it on a given GPU, and how long it takes at that GPU's peaks. Every tier of the op engine (measured,
calibrated, spec) interpolates or learns the *efficiency* ``roofline time / measured time`` against these
figures, and every answer is checked against them: one runtime, never below the roofline time; GFLOP/s, GB/s
and intensity derived from it (so never above a peak); the roofline class is the side of the bound pipe.

Everything is vectorised over the rows of one (family, dtype, GPU) group: ``shape`` maps a dimension name to
an array (or a scalar). Why per GPU and dtype: the pipe choice (and an emulation note) belongs to the pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.physics.attention import attention_pairs
from components.physics.base import PhysicsError, Work, dims_of
from components.physics.bounds import classes_of_bounds
from components.physics.collectives import domain_note, domain_of, link_rate_gbps
from components.physics.dtypes import (
    ATTENTION_DTYPES,
    FALLBACK,
    GEMM_DTYPE_TRAITS,
    GEMM_DTYPES,
    KV_DTYPES,
)
from components.physics.registry import ENGINE_FAMILIES
from components.physics.registry import family as family_of
from components.physics.registry import op_work as registry_op_work

__all__ = [
    "ATTENTION_DTYPES",
    "DEFAULT_PCIE_GBPS",
    "FALLBACK",
    "FAMILIES",
    "GEMM_DTYPES",
    "GEMM_DTYPE_TRAITS",
    "KV_DTYPES",
    "PCIE_GBPS_BY_ARCH",
    "SHAPE_KEYS",
    "PhysicsError",
    "PipeChoice",
    "Roofline",
    "Work",
    "attention_pairs",
    "bound_of",
    "clamp",
    "derive",
    "link_gbps",
    "op_work",
    "pipe_for",
    "roofline",
]

# The engine families and their question dimensions (required, optional), as the op engine's tables hold them.
FAMILIES: tuple[str, ...] = ENGINE_FAMILIES
SHAPE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gemm": (("M", "N", "K"), ("B",)),
    "attention": (("B", "S", "KV", "H", "HKV", "D"), ("W",)),
    "moe": (("T", "E", "topk", "H", "I"), ("tp", "ep")),
    "allreduce": (("bytes", "gpus"), ()),
}
# GPU-to-GPU bandwidth (GB/s per direction) assumed when the catalog gives no link: a PCIe x16 slot of the
# generation the architecture shipped with.
PCIE_GBPS_BY_ARCH: dict[str, float] = {
    "pascal": 16.0,
    "volta": 16.0,
    "turing": 16.0,
    "ampere": 32.0,
    "ada": 32.0,
    "hopper": 64.0,
    "blackwell": 64.0,
}
DEFAULT_PCIE_GBPS: float = 32.0


@dataclass(frozen=True)
class PipeChoice:
    """Where a dtype's math runs on one GPU: the dtype actually costed, its pipe and peak."""

    dtype: str  # the effective dtype (the asked one, or what it falls back to)
    precision: str  # catalog precision of the math
    tensor: bool  # on the tensor/matrix pipe
    peak_flops: float  # FLOP/s (OP/s for int8)
    emulated_from: str | None  # the asked dtype when it falls back, else None

    @property
    def pipe(self) -> str:
        return "tensor" if self.tensor else self.precision


@dataclass(frozen=True)
class Roofline:
    time_us: np.ndarray  # max(compute, memory, link): no kernel can be faster
    compute_us: np.ndarray
    memory_us: np.ndarray
    link_us: np.ndarray
    flops: np.ndarray
    dram_bytes: np.ndarray
    link_bytes: np.ndarray
    bound_pipe: np.ndarray  # object: tensor | fp32 | fp64 | fp16 | bf16 | int8 | dram | link
    peak_flops: float
    peak_bps: float
    link_bps: float
    choice: PipeChoice
    note: str | None
    # the memory time of the warm-L2 roofline (``components.physics.l2``: the working set the L2 holds read
    # at its bandwidth), set by the engine (``with_l2``) where the GPU's L2 is known to outrun its DRAM;
    # None: the DRAM roofline is the floor
    l2_memory_us: np.ndarray | None = None

    @property
    def warm_memory_us(self) -> np.ndarray:
        """The memory side no answer may beat: the warm-L2 one where set, else the DRAM one."""
        if self.l2_memory_us is None:
            return self.memory_us
        return np.minimum(self.l2_memory_us, self.memory_us)

    @property
    def floor_us(self) -> np.ndarray:
        """The time no answer may beat: the warm-L2 roofline where set, else the DRAM roofline."""
        if self.l2_memory_us is None:
            return self.time_us
        return np.maximum.reduce([self.compute_us, self.warm_memory_us, self.link_us])


def _pipe_peak(spec: Any, precision: str, tensor: bool | None) -> tuple[float, bool] | None:
    """(peak FLOP/s, on tensor) of ``precision`` on ``spec``, or None when the GPU has no such pipe."""
    options = [(True,), (False,)] if tensor is None else [(tensor,)]
    for (on_tensor,) in options:
        try:
            return spec.peak_flops(precision, tensor=on_tensor), on_tensor
        except ValueError:
            continue
    return None


def pipe_for(dtype: str, spec: Any) -> PipeChoice:
    """The pipe ``dtype``'s math runs on (falling back along FALLBACK where the GPU lacks it)."""
    if dtype not in GEMM_DTYPE_TRAITS:
        raise PhysicsError(f"dtype {dtype!r}: choose one of {', '.join(GEMM_DTYPES)}")
    asked, current = dtype, dtype
    while True:
        _, _, _, precision, tensor = GEMM_DTYPE_TRAITS[current]
        found = _pipe_peak(spec, precision, tensor)
        if found is not None:
            peak, on_tensor = found
            return PipeChoice(current, precision, on_tensor, peak, None if current == asked else asked)
        if current not in FALLBACK:
            raise PhysicsError(f"device {spec.id!r} has no pipe for {asked} (nor any fallback)")
        current = FALLBACK[current]


def link_gbps(spec: Any) -> tuple[float, str | None]:
    """GPU-to-GPU bandwidth per direction (GB/s) and a note when assumed (no ``link_gbps`` in the catalog)."""
    value = getattr(spec, "link_gbps", None)
    if value:
        return float(value), None
    assumed = PCIE_GBPS_BY_ARCH.get(str(spec.architecture).lower(), DEFAULT_PCIE_GBPS)
    return assumed, f"no GPU-to-GPU link in the catalog for {spec.name}: PCIe at {assumed:g} GB/s assumed"


def op_work(
    family: str, dtype: str, shape: Mapping[str, Any], kv_dtype: str | None = None, op: str | None = None
) -> Work:
    """FLOPs, minimum DRAM bytes and link bytes of each row (the op as asked: no GPU involved); ``family`` is
    any family the registry knows (``components.physics.registry``), ``op`` its variant where it has some."""
    return registry_op_work(family, dtype, shape, kv_dtype=kv_dtype, op=op)


def roofline(
    family: str,
    dtype: str,
    shape: Mapping[str, Any],
    spec: Any,
    kv_dtype: str | None = None,
    op: str | None = None,
) -> Roofline:
    """The speed-of-light time of each row on ``spec`` and the pipe that bounds it.

    GEMM-pipe families run at the dtype's pipe (``pipe_for``); small ops (elementwise, norms, softmax) at the
    fp32 vector pipe (PyTorch's opmath; fp64 for fp64), on their FMA-pipe demand; the all-reduce's adds on
    the vector pipe too, its time bound by the link."""
    pipe = family_of(family).pipe
    choice = pipe_for(dtype, spec)
    notes = []
    if choice.emulated_from is not None:
        notes.append(
            f"{spec.name} has no {choice.emulated_from} pipe: emulation, the math at the {choice.dtype} "
            f"pipe's rate, the memory traffic in {choice.emulated_from}"
        )
    # The work is the asked dtype's (its FLOPs and its bytes), only the math runs on the fallback pipe: an
    # emulated kernel reads its operands from memory as stored and widens them in registers (cuBLAS's bf16
    # GEMM on a V100 reads 2-byte bf16, an fp8 KV cache on an A100 stays 1 byte), so its DRAM traffic is
    # the asked dtype's while its compute runs at the fallback pipe's rate (never faster than that pipe).
    work = op_work(family, dtype, shape, kv_dtype, op=op)
    compute_flops = work.flops
    peak_bps = float(spec.dram_gbps) * 1e9
    link, link_note = link_gbps(spec)
    link_bps = link * 1e9
    rate_bps: Any = link_bps  # per row: below the link where a group crosses the network
    if pipe == "vector":
        peak_flops = spec.peak_flops("fp64" if choice.dtype == "fp64" else "fp32", tensor=False)
        compute_flops = work.flops if work.fma is None else work.fma
    elif pipe == "link":
        # a group larger than the GPU's link domain sends part of its bytes over the network
        gpus = dims_of(family_of(family), shape)["gpus"]
        rate_bps = link_rate_gbps(spec, link, gpus, "alltoall" if op == "alltoall" else "allreduce") * 1e9
        if bool(np.any(np.asarray(gpus) > domain_of(spec)[0])) and (assumed := domain_note(spec)):
            notes.append(assumed)
        # the reduction's adds run on the vector pipe, whatever the tensor peak
        vector = _pipe_peak(
            spec, choice.precision if choice.precision in ("fp32", "fp16", "bf16") else "fp32", False
        )
        peak_flops = vector[0] if vector else spec.peak_flops("fp32")
        if link_note:
            notes.append(link_note)
    else:
        peak_flops = choice.peak_flops
    compute = compute_flops / peak_flops * 1e6
    memory = work.dram_bytes / peak_bps * 1e6
    link_us = work.link_bytes / rate_bps * 1e6
    time = np.maximum(np.maximum(compute, memory), link_us)
    compute_pipe = "fp32" if pipe in ("vector", "link") else choice.pipe
    bound = np.where(
        link_us >= np.maximum(compute, memory), "link", np.where(compute >= memory, compute_pipe, "dram")
    ).astype(object)
    return Roofline(
        time,
        compute,
        memory,
        link_us,
        work.flops,
        work.dram_bytes,
        work.link_bytes,
        bound,
        float(peak_flops),
        peak_bps,
        link_bps,
        choice,
        "; ".join(notes) or None,
    )


def clamp(duration_us: np.ndarray, roof: Roofline) -> np.ndarray:
    """A runtime never below the roofline time (``roof.floor_us``: the warm-L2 roofline where the engine set
    it, else the DRAM one; NaN stays NaN: no answer is not an answer at the roofline)."""
    duration = np.asarray(duration_us, dtype="float64")
    return np.where(np.isfinite(duration), np.maximum(duration, roof.floor_us), np.nan)


def bound_of(duration_us: np.ndarray, roof: Roofline) -> np.ndarray:
    """Each row's bound pipe given its runtime: ``l2`` where a memory-bound answer beats the DRAM roofline
    (only the warm-L2 roofline allows it: its working set read from the L2), else the roofline's own."""
    duration = np.asarray(duration_us, dtype="float64")
    faster = np.isfinite(duration) & (duration < roof.time_us) & (roof.bound_pipe == "dram")
    return np.where(faster, "l2", roof.bound_pipe).astype(object)


def derive(duration_us: np.ndarray, roof: Roofline) -> dict[str, np.ndarray]:
    """Rates from the one runtime: GFLOP/s, DRAM GB/s (minimum traffic), link GB/s, intensity, class.

    The runtime is clamped first, so no rate can exceed its peak."""
    duration = clamp(duration_us, roof)
    seconds = duration * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        gflops = roof.flops / seconds / 1e9
        gbps = roof.dram_bytes / seconds / 1e9
        link = roof.link_bytes / seconds / 1e9
        intensity = np.where(roof.dram_bytes > 0, roof.flops / roof.dram_bytes, np.nan)
    bound = bound_of(duration, roof)
    classes = classes_of_bounds(bound)  # the side of the bound pipe (components.physics.bounds)
    return {
        "duration_us": duration,
        "gflops": gflops,
        "achieved_gbps": gbps,
        "link_gbps": link,
        "arith_intensity": intensity,
        "roofline_class": classes,
        "bound_pipe": bound,
    }
