"""Speed-of-light physics of the modern op families: GEMM in every serving dtype, attention, MoE, all-reduce.

One place says how much work an op is (FLOPs, minimum DRAM bytes, bytes over the GPU-to-GPU link), which pipe
does it on a given GPU, and how long it takes at that GPU's peaks. Every tier of the op engine (measured,
calibrated, spec) interpolates or learns the *efficiency* ``roofline time / measured time`` against these
figures, and every answer is checked against them: one runtime, never below the roofline time; GFLOP/s, GB/s
and intensity derived from it (so never above a peak); the roofline class is the side of the bound pipe.

Everything is vectorised over the rows of one (family, dtype, GPU) group: ``shape`` maps a dimension name to
an array (or a scalar). Why per GPU and dtype: the pipe choice (and an emulation note) is a property of the
pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.physics.bounds import classes_of_bounds

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
    "clamp",
    "derive",
    "link_gbps",
    "op_work",
    "pipe_for",
    "roofline",
]

# dtype -> (activation bytes, weight bytes, output bytes, catalog precision of the math, tensor?)
# tensor: True = the tensor/matrix pipe only; None = the best the GPU has for that precision.
# int8 is W8A8 (SmoothQuant) on the int8 tensor pipe; *_wo are weight-only kernels: weights stored at 1 or
# 0.5 byte and de-quantised on the fly, the math in bf16.
GEMM_DTYPE_TRAITS: dict[str, tuple[float, float, float, str, bool | None]] = {
    "fp64": (8.0, 8.0, 8.0, "fp64", None),
    "fp32": (4.0, 4.0, 4.0, "fp32", False),
    "tf32": (4.0, 4.0, 4.0, "tf32", True),
    "fp16": (2.0, 2.0, 2.0, "fp16", None),
    "bf16": (2.0, 2.0, 2.0, "bf16", None),
    "fp8": (1.0, 1.0, 2.0, "fp8", True),
    "fp8_block": (1.0, 1.0, 2.0, "fp8", True),
    "nvfp4": (0.5, 0.5, 2.0, "fp4", True),
    "int8": (1.0, 1.0, 2.0, "int8", None),
    "int8_wo": (2.0, 1.0, 2.0, "bf16", None),
    "int4_wo": (2.0, 0.5, 2.0, "bf16", None),
}
GEMM_DTYPES: tuple[str, ...] = tuple(GEMM_DTYPE_TRAITS)
ATTENTION_DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8")
KV_DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8", "int8", "nvfp4")
# A dtype whose pipe the GPU lacks runs as the next dtype here (the answer is that dtype's: an emulated kernel
# is never faster than the native one it falls back to).
FALLBACK: dict[str, str] = {
    "nvfp4": "fp8",
    "fp8": "bf16",
    "fp8_block": "bf16",
    "int8": "fp16",
    "tf32": "fp32",
    "bf16": "fp16",
    "fp16": "fp32",
    "int8_wo": "int8_wo_fp16",
    "int4_wo": "int4_wo_fp16",
    "fp64": "fp32",
}
# Weight-only kernels on a GPU without bf16 run their math in fp16 (same bytes).
GEMM_DTYPE_TRAITS["int8_wo_fp16"] = (2.0, 1.0, 2.0, "fp16", None)
GEMM_DTYPE_TRAITS["int4_wo_fp16"] = (2.0, 0.5, 2.0, "fp16", None)
FALLBACK["int8_wo_fp16"] = "fp32"
FALLBACK["int4_wo_fp16"] = "fp32"

FAMILIES: tuple[str, ...] = ("gemm", "attention", "moe", "allreduce")
SHAPE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # family -> (required dimensions, optional dimensions)
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


class PhysicsError(ValueError):
    """An op the physics cannot cost (unknown family or dtype, missing dimension); the message names it."""


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
class Work:
    flops: np.ndarray
    dram_bytes: np.ndarray  # the minimum DRAM traffic: every operand read once, the result written once
    link_bytes: np.ndarray  # bytes each GPU sends over its link (all-reduce); 0 elsewhere


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
    """GPU-to-GPU bandwidth per direction (GB/s) and a note when it is assumed (no ``link_gbps`` in the
    catalog)."""
    value = getattr(spec, "link_gbps", None)
    if value:
        return float(value), None
    assumed = PCIE_GBPS_BY_ARCH.get(str(spec.architecture).lower(), DEFAULT_PCIE_GBPS)
    return assumed, f"no GPU-to-GPU link in the catalog for {spec.name}: PCIe at {assumed:g} GB/s assumed"


def _dims(family: str, shape: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if family not in SHAPE_KEYS:
        raise PhysicsError(f"family {family!r}: choose one of {', '.join(FAMILIES)}")
    required, optional = SHAPE_KEYS[family]
    missing = [k for k in required if k not in shape]
    if missing:
        raise PhysicsError(f"{family} shape: missing {', '.join(missing)}")
    arrays = {
        k: np.atleast_1d(np.asarray(shape[k], dtype="float64")) for k in (*required, *optional) if k in shape
    }
    n = max(len(a) for a in arrays.values())
    return {k: np.broadcast_to(a, (n,)).astype("float64") for k, a in arrays.items()}


def attention_pairs(s: np.ndarray, kv: np.ndarray, window: np.ndarray | None = None) -> np.ndarray:
    """(query, key) pairs per head of causal attention: S queries at positions KV-S+1 .. KV, each attending to
    every earlier position (at most ``window`` of them when a sliding window is set, 0 = none)."""
    s = np.minimum(s, kv)
    first = kv - s + 1.0
    full = s * (first + kv) / 2.0  # sum of positions first..kv
    if window is None:
        return full
    w = np.where(window > 0, window, np.inf)
    # positions p <= w attend p keys, the rest attend w: sum over p in [first, kv] of min(p, w)
    below_hi = np.clip(np.minimum(kv, w), first - 1.0, None)  # last position still under the window
    n_below = np.clip(below_hi - first + 1.0, 0.0, None)
    sum_below = n_below * (first + below_hi) / 2.0
    n_above = s - n_below
    windowed = sum_below + n_above * np.where(np.isfinite(w), w, 0.0)
    return np.where(np.isfinite(w), windowed, full)


def op_work(family: str, dtype: str, shape: Mapping[str, Any], kv_dtype: str | None = None) -> Work:
    """FLOPs, minimum DRAM bytes and link bytes of each row (the op as asked: no GPU involved)."""
    d = _dims(family, shape)
    n = len(next(iter(d.values())))
    zero = np.zeros(n)
    if family == "gemm":
        a, w, o = _bytes_of(dtype)
        b = d.get("B", np.ones(n))
        m, nn, k = d["M"], d["N"], d["K"]
        return Work(2.0 * b * m * nn * k, b * (a * m * k + w * k * nn + o * m * nn), zero)
    if family == "attention":
        e, _, _ = _bytes_of(dtype)
        kv_e = _bytes_of(kv_dtype or dtype)[0] if (kv_dtype or dtype) in GEMM_DTYPE_TRAITS else e
        b, s, kv, h, hkv, dd = d["B"], d["S"], d["KV"], d["H"], d["HKV"], d["D"]
        window = d.get("W")
        pairs = attention_pairs(s, kv, window)
        kv_read = kv if window is None else np.where(window > 0, np.minimum(kv, window + s), kv)
        flops = 4.0 * b * h * dd * pairs
        nbytes = 2.0 * b * s * h * dd * e + 2.0 * b * kv_read * hkv * dd * kv_e
        return Work(flops, nbytes, zero)
    if family == "moe":
        a, w, o = _bytes_of(dtype)
        t, e_all, topk, h, inter = d["T"], d["E"], d["topk"], d["H"], d["I"]
        tp, ep = d.get("tp", np.ones(n)), d.get("ep", np.ones(n))
        routed = t * topk / ep  # (token, expert) pairs this GPU computes
        inter_local = inter / tp
        flops = 2.0 * routed * 3.0 * h * inter_local  # gated MLP: up, gate and down projections
        local_experts = e_all / ep
        hit = local_experts * (
            1.0 - np.power(1.0 - 1.0 / e_all, t * topk)
        )  # expected distinct experts touched
        nbytes = hit * 3.0 * h * inter_local * w + t * h * (a + o) + 2.0 * routed * inter_local * a
        return Work(flops, nbytes, zero)
    # allreduce: ``bytes`` is the message each GPU holds; a ring sends 2(n-1)/n of it over its link
    message, gpus = d["bytes"], d["gpus"]
    e = _bytes_of(dtype)[0]
    share = np.where(gpus > 1, 2.0 * (gpus - 1.0) / gpus, 0.0)
    flops = np.where(gpus > 1, message / e * (gpus - 1.0) / gpus, 0.0)  # the reduction adds
    # DRAM: each GPU reads its message and the chunks it receives, and writes the result
    return Work(flops, np.where(gpus > 1, message * (1.0 + share), 0.0), message * share)


def _bytes_of(dtype: str) -> tuple[float, float, float]:
    if dtype not in GEMM_DTYPE_TRAITS:
        raise PhysicsError(f"dtype {dtype!r}: choose one of {', '.join(GEMM_DTYPES)}")
    a, w, o, _, _ = GEMM_DTYPE_TRAITS[dtype]
    return a, w, o


def roofline(
    family: str, dtype: str, shape: Mapping[str, Any], spec: Any, kv_dtype: str | None = None
) -> Roofline:
    """The speed-of-light time of each row on ``spec`` and the pipe that bounds it."""
    choice = pipe_for(dtype, spec)
    notes = []
    if choice.emulated_from is not None:
        notes.append(
            f"{spec.name} has no {choice.emulated_from} pipe: answered as {choice.dtype} "
            "(emulation is never faster than the native kernel it runs as)"
        )
    kv_eff = None
    if kv_dtype is not None:
        kv_eff = pipe_for(kv_dtype, spec).dtype if kv_dtype in GEMM_DTYPE_TRAITS else kv_dtype
    work = op_work(family, choice.dtype, shape, kv_eff)
    peak_bps = float(spec.dram_gbps) * 1e9
    link, link_note = link_gbps(spec)
    link_bps = link * 1e9
    if family == "allreduce":
        # the reduction's adds run on the vector pipe, whatever the tensor peak
        vector = _pipe_peak(
            spec, choice.precision if choice.precision in ("fp32", "fp16", "bf16") else "fp32", False
        )
        peak_flops = vector[0] if vector else spec.peak_flops("fp32")
        if link_note:
            notes.append(link_note)
    else:
        peak_flops = choice.peak_flops
    compute = work.flops / peak_flops * 1e6
    memory = work.dram_bytes / peak_bps * 1e6
    link_us = work.link_bytes / link_bps * 1e6
    time = np.maximum(np.maximum(compute, memory), link_us)
    compute_pipe = "fp32" if family == "allreduce" else choice.pipe
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
    """A runtime never below the roofline time (NaN stays NaN: no answer is not an answer at the roofline)."""
    duration = np.asarray(duration_us, dtype="float64")
    return np.where(np.isfinite(duration), np.maximum(duration, roof.time_us), np.nan)


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
    classes = classes_of_bounds(roof.bound_pipe)  # the side of the bound pipe (components.physics.bounds)
    return {
        "duration_us": duration,
        "gflops": gflops,
        "achieved_gbps": gbps,
        "link_gbps": link,
        "arith_intensity": intensity,
        "roofline_class": classes,
        "bound_pipe": roof.bound_pipe,
    }
