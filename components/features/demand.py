"""Per-family demand of a kernel: pipe FLOPs, DRAM and tiled-L2 bytes, tiles, CTAs, threads.

The work (FLOPs, minimum bytes) is the registry's (``components/physics``, through ``op_work.registry_work``);
the tile geometry (tiles, CTAs, L2 re-reads, occupancy caps) is the features' own. One formula per family
group; ``family_demand`` runs them over row arrays for the feature build and serving alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.features.arrays import ceil_div, finite_or, is_in, map_labels, starts_with
from components.features.op_work import registry_work
from components.physics import dtypes, moe
from components.physics.base import Work

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

# Tiling assumptions when the shape does not give them.
GEMM_TILE: tuple[float, float] = (128.0, 128.0)  # cuBLAS/CUTLASS's most common output tile
GEMM_THREADS: float = 256.0  # 8 warps per 128x128 tile
GEMM_CTAS_PER_SM_CAP: float = 2.0  # ~128 regs/thread x 256 threads + K-panel smem: at most 2 CTAs per SM
ELEMENTWISE_THREADS: float = 128.0  # at::native::vectorized_elementwise_kernel launches 128 threads
ELEMENTWISE_ELEMS_PER_CTA: float = 512.0  # 128 threads x 4-wide vector (NeuSight grids: N / 512)
ROW_THREADS: float = 128.0  # softmax_warp_forward / vectorized_layer_norm use 32x4 blocks

# Kernel Tuner benchmark_hub problem constants (kernels/*.h), used when params omit them.
DEDISP_CHANNELS: float = 1536.0  # dedispersion.h: nr_channels
DEDISP_MAX_SHIFT: float = 650.0  # dedispersion.h: max_shift

Demand = dict[str, np.ndarray]
DEMAND_KEYS: tuple[str, ...] = (
    "flops",  # by the op's definition (components/physics/registry): NaN where no registry family covers it
    "tensor",
    "fma",
    "sfu",
    "bytes_min",
    "bytes_l2",
    "ctas",
    "threads",
    "cap",
    "tile_m",
    "tile_n",
    "gm",
    "gn",
    "gk",
    "gbatch",
)


@dataclass(frozen=True)
class FamilyInputs:
    """What every family formula reads: the rows' family/op, dims, element sizes and name tiles."""

    family: np.ndarray
    op: np.ndarray
    dtype: Any  # canonical dtype labels (object array or pd.Categorical)
    col: dict[str, np.ndarray]  # canonical dim -> values (NaN where absent)
    e: np.ndarray  # bytes per input element
    e_out: np.ndarray  # bytes per output element (FP8 GEMMs write bf16)
    name_tile: tuple[np.ndarray, np.ndarray]

    @property
    def n(self) -> int:
        return len(self.family)


def _moe_variant(op: str) -> str:
    """Features' MoE rows are one fused GEMM each (PipeWeave's sweeps): ``w2`` (down), else ``w13``."""
    return "w2" if op.startswith("w2") else "w13"


def _gemm_like_work(x: FamilyInputs, masks: dict[str, np.ndarray], B: np.ndarray) -> Work:
    """FLOPs by definition and minimum bytes of the GEMM-like rows: the registry's, family by family."""
    col, n = x.col, x.n
    heads = finite_or(col["heads"], col["H"])
    parts = {
        "gemm": {"M": col["M"], "N": col["N"], "K": col["K"], "B": B},
        "moe": {
            "T": col["M"],
            "E": finite_or(col["E"], 1.0),
            "topk": finite_or(col["topk"], 1.0),
            "H": col["H"],
            "I": col["N"],
        },
        "conv": {k: col[k] for k in ("cin", "cout", "ksize", "insize", "stride", "pad")} | {"B": B},
        "attention": {
            "B": B,
            "S": col["seq"],
            "KV": finite_or(col["seq_kv"], col["seq"]),
            "H": heads,
            "HKV": finite_or(col["HKV"], heads),
            "D": col["head_dim"],
            "W": col["W"],
            "causal": col["causal"],
        },
    }
    merged = {key: np.full(n, np.nan) for key in ("flops", "dram_bytes", "sfu")}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, dims in parts.items():
            if not masks[name].any():
                continue
            # gemm rows' variant is their family (linear: one shared weight); MoE's their fused GEMM
            labels = x.family if name == "gemm" else (x.op if name == "moe" else None)
            variant = _moe_variant if name == "moe" else None
            work = registry_work(name, x.dtype, masks[name], dims, labels, variant)
            for key in merged:
                np.copyto(merged[key], getattr(work, key), where=masks[name])
    return Work(merged["flops"], merged["dram_bytes"], np.zeros(n), sfu=merged["sfu"])


