"""Analytical performance model: per-pipe demand, DRAM/L2 traffic, tiles and waves, roofline.

Vectorised over a frame of measurement rows joined with their kernel (``family``, ``op``,
``dtype``, ``shape_json``, ``params_json``, measured ``grid_*``/``block_*`` and, for counter
sources, ``flops``/``dram_bytes``/``*_arith_intensity``). Every output column is prefixed:

- ``f_``  derived from op + shapes + launch params + the device spec only (legitimate inputs for
  every task, including roofline-class-from-source);
- ``m_``  derived from measured hardware counters (Nsight Compute FLOP and DRAM-byte counts, as
  gpuFLOPBench and our own ncu rows carry). Fine as runtime-prediction inputs "given profiling
  data", but they nearly give the roofline class away: the class-from-source task must drop them.

Rows a family's formulas do not cover keep NaN ``f_`` values and a ``feature_note`` saying why.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from components.features.op_work import registry_work
from components.physics import dtypes, moe
from components.physics.base import Work
from components.physics.elementwise import ELEMENTWISE_COST

# Bytes per element, per-element costs of the small ops: the registry's (components/physics), one definition.
ELEM_BYTES = dtypes.ELEM_BYTES

# Tiling assumptions when the shape does not give them.
GEMM_TILE: tuple[float, float] = (128.0, 128.0)  # cuBLAS/CUTLASS's most common output tile
GEMM_THREADS: float = 256.0  # 8 warps per 128x128 tile
GEMM_CTAS_PER_SM_CAP: float = 2.0  # ~128 regs/thread x 256 threads + K-panel smem: at most 2 CTAs per SM
ELEMENTWISE_THREADS: float = 128.0  # at::native::vectorized_elementwise_kernel launches 128 threads
ELEMENTWISE_ELEMS_PER_CTA: float = 512.0  # 128 threads x 4-wide vector (NeuSight grids: N / 512)
ROW_THREADS: float = 128.0  # softmax_warp_forward / vectorized_layer_norm use 32x4 blocks
# Occupancy limits come from the catalog per GPU (max_ctas_per_sm: 32 on Pascal-Volta, Ampere
# GA100 and Hopper, 16 on Turing and GA10x, 24 on Ada; AMD 16 workgroups per CU; resident threads
# = warp/wave slots x warp size, so wave32 RDNA is not credited with HIP's nominal 2048). These are
# the fallbacks for a device without them.
MAX_CTAS_PER_SM: float = 32.0
MAX_THREADS_PER_SM: float = 2048.0
SFU_OPS_PER_CLK_PER_SM: float = (
    16.0  # MUFU: 4 per SM sub-partition per clock since Volta (PipeWeave xuFp32=16)
)
L2_OVER_DRAM: float = 2.0  # L2 bandwidth fallback: ~1.6x (A100) to 2.6x (H100) DRAM in PipeWeave's specs

# Kernel Tuner benchmark_hub problem constants (kernels/*.h), used when params omit them.
DEDISP_CHANNELS: float = 1536.0  # dedispersion.h: nr_channels
DEDISP_MAX_SHIFT: float = 650.0  # dedispersion.h: max_shift

# Canonical dimension -> accepted spellings (lower-case) in shape_json / params_json.
DIM_ALIASES: dict[str, tuple[str, ...]] = {
    "B": ("b", "batch", "batch_size", "bs"),
    "M": ("m",),
    "N": ("n", "numel", "elements", "n_elements"),
    "K": ("k",),
    "H": ("h", "hidden", "hidden_size", "cols"),
    "E": ("e", "experts", "num_experts"),
    "topk": ("topk", "top_k"),
    "heads": ("heads", "num_heads", "nh"),
    "seq": ("seq", "seq_len", "s", "sq"),
    "seq_kv": ("seq_kv", "skv", "kv_len", "kv"),  # "KV": the question schema's context length (S = 1 decode)
    "head_dim": ("head_dim", "d", "hd"),
    "cin": ("input_channel", "in_channels", "c_in", "cin", "c"),
    "cout": ("output_channel", "out_channels", "c_out", "cout"),
    "ksize": ("kernel_szie", "kernel_size", "ksize", "r"),
    "insize": ("input_size", "image_size", "hw", "in_size"),
    "stride": ("stride",),
    "pad": ("padding", "pad"),
    "tile_m": ("block_size_m", "tile_m", "bm"),
    "tile_n": ("block_size_n", "tile_n", "bn"),
    "tile_k": ("block_size_k", "tile_k", "bk"),
    "num_warps": ("num_warps",),
    "num_stages": ("num_stages",),
    "smem_kb": ("smem_size_kb", "smem_kb"),
    "bsx": ("block_size_x",),
    "bsy": ("block_size_y",),
    "tsx": ("tile_size_x",),
    "tsy": ("tile_size_y",),
    "filter_w": ("filter_width",),
    "filter_h": ("filter_height",),
    "image_w": ("image_width", "width", "problem_size_x"),
    "image_h": ("image_height", "height", "problem_size_y"),
    "samples": ("nr_samples", "samples"),
    "dms": ("nr_dms", "dms"),
    "channels": ("nr_channels", "channels"),
    "size_bytes": ("size", "size_bytes", "bytes"),
    "HKV": ("hkv", "kv_heads", "num_kv_heads"),  # attention: KV heads (grouped-query), sliding window, causal
    "W": ("w", "window", "sliding_window"),
    "causal": ("causal", "is_causal"),
}
_ALIAS_TO_DIM: dict[str, str] = {alias: dim for dim, aliases in DIM_ALIASES.items() for alias in aliases}
DIMS: tuple[str, ...] = tuple(DIM_ALIASES)
_TILE_IN_NAME = re.compile(r"_(\d+)x(\d+)_")

# Output columns (in order), so an all-uncovered frame still has the same schema.
F_COLUMNS: tuple[str, ...] = (
    "f_flops",
    "f_tensor_flops",
    "f_fma_flops",
    "f_sfu_ops",
    "f_uses_tensor",
    "f_precision_bytes",
    "f_dram_bytes_min",
    "f_l2_bytes_tiled",
    "f_arith_intensity",
    "f_arith_intensity_tiled",
    "f_tile_m",
    "f_tile_n",
    "f_ctas",
    "f_ctas_measured",
    "f_threads_per_cta",
    "f_ctas_per_sm",
    "f_waves",
    "f_wave_efficiency",
    "f_busiest_sm_ctas",
    "f_sm_imbalance",
    "f_active_sm_fraction",
    "f_peak_compute_flops",
    "f_ridge_point",
    "f_tensor_time_us",
    "f_fma_time_us",
    "f_sfu_time_us",
    "f_dram_time_us",
    "f_l2_time_us",
    "f_compute_time_us",
    "f_tensor_cycles",
    "f_fma_cycles",
    "f_sfu_cycles",
    "f_dram_cycles",
    "f_l2_cycles",
    "f_busiest_sm_cycles",
    "f_roofline_time_us",
    "f_pipes_time_us",
    "f_compute_bound",
    "f_bound",
)
M_COLUMNS: tuple[str, ...] = (
    "m_flops",
    "m_dram_bytes",
    "m_arith_intensity",
    "m_compute_time_us",
    "m_dram_time_us",
    "m_roofline_time_us",
    "m_bound",
)
GEMM_LIKE: frozenset[str] = frozenset({"gemm", "bmm", "linear", "moe", "conv", "attention"})


# ----------------------------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------------------------
def _loads(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _dims_table(texts: list[Any]) -> np.ndarray:
    """Canonical dims (len(texts) x len(DIMS)) of JSON objects; unknown keys and non-numbers ignored."""
    table = np.full((len(texts), len(DIMS)), np.nan)
    records = [_loads(t) for t in texts]
    if not any(records):
        return table
    raw = pd.DataFrame.from_records(records)
    position = {dim: i for i, dim in enumerate(DIMS)}
    for column in raw.columns:
        low = str(column).lower()
        if low == "problem_size":  # Kernel Tuner: [x, y(, z)] -> image (conv) or samples/DMs (dedispersion)
            sizes = raw[column].map(
                lambda v: list(v)[:2] if isinstance(v, list | tuple) else [math.nan, math.nan]
            )
            pair = np.array(
                [[float(x) for x in ([*list(v), math.nan, math.nan])[:2]] for v in sizes], dtype="float64"
            )
            for dim, j in (("image_w", 0), ("image_h", 1), ("samples", 0), ("dms", 1)):
                slot = table[:, position[dim]]
                table[:, position[dim]] = np.where(np.isfinite(slot), slot, pair[:, j])
            continue
        dim = _ALIAS_TO_DIM.get(low)
        if dim is None:
            continue
        values = raw[column]
        if values.map(lambda v: isinstance(v, bool)).any():
            values = values.where(~values.map(lambda v: isinstance(v, bool)))
        numbers = pd.to_numeric(values, errors="coerce").to_numpy("float64")
        slot = table[:, position[dim]]
        table[:, position[dim]] = np.where(np.isfinite(slot), slot, numbers)  # first spelling wins
    return table


def _dims_of_series(texts: pd.Series) -> np.ndarray:
    """Dims per row, parsing each distinct JSON text once (many measurements share one)."""
    codes, uniques = pd.factorize(texts.astype(object).fillna(""))
    table = _dims_table(list(uniques))
    return table[codes] if len(codes) else np.empty((0, len(DIMS)))


def parse_dims(shape_json: pd.Series, params_json: pd.Series) -> pd.DataFrame:
    """Canonical numeric dims per row from the kernel's shape_json and the measurement's params_json.

    A dim in params_json (what was launched) overrides the same dim in shape_json.
    """
    shape = _dims_of_series(shape_json)
    params = _dims_of_series(params_json)
    merged = np.where(np.isfinite(params), params, shape)
    return pd.DataFrame(merged, columns=list(DIMS), index=shape_json.index)


def _tile_from_names(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Output tile from cuBLAS kernel names such as ``ampere_sgemm_32x128_tn`` (NaN when absent)."""
    extracted = names.astype("string").str.extract(_TILE_IN_NAME)
    return (
        pd.to_numeric(extracted[0], errors="coerce").to_numpy("float64"),
        pd.to_numeric(extracted[1], errors="coerce").to_numpy("float64"),
    )


# ----------------------------------------------------------------------------------------------
# Devices
# ----------------------------------------------------------------------------------------------
def _peak(spec: Any, precision: str, tensor: bool) -> float:
    try:
        value = spec.peak_flops(precision, tensor=tensor)
    except (KeyError, ValueError, LookupError, TypeError, AttributeError):
        return math.nan
    return float(value) if value is not None and float(value) > 0 else math.nan


def _attr(spec: Any, names: Iterable[str], default: float = math.nan) -> float:
    for name in names:
        value = getattr(spec, name, None)
        if value is not None:
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(number) and number > 0:
                return number
    return default


DEVICE_COLUMNS: tuple[str, ...] = (
    "sms",
    "clock_hz",
    "dram_Bps",
    "l2_Bps",
    "max_threads_sm",
    "max_ctas_sm",
    "sfu_ops_s",
    "fma_fp32",
    "fma_fp64",
    "fma_fp16",
    "tensor_fp16",
    "tensor_bf16",
    "tensor_fp8",
    "tensor_tf32",
    "tensor_fp64",
    "tensor_int8",
    "tensor_fp4",
)


def device_table(device_ids: Iterable[str], catalog: Any) -> pd.DataFrame:
    """Per device: the spec numbers the formulas need, in SI units (Hz, B/s, FLOP/s); NaN if unknown."""
    records: dict[str, list[float]] = {}
    for device_id in sorted({str(d) for d in device_ids if isinstance(d, str)}):
        try:
            spec = catalog.get(device_id)
        except (KeyError, LookupError):
            spec = None
        if spec is None:
            records[device_id] = [math.nan] * len(DEVICE_COLUMNS)
            continue
        sms = _attr(spec, ("sms", "num_sms", "compute_units"))
        clock_hz = _attr(spec, ("boost_clock_mhz", "clock_mhz")) * 1e6
        dram = _attr(spec, ("dram_gbps",)) * 1e9
        l2 = _attr(spec, ("l2_gbps", "l2_bandwidth_gbps"), dram / 1e9 * L2_OVER_DRAM) * 1e9
        records[device_id] = [
            sms,
            clock_hz,
            dram,
            l2,
            _attr(spec, ("max_resident_threads_per_sm", "max_threads_per_sm"), MAX_THREADS_PER_SM),
            _attr(spec, ("max_ctas_per_sm",), MAX_CTAS_PER_SM),
            sms * clock_hz * SFU_OPS_PER_CLK_PER_SM,
            _peak(spec, "fp32", False),
            _peak(spec, "fp64", False),
            _peak(spec, "fp16", False),
            _peak(spec, "fp16", True),
            _peak(spec, "bf16", True),
            _peak(spec, "fp8", True),
            _peak(spec, "tf32", True),
            _peak(spec, "fp64", True),
            _peak(spec, "int8", True),
            _peak(spec, "fp4", True),
        ]
    return pd.DataFrame.from_dict(records, orient="index", columns=list(DEVICE_COLUMNS), dtype="float64")