def _gemm_like(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """GEMM, BMM, linear, fused MoE, implicit-GEMM conv and attention, each as a batched GEMM: the work is the
    registry's (components/physics); the tile geometry (tiles, CTAs, L2 re-reads) is the features' own."""
    n, col, family, op = x.n, x.col, x.family, x.op
    B = finite_or(col["B"], 1.0)
    gm, gn, gk, gb = (np.full(n, np.nan) for _ in range(4))

    def put(mask: np.ndarray, m: np.ndarray, nn: np.ndarray, k: np.ndarray, batch: np.ndarray) -> None:
        for target, value in ((gm, m), (gn, nn), (gk, k), (gb, batch)):
            target[mask] = np.broadcast_to(value, (n,))[mask]

    is_gemm = is_in(family, ["gemm", "bmm"])
    put(is_gemm, col["M"], col["N"], col["K"], B)
    is_linear = family == "linear"  # x[B, M, K] @ W[K, N]: the weight is shared across the batch
    put(is_linear, B * col["M"], col["N"], col["K"], np.ones(n))
    # fused-MoE: (M*topk) routed rows through per-expert [H->2N] (w13: gate and up) or [N->H] (w2) weights
    is_moe = family == "moe"
    w2 = starts_with(op, "w2")
    moe_rows = col["M"] * finite_or(col["topk"], 1.0)
    put(
        is_moe, moe_rows, np.where(w2, col["H"], 2.0 * col["N"]), np.where(w2, col["N"], col["H"]), np.ones(n)
    )
    # NeuSight/PyTorch conv2d as implicit GEMM: rows = B*Ho*Wo, cols = Cout, depth = Cin*k*k.
    is_conv = (family == "conv") & np.isfinite(col["cin"])
    ho = (
        np.floor(
            (col["insize"] + 2 * finite_or(col["pad"], 0.0) - col["ksize"]) / finite_or(col["stride"], 1.0)
        )
        + 1
    )
    put(is_conv, B * ho * ho, col["cout"], col["cin"] * col["ksize"] ** 2, np.ones(n))
    # Attention (FlashAttention-style): QK^T and PV GEMMs, softmax exp per score.
    is_attn = family == "attention"
    put(
        is_attn,
        col["seq"],
        finite_or(col["seq_kv"], col["seq"]),
        2 * col["head_dim"],
        B * finite_or(col["heads"], col["H"]),
    )

    mask = is_gemm | is_linear | is_moe | is_conv | is_attn
    work = _gemm_like_work(
        x, {"gemm": is_gemm | is_linear, "moe": is_moe, "conv": is_conv, "attention": is_attn}, B
    )
    e, e_out = x.e, x.e_out
    # Tile: the shape's own (Triton MoE) > the one in the cuBLAS kernel name > 128x128.
    tm = finite_or(col["tile_m"], finite_or(x.name_tile[0], GEMM_TILE[0]))
    tn = finite_or(col["tile_n"], finite_or(x.name_tile[1], GEMM_TILE[1]))
    # MoE: only the experts routed to hold rows (expected distinct experts, components/physics/moe.py).
    experts_hit = np.where(
        is_moe, moe.experts_touched(col["M"], finite_or(col["E"], 1.0), finite_or(col["topk"], 1.0)), 1.0
    )
    a_elems, c_elems = gb * gm * gk, gb * gm * gn
    # Tile re-reads: A's K-panel once per column of tiles, B's once per row of tiles (no L2 reuse).
    m_tiles = np.where(is_moe, experts_hit * ceil_div(moe_rows / experts_hit, tm), ceil_div(gm, tm))
    n_tiles = ceil_div(gn, tn)
    bytes_l2 = np.maximum(
        e * (a_elems * n_tiles + gb * n_tiles * tn * gk * m_tiles) + e_out * c_elems, work.dram_bytes
    )
    threads = np.where(np.isfinite(col["num_warps"]), col["num_warps"] * 32.0, GEMM_THREADS)
    return mask, dict(
        flops=work.flops,
        tensor=work.flops,
        fma=np.zeros(n),
        sfu=np.where(is_attn, work.sfu, 0.0),
        bytes_min=work.dram_bytes,
        bytes_l2=bytes_l2,
        ctas=gb * m_tiles * n_tiles,
        threads=threads,
        cap=np.full(n, GEMM_CTAS_PER_SM_CAP),
        tile_m=tm,
        tile_n=tn,
        gm=gm,
        gn=gn,
        gk=gk,
        gbatch=gb,
    )


def _direct_demand(
    fma: np.ndarray,
    bytes_min: np.ndarray,
    bytes_l2: np.ndarray,
    ctas: np.ndarray,
    threads: np.ndarray,
    tile: tuple[np.ndarray, np.ndarray],
) -> Demand:
    """A direct (Kernel Tuner) fp32 kernel's demand: FMA work only, no tensor or MUFU pipe, the GPU's own
    CTA-per-SM limits; ``tile`` is its (rows, columns) per CTA."""
    n = len(fma)
    return dict(
        tensor=np.zeros(n),
        fma=fma,
        sfu=np.zeros(n),
        bytes_min=bytes_min,
        bytes_l2=bytes_l2,
        ctas=ctas,
        threads=threads,
        cap=np.full(n, np.nan),
        tile_m=tile[0],
        tile_n=tile[1],
    )


def _kernel_tuner_conv(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Kernel Tuner 2D convolution (benchmark_hub convolution_milo): direct, fp32 FMA, halo per CTA."""
    col = x.col
    mask = (x.family == "conv") & ~np.isfinite(col["cin"]) & np.isfinite(col["filter_w"])
    w, h = finite_or(col["image_w"], 4096.0), finite_or(col["image_h"], 4096.0)
    fw, fh = col["filter_w"], finite_or(col["filter_h"], col["filter_w"])
    tile_w = finite_or(col["bsx"], 16.0) * finite_or(col["tsx"], 1.0)
    tile_h = finite_or(col["bsy"], 16.0) * finite_or(col["tsy"], 1.0)
    ctas = ceil_div(w, tile_w) * ceil_div(h, tile_h)
    bytes_min = 4.0 * ((w + fw - 1) * (h + fh - 1) + w * h + fw * fh)
    bytes_l2 = 4.0 * (ctas * (tile_w + fw - 1) * (tile_h + fh - 1) + w * h)  # halo re-read per CTA
    threads = finite_or(col["bsx"], 16.0) * finite_or(col["bsy"], 16.0)
    return mask, _direct_demand(2.0 * w * h * fw * fh, bytes_min, bytes_l2, ctas, threads, (tile_h, tile_w))


def _dedispersion(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Dedispersion (benchmark_hub): per (DM, sample) a sum over channels of uint8 input, fp32 out."""
    col = x.col
    samples, dms = finite_or(col["samples"], 25000.0), finite_or(col["dms"], 2048.0)
    channels = finite_or(col["channels"], DEDISP_CHANNELS)
    bytes_min = channels * (samples + DEDISP_MAX_SHIFT) + 4.0 * samples * dms + 4.0 * dms * channels
    bytes_l2 = samples * dms * channels + 4.0 * samples * dms  # every (dm, sample) reads every channel's byte
    tile_s = finite_or(col["bsx"], 1.0) * finite_or(col["tsx"], 1.0)
    tile_d = finite_or(col["bsy"], 32.0) * finite_or(col["tsy"], 1.0)
    ctas = ceil_div(samples, tile_s) * ceil_div(dms, tile_d)
    threads = finite_or(col["bsx"], 1.0) * finite_or(col["bsy"], 32.0)
    fma = samples * dms * channels
    return x.family == "dedispersion", _direct_demand(
        fma, bytes_min, bytes_l2, ctas, threads, (tile_d, tile_s)
    )


def _elementwise(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Elementwise: the registry's per-op FLOPs, FMA/MUFU demand and inputs read (components/physics)."""
    col, n = x.col, x.n
    mask = x.family == "elementwise"
    numel = finite_or(col["N"], finite_or(col["B"], 1.0) * col["H"])
    with np.errstate(invalid="ignore"):
        work = registry_work("elementwise", x.dtype, mask, {"N": numel}, x.op)
    return mask, dict(
        flops=work.flops,
        tensor=np.zeros(n),
        fma=work.fma,
        sfu=work.sfu,
        bytes_min=work.dram_bytes,
        bytes_l2=work.dram_bytes,
        ctas=ceil_div(numel, ELEMENTWISE_ELEMS_PER_CTA),
        threads=np.full(n, ELEMENTWISE_THREADS),
        cap=np.full(n, np.nan),
    )


def _row_reductions(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Softmax, layernorm and rmsnorm over B rows of H: the registry's work (components/physics)."""
    col, n, family = x.col, x.n, x.family
    rows, cols = finite_or(col["B"], 1.0), col["H"]
    is_sm = family == "softmax"
    merged = {key: np.full(n, np.nan) for key in ("flops", "dram_bytes", "fma", "sfu")}
    mask = np.zeros(n, dtype=bool)
    for name in ("softmax", "layernorm", "rmsnorm"):
        rows_of = family == name
        if not rows_of.any():
            continue
        work = registry_work(name, x.dtype, rows_of, {"B": rows, "H": cols})
        for key in merged:
            np.copyto(merged[key], getattr(work, key), where=rows_of)
        mask |= rows_of
    # Softmax: short rows one warp per row, 4 warps per CTA; long rows one CTA per row.
    ctas = np.where(is_sm, np.where(cols <= 1024, ceil_div(rows, 4.0), rows), rows)
    return mask, dict(
        flops=merged["flops"],
        tensor=np.zeros(n),
        fma=merged["fma"],
        sfu=merged["sfu"],
        bytes_min=merged["dram_bytes"],
        bytes_l2=merged["dram_bytes"],
        ctas=ctas,
        threads=np.full(n, ROW_THREADS),
        cap=np.full(n, np.nan),
    )


# One formula per family group; a row takes the first group whose mask covers it.
FAMILY_FORMULAS = (_gemm_like, _kernel_tuner_conv, _dedispersion, _elementwise, _row_reductions)
# The families each formula can cover: a formula none of the rows' families needs is not evaluated.
FORMULA_FAMILIES: dict[Any, tuple[str, ...]] = {
    _gemm_like: ("gemm", "bmm", "linear", "moe", "conv", "attention"),
    _kernel_tuner_conv: ("conv",),
    _dedispersion: ("dedispersion",),
    _elementwise: ("elementwise",),
    _row_reductions: ("softmax", "layernorm", "rmsnorm"),
}


def family_demand(
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    d: pd.DataFrame | dict[str, np.ndarray],
    name_tile: tuple[np.ndarray, np.ndarray],
) -> dict[str, np.ndarray]:
    """Per row: pipe FLOPs, DRAM/L2 bytes, tiles, threads and a CTA-per-SM cap (NaN = the GPU's limit)."""
    n = len(family)
    e = map_labels(dtype, dtypes.ELEM_BYTES, 4.0)
    # A dict of float arrays (serving) is taken as is: a DataFrame's per-column access costs ~0.1 ms each.
    col = dict(d) if isinstance(d, dict) else {k: d[k].to_numpy("float64") for k in d.columns}
    inputs = FamilyInputs(
        family=family, op=op, dtype=dtype, col=col, e=e, e_out=np.where(e < 2.0, 2.0, e), name_tile=name_tile
    )
    out = {k: np.full(n, np.nan) for k in DEMAND_KEYS}
    out["tensor_capable"] = np.zeros(n, dtype=bool)
    taken = np.zeros(n, dtype=bool)
    for formula in FAMILY_FORMULAS:
        if not is_in(family, FORMULA_FAMILIES[formula]).any():
            continue
        mask, values = formula(inputs)
        mask = mask & ~taken
        for key, value in values.items():
            np.copyto(out[key], value, where=mask)  # no gather/scatter of the masked rows
        if formula is _gemm_like:
            out["tensor_capable"] = mask.copy()
        taken |= mask
    return out