# ----------------------------------------------------------------------------------------------
# Per-family demand
# ----------------------------------------------------------------------------------------------
def _num(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy("float64")


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.ceil(a / b)


def label_codes(labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, distinct labels)`` of a label array: a ``pd.Categorical``'s own (free: bulk callers with
    a few distinct labels pass them so), else hash-factorised (NaN/None is a label of its own)."""
    if isinstance(labels, pd.Categorical):
        categories = np.asarray(labels.categories, dtype=object)
        codes = np.asarray(labels.codes, dtype=np.int64)
        if (codes < 0).any():  # missing values: one more label at the end, as factorize would give
            return np.where(codes < 0, len(categories), codes), np.append(categories, None)
        return codes, categories
    codes, uniques = pd.factorize(np.asarray(labels, dtype=object), use_na_sentinel=False)
    return codes, np.asarray(uniques, dtype=object)


def is_in(labels: Any, names: Iterable[str]) -> np.ndarray:
    """``np.isin(labels, names)`` for object arrays and ``pd.Categorical`` (codes compared, not strings)."""
    if isinstance(labels, pd.Categorical):
        return np.asarray(labels.isin(list(names)))
    return np.isin(labels, list(names))


def starts_with(labels: Any, prefix: str) -> np.ndarray:
    """Which labels start with ``prefix`` (tested once per distinct label)."""
    codes, uniques = label_codes(labels)
    return (
        np.array([str(u).startswith(prefix) for u in uniques], dtype=bool)[codes]
        if len(uniques)
        else np.zeros(len(codes), dtype=bool)
    )


def map_labels(labels: Any, table: dict[str, Any], default: Any) -> np.ndarray:
    """``[table.get(str(v), default) for v in labels]`` as a float array, looked up once per distinct
    label (hash-factorised, no per-row Python; a ``pd.Categorical``'s codes as they are): bulk serving
    maps millions of rows this way."""
    if not isinstance(labels, pd.Categorical):
        labels = np.asarray(labels, dtype=object)
    if len(labels) <= 32:  # a handful of questions: a dict lookup per row beats factorising
        return np.array([table.get(str(v), default) for v in labels], dtype="float64").reshape(
            (len(labels), *np.shape(default))
        )
    codes, uniques = label_codes(labels)
    values = np.array([table.get(str(u), default) for u in uniques], dtype="float64")
    if values.ndim == 1:
        return values[codes] if len(uniques) else np.empty(len(codes))
    return values[codes] if len(uniques) else np.empty((len(codes), values.shape[1]))


def _or(value: np.ndarray, default: float | np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(value), value, default)


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
    heads = _or(col["heads"], col["H"])
    parts = {
        "gemm": {"M": col["M"], "N": col["N"], "K": col["K"], "B": B},
        "moe": {
            "T": col["M"],
            "E": _or(col["E"], 1.0),
            "topk": _or(col["topk"], 1.0),
            "H": col["H"],
            "I": col["N"],
        },
        "conv": {k: col[k] for k in ("cin", "cout", "ksize", "insize", "stride", "pad")} | {"B": B},
        "attention": {
            "B": B,
            "S": col["seq"],
            "KV": _or(col["seq_kv"], col["seq"]),
            "H": heads,
            "HKV": _or(col["HKV"], heads),
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
    B = _or(col["B"], 1.0)
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
    moe_rows = col["M"] * _or(col["topk"], 1.0)
    put(
        is_moe, moe_rows, np.where(w2, col["H"], 2.0 * col["N"]), np.where(w2, col["N"], col["H"]), np.ones(n)
    )
    # NeuSight/PyTorch conv2d as implicit GEMM: rows = B*Ho*Wo, cols = Cout, depth = Cin*k*k.
    is_conv = (family == "conv") & np.isfinite(col["cin"])
    ho = np.floor((col["insize"] + 2 * _or(col["pad"], 0.0) - col["ksize"]) / _or(col["stride"], 1.0)) + 1
    put(is_conv, B * ho * ho, col["cout"], col["cin"] * col["ksize"] ** 2, np.ones(n))
    # Attention (FlashAttention-style): QK^T and PV GEMMs, softmax exp per score.
    is_attn = family == "attention"
    put(
        is_attn,
        col["seq"],
        _or(col["seq_kv"], col["seq"]),
        2 * col["head_dim"],
        B * _or(col["heads"], col["H"]),
    )

    mask = is_gemm | is_linear | is_moe | is_conv | is_attn
    work = _gemm_like_work(
        x, {"gemm": is_gemm | is_linear, "moe": is_moe, "conv": is_conv, "attention": is_attn}, B
    )
    e, e_out = x.e, x.e_out
    # Tile: the shape's own (Triton MoE) > the one in the cuBLAS kernel name > 128x128.
    tm = _or(col["tile_m"], _or(x.name_tile[0], GEMM_TILE[0]))
    tn = _or(col["tile_n"], _or(x.name_tile[1], GEMM_TILE[1]))
    # MoE: only the experts routed to hold rows (expected distinct experts, components/physics/moe.py).
    experts_hit = np.where(
        is_moe, moe.experts_touched(col["M"], _or(col["E"], 1.0), _or(col["topk"], 1.0)), 1.0
    )
    a_elems, c_elems = gb * gm * gk, gb * gm * gn
    # Tile re-reads: A's K-panel once per column of tiles, B's once per row of tiles (no L2 reuse).
    m_tiles = np.where(is_moe, experts_hit * _ceil_div(moe_rows / experts_hit, tm), _ceil_div(gm, tm))
    n_tiles = _ceil_div(gn, tn)
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


def _kernel_tuner_conv(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Kernel Tuner 2D convolution (benchmark_hub convolution_milo): direct, fp32 FMA, halo per CTA."""
    col, n = x.col, x.n
    mask = (x.family == "conv") & ~np.isfinite(col["cin"]) & np.isfinite(col["filter_w"])
    w, h = _or(col["image_w"], 4096.0), _or(col["image_h"], 4096.0)
    fw, fh = col["filter_w"], _or(col["filter_h"], col["filter_w"])
    tile_w = _or(col["bsx"], 16.0) * _or(col["tsx"], 1.0)
    tile_h = _or(col["bsy"], 16.0) * _or(col["tsy"], 1.0)
    ctas = _ceil_div(w, tile_w) * _ceil_div(h, tile_h)
    bytes_min = 4.0 * ((w + fw - 1) * (h + fh - 1) + w * h + fw * fh)
    bytes_l2 = 4.0 * (ctas * (tile_w + fw - 1) * (tile_h + fh - 1) + w * h)  # halo re-read per CTA
    return mask, dict(
        tensor=np.zeros(n),
        fma=2.0 * w * h * fw * fh,
        sfu=np.zeros(n),
        bytes_min=bytes_min,
        bytes_l2=bytes_l2,
        ctas=ctas,
        threads=_or(col["bsx"], 16.0) * _or(col["bsy"], 16.0),
        cap=np.full(n, np.nan),
        tile_m=tile_h,
        tile_n=tile_w,
    )


def _dedispersion(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Dedispersion (benchmark_hub): per (DM, sample) a sum over channels of uint8 input, fp32 out."""
    col, n = x.col, x.n
    samples, dms = _or(col["samples"], 25000.0), _or(col["dms"], 2048.0)
    channels = _or(col["channels"], DEDISP_CHANNELS)
    bytes_min = channels * (samples + DEDISP_MAX_SHIFT) + 4.0 * samples * dms + 4.0 * dms * channels
    bytes_l2 = samples * dms * channels + 4.0 * samples * dms  # every (dm, sample) reads every channel's byte
    tile_s = _or(col["bsx"], 1.0) * _or(col["tsx"], 1.0)
    tile_d = _or(col["bsy"], 32.0) * _or(col["tsy"], 1.0)
    return x.family == "dedispersion", dict(
        tensor=np.zeros(n),
        fma=samples * dms * channels,
        sfu=np.zeros(n),
        bytes_min=bytes_min,
        bytes_l2=bytes_l2,
        ctas=_ceil_div(samples, tile_s) * _ceil_div(dms, tile_d),
        threads=_or(col["bsx"], 1.0) * _or(col["bsy"], 32.0),
        cap=np.full(n, np.nan),
        tile_m=tile_d,
        tile_n=tile_s,
    )


def _elementwise(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Elementwise: the registry's per-op FLOPs, FMA/MUFU demand and inputs read (components/physics)."""
    col, n = x.col, x.n
    mask = x.family == "elementwise"
    numel = _or(col["N"], _or(col["B"], 1.0) * col["H"])
    with np.errstate(invalid="ignore"):
        work = registry_work("elementwise", x.dtype, mask, {"N": numel}, x.op)
    return mask, dict(
        flops=work.flops,
        tensor=np.zeros(n),
        fma=work.fma,
        sfu=work.sfu,
        bytes_min=work.dram_bytes,
        bytes_l2=work.dram_bytes,
        ctas=_ceil_div(numel, ELEMENTWISE_ELEMS_PER_CTA),
        threads=np.full(n, ELEMENTWISE_THREADS),
        cap=np.full(n, np.nan),
    )


def _row_reductions(x: FamilyInputs) -> tuple[np.ndarray, Demand]:
    """Softmax, layernorm and rmsnorm over B rows of H: the registry's work (components/physics)."""
    col, n, family = x.col, x.n, x.family
    rows, cols = _or(col["B"], 1.0), col["H"]
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
    ctas = np.where(is_sm, np.where(cols <= 1024, _ceil_div(rows, 4.0), rows), rows)
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


def _family_demand(
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    d: pd.DataFrame | dict[str, np.ndarray],
    name_tile: tuple[np.ndarray, np.ndarray],
) -> dict[str, np.ndarray]:
    """Per row: pipe FLOPs, DRAM/L2 bytes, tiles, threads and a CTA-per-SM cap (NaN = the GPU's limit)."""
    n = len(family)
    e = map_labels(dtype, ELEM_BYTES, 4.0)
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


def _notes(family: np.ndarray, op: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """Why a row has no analytical features (None where it has them)."""
    notes = np.full(len(family), None, dtype=object)
    reasons = {
        "program": (
            "program: whole program, no op formula (measured-counter m_* features only where counters exist)"
        ),
        "collective": (
            "collective: needs an interconnect model (link bandwidth/topology), not in the device spec"
        ),
    }
    for i in np.flatnonzero(~covered):
        fam = str(family[i])
        if fam in reasons:
            notes[i] = reasons[fam]
        elif fam == "elementwise" and str(op[i]) not in ELEMENTWISE_COST:
            notes[i] = f"elementwise op {op[i]!r} has no cost entry"
        else:
            notes[i] = f"family {fam!r}/op {op[i]!r}: no formula, or its shape lacks the dims it needs"
    return notes


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Composed:
    """``compose_features``' answer: the ``f_*`` arrays (not yet masked), which rows a formula covers,
    and the roofline time (s; NaN where the device lacks a peak or bandwidth)."""

    features: dict[str, np.ndarray]
    covered: np.ndarray
    roofline: np.ndarray


def tensor_peak_of(family: np.ndarray, dtype: np.ndarray, dv: dict[str, np.ndarray]) -> np.ndarray:
    """The tensor-pipe peak each row's dtype runs at (NaN: no tensor pipe for it).

    fp32 GEMMs stay on the FMA pipe (PyTorch allow_tf32=False for matmul) except cuDNN convs, which use
    TF32 by default where the GPU has it. The quantised GEMM dtypes (components/physics/roofline.GEMM_DTYPES)
    run on their own pipes, falling back the way physics.FALLBACK does: fp8 block-scaled = fp8; nvfp4 -> fp8
    -> bf16; W8A8 int8 -> fp16; weight-only int8/int4 de-quantise to bf16 (fp16 where no bf16); an explicit
    tf32 GEMM on the tf32 tensor pipe."""
    fp8_or_bf16 = _or(dv["tensor_fp8"], dv["tensor_bf16"])
    return np.select(
        [
            dtype == "fp16",
            dtype == "bf16",
            is_in(dtype, ["fp8", "fp8_block"]),
            dtype == "fp64",
            (dtype == "fp32") & (family == "conv"),
            dtype == "nvfp4",
            dtype == "int8",
            is_in(dtype, ["int8_wo", "int4_wo"]),
            dtype == "tf32",
        ],
        [
            dv["tensor_fp16"],
            dv["tensor_bf16"],
            fp8_or_bf16,
            dv["tensor_fp64"],
            dv["tensor_tf32"],
            _or(dv["tensor_fp4"], fp8_or_bf16),
            _or(dv["tensor_int8"], dv["tensor_fp16"]),
            _or(dv["tensor_bf16"], dv["tensor_fp16"]),
            dv["tensor_tf32"],
        ],
        default=np.nan,
    )


def compose_features(
    family: np.ndarray,
    dtype: np.ndarray,
    dem: dict[str, np.ndarray],
    dv: dict[str, np.ndarray],
    *,
    definition_flops: np.ndarray | None = None,
    grid: np.ndarray | None = None,
    block: np.ndarray | None = None,
) -> Composed:
    """The ``f_*`` features from the per-family demand (``_family_demand``) and the device numbers (``dv``,
    one array per ``DEVICE_COLUMNS`` entry, row-aligned): pipes, tiles and waves, times, roofline.

    The one definition of these formulas, over arrays: the feature build (``analytical_features``) and
    serving (``components.serving.featurise``) both call it. ``definition_flops``: FLOPs by the op's
    definition where known (NaN/<= 0 elsewhere: the pipes' FLOPs; default: the registry's, ``dem["flops"]``);
    ``grid``/``block``: the measured launch (CTAs, threads per CTA; NaN or None where not measured: the tile
    estimate)."""
    n = len(family)
    e = map_labels(dtype, ELEM_BYTES, 4.0)
    tensor_peak = tensor_peak_of(family, dtype, dv)
    # fp16/bf16 elementwise math runs in fp32
    fma_peak = np.where(dtype == "fp64", dv["fma_fp64"], dv["fma_fp32"])
    uses_tensor = dem["tensor_capable"] & np.isfinite(tensor_peak)
    # Tensor-capable work on a GPU/precision without tensor cores runs on the FMA pipe.
    fma_flops = np.where(dem["tensor_capable"] & ~uses_tensor, dem["tensor"], dem["fma"])
    tensor_flops = np.where(uses_tensor, dem["tensor"], np.where(dem["tensor_capable"], 0.0, dem["tensor"]))
    sfu_ops = dem["sfu"]
    flops_pipes = tensor_flops + fma_flops
    covered = np.isfinite(flops_pipes) & np.isfinite(dem["bytes_min"]) & (dem["bytes_min"] > 0)
    flops = flops_pipes
    if definition_flops is None:
        definition_flops = dem.get("flops")
    if definition_flops is not None:
        by_definition = np.isfinite(definition_flops) & (definition_flops > 0)
        flops = np.where(by_definition, definition_flops, flops_pipes)
    flops = np.where(covered, flops, np.nan)

    # Launch geometry: the measured grid wins over the tile estimate.
    if grid is not None:
        ctas_measured = np.isfinite(grid) & (grid > 0)
        ctas = np.where(ctas_measured, grid, dem["ctas"])
    else:
        ctas_measured, ctas = np.zeros(n, dtype=bool), dem["ctas"]
    threads = dem["threads"]
    if block is not None:
        threads = np.where(np.isfinite(block) & (block > 0), block, threads)
    with np.errstate(divide="ignore", invalid="ignore"):
        # CTAs resident per SM: thread limit, hardware slot limit, and the family's register/smem cap.
        ctas_per_sm = np.maximum(
            1.0,
            np.minimum.reduce(
                [
                    np.floor(dv["max_threads_sm"] / threads),
                    _or(dv["max_ctas_sm"], MAX_CTAS_PER_SM),
                    _or(dem["cap"], MAX_CTAS_PER_SM),
                ]
            ),
        )
        slots = dv["sms"] * ctas_per_sm
        waves = np.ceil(ctas / slots)
        wave_eff = ctas / (waves * slots)  # tail effect: share of CTA slots busy over all waves
        busiest = np.ceil(ctas / dv["sms"])  # CTAs on the busiest SM (round-robin dispatch)
        imbalance = busiest * dv["sms"] / ctas  # busiest-SM load over the mean SM load (>= 1)
        active = np.minimum(ctas, dv["sms"]) / dv["sms"]

        t_tensor = np.where(tensor_flops > 0, tensor_flops / tensor_peak, 0.0)
        t_fma = np.where(fma_flops > 0, fma_flops / fma_peak, 0.0)
        t_sfu = sfu_ops / dv["sfu_ops_s"]
        t_dram = dem["bytes_min"] / dv["dram_Bps"]
        t_l2 = dem["bytes_l2"] / dv["l2_Bps"]
        t_compute = np.maximum.reduce([t_tensor, t_fma, t_sfu])
        roofline = np.maximum(t_compute, t_dram)  # classic roofline: peak compute vs ideal DRAM traffic
        # Pipe-aware bound: busiest SM's compute, plus tile re-reads through L2 (PipeWeave-style demand).
        pipes = np.maximum.reduce([t_compute * imbalance, t_dram, t_l2])
        compute_bound = t_compute >= t_dram
        peak_compute = np.where(uses_tensor, tensor_peak, fma_peak)
        clock = dv["clock_hz"]
        f = {
            "f_flops": flops,
            "f_tensor_flops": tensor_flops,
            "f_fma_flops": fma_flops,
            "f_sfu_ops": sfu_ops,
            "f_uses_tensor": uses_tensor.astype("float64"),
            "f_precision_bytes": e,
            "f_dram_bytes_min": dem["bytes_min"],
            "f_l2_bytes_tiled": dem["bytes_l2"],
            "f_arith_intensity": flops / dem["bytes_min"],
            "f_arith_intensity_tiled": flops / dem["bytes_l2"],
            "f_tile_m": dem["tile_m"],
            "f_tile_n": dem["tile_n"],
            "f_ctas": ctas,
            "f_ctas_measured": ctas_measured.astype("float64"),
            "f_threads_per_cta": threads,
            "f_ctas_per_sm": ctas_per_sm,
            "f_waves": waves,
            "f_wave_efficiency": wave_eff,
            "f_busiest_sm_ctas": busiest,
            "f_sm_imbalance": imbalance,
            "f_active_sm_fraction": active,
            "f_peak_compute_flops": peak_compute,
            "f_ridge_point": peak_compute / dv["dram_Bps"],
            "f_tensor_time_us": t_tensor * 1e6,
            "f_fma_time_us": t_fma * 1e6,
            "f_sfu_time_us": t_sfu * 1e6,
            "f_dram_time_us": t_dram * 1e6,
            "f_l2_time_us": t_l2 * 1e6,
            "f_compute_time_us": t_compute * 1e6,
            "f_tensor_cycles": t_tensor * clock,
            "f_fma_cycles": t_fma * clock,
            "f_sfu_cycles": t_sfu * clock,
            "f_dram_cycles": t_dram * clock,
            "f_l2_cycles": t_l2 * clock,
            "f_busiest_sm_cycles": t_compute * imbalance * clock,
            "f_roofline_time_us": roofline * 1e6,
            "f_pipes_time_us": pipes * 1e6,
            "f_compute_bound": compute_bound.astype("float64"),
        }
    return Composed(features=f, covered=covered, roofline=roofline)


def analytical_features(frame: pd.DataFrame, catalog: Any) -> pd.DataFrame:
    """``f_*``/``m_*`` features and ``feature_note`` for each row of ``frame`` (same index).

    ``frame`` needs ``device_id, family, op, dtype, shape_json, params_json``; optional measured launch
    dims ``grid_*``/``block_*``, kernel ``name`` (tile hint) and counter columns ``flops, dram_bytes,
    fp32_arith_intensity, fp64_arith_intensity, int_arith_intensity``.
    """
    n = len(frame)
    idx = frame.index
    family = frame["family"].astype(object).fillna("").astype(str).to_numpy()
    op = frame["op"].astype(object).fillna("").astype(str).to_numpy()
    dtype = frame["dtype"].astype(object).fillna("unknown").astype(str).to_numpy()
    shape_json = frame["shape_json"] if "shape_json" in frame.columns else pd.Series([None] * n, index=idx)
    params_json = frame["params_json"] if "params_json" in frame.columns else pd.Series([None] * n, index=idx)
    dims = parse_dims(shape_json, params_json)
    names = frame["name"] if "name" in frame.columns else pd.Series([None] * n, index=idx)
    dem = _family_demand(family, op, dtype, dims, _tile_from_names(names))

    dev = device_table(frame["device_id"].astype(object), catalog).reindex(
        frame["device_id"].astype(str).to_numpy()
    )
    dv = {c: dev[c].to_numpy("float64") for c in DEVICE_COLUMNS}
    grid = np.ones(n)
    block = np.ones(n)
    for axis in "xyz":  # the measured launch, where the row has one
        grid = grid * _or(_num(frame, f"grid_{axis}"), 1.0 if axis != "x" else np.nan)
        block = block * _or(_num(frame, f"block_{axis}"), 1.0 if axis != "x" else np.nan)
    composed = compose_features(family, dtype, dem, dv, grid=grid, block=block)
    f, covered, roofline = composed.features, composed.covered, composed.roofline
    compute_bound = f["f_compute_bound"] > 0
    result = pd.DataFrame(
        {k: np.where(covered, np.asarray(v, dtype="float64"), np.nan) for k, v in f.items()}, index=idx
    )
    known = covered & np.isfinite(roofline)
    result["f_bound"] = pd.Series(
        np.where(known, np.where(compute_bound, "compute", "bandwidth"), None), index=idx, dtype="string"
    )
    result = pd.concat([result, _measured_counter_features(frame, dv)], axis=1)
    notes = _notes(family, op, covered)
    uncovered_device = covered & ~np.isfinite(roofline)
    notes[uncovered_device] = "device not in the catalog or missing peak/bandwidth for this precision"
    result["feature_note"] = pd.Series(notes, index=idx, dtype="string")
    return result


def _measured_counter_features(frame: pd.DataFrame, dv: dict[str, np.ndarray]) -> pd.DataFrame:
    """``m_*``: roofline from measured FLOP/byte counters (FP32, FP64, integer, each against its own peak)."""
    dram = _num(frame, "dram_bytes")
    have = np.isfinite(dram) & (dram > 0)
    fp32 = _or(_num(frame, "fp32_arith_intensity"), 0.0) * dram
    fp64 = _or(_num(frame, "fp64_arith_intensity"), 0.0) * dram
    ints = _or(_num(frame, "int_arith_intensity"), 0.0) * dram
    total = _num(frame, "flops")
    split_known = (fp32 + fp64) > 0
    total = np.where(np.isfinite(total), total, np.where(split_known, fp32 + fp64, np.nan))
    # Without a precision split, count all FLOPs at the FP32 FMA peak.
    fp32 = np.where(split_known, fp32, _or(total, 0.0))
    t_compute = np.maximum.reduce(
        [
            fp32 / dv["fma_fp32"],
            fp64 / _or(dv["fma_fp64"], dv["fma_fp32"] / 64.0),
            ints / (dv["fma_fp32"] / 2.0),
        ]
    )  # integer: one instr/clk/lane = half FMA FLOP rate
    t_dram = dram / dv["dram_Bps"]
    roof = np.maximum(t_compute, t_dram)
    idx = frame.index
    out = pd.DataFrame(
        {
            "m_flops": np.where(have, total, np.nan),
            "m_dram_bytes": np.where(have, dram, np.nan),
            "m_arith_intensity": np.where(have, total / dram, np.nan),
            "m_compute_time_us": np.where(have, t_compute * 1e6, np.nan),
            "m_dram_time_us": np.where(have, t_dram * 1e6, np.nan),
            "m_roofline_time_us": np.where(have, roof * 1e6, np.nan),
        },
        index=idx,
    )
    known = have & np.isfinite(roof)
    out["m_bound"] = pd.Series(
        np.where(known, np.where(t_compute >= t_dram, "compute", "bandwidth"), None),
        index=idx,
        dtype="string",
    )
    return out
