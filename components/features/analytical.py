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
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.features.arrays import finite_or, map_labels, numeric_column
from components.features.demand import family_demand
from components.features.device_numbers import DEVICE_COLUMNS, MAX_CTAS_PER_SM, device_table
from components.features.dims import parse_dims, tile_from_names
from components.physics import dtypes
from components.physics.elementwise import ELEMENTWISE_COST

pd = lazy_module("pandas")  # the feature table's functions only: an op question uses BOUND_LABELS alone

# Columns that do not depend on the GPU's rates (only on the kernel and on SM counts): what transfers to
# an unseen GPU (components/models/transfer.py).
RATE_FREE_COLUMNS: tuple[str, ...] = (
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


# f_bound's labels by code (0, 1, -1: unknown): the serving path keeps codes, the feature table labels.
BOUND_LABELS = np.array(["bandwidth", "compute", None], dtype=object)
DEVICE_NOTE = "device not in the catalog or missing peak/bandwidth for this precision"


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

    def masked(self) -> dict[str, np.ndarray]:
        """The ``f_*`` arrays, NaN on the rows no formula covers."""
        if self.covered.all():  # the usual case for questions: no masking pass over ~40 columns
            return {k: np.asarray(v, dtype="float64") for k, v in self.features.items()}
        return {
            k: np.where(self.covered, np.asarray(v, dtype="float64"), np.nan)
            for k, v in self.features.items()
        }

    def bound_code(self) -> np.ndarray:
        """``f_bound`` as codes into BOUND_LABELS: 0 bandwidth, 1 compute, -1 unknown (no formula or peak)."""
        known = self.covered & np.isfinite(self.roofline)
        return np.where(known, (self.features["f_compute_bound"] > 0).astype(np.int8), -1).astype(np.int8)

    def notes(self, family: Any, op: Any) -> np.ndarray:
        """``feature_note``: why a row lacks features (None where it has them)."""
        notes = _notes(family, op, self.covered)
        notes[self.covered & ~np.isfinite(self.roofline)] = DEVICE_NOTE
        return notes


def tensor_peak_of(
    family: np.ndarray, dtype: np.ndarray, dv: dict[str, np.ndarray], fma_kernel: np.ndarray | None = None
) -> np.ndarray:
    """The tensor-pipe peak each row's dtype runs at (NaN: no tensor pipe for it: the FMA pipe).

    The pipe per dtype is the physics' (``dtypes.tensor_precisions``: its own tensor pipe, then its FALLBACK
    chain's; bf16 without bf16 tensor cores, V100/T4, runs as fp32 FMA). One rule is the features' own: fp32
    GEMMs stay on the FMA pipe (PyTorch allow_tf32=False for matmul) except cuDNN convs, which use TF32 by
    default where the GPU has it -- unless the row's measured kernel was an FP32 FMA one (``fma_kernel``,
    from its recorded name: ``simt_kernels``), as every one of NeuSight's 4,787 A100-80GB convs was
    (``ampere_sgemm_128x128_nn``, ``cudnn_infer_ampere_scudnn_winograd_*``, ``implicit_convolve_sgemm``)."""
    peak = np.full(len(family), np.nan)
    for name in dtypes.DTYPES:
        rows = np.asarray(dtype == name)
        if not rows.any():
            continue
        value = np.full(len(family), np.nan)
        for precision in dtypes.tensor_precisions(name):
            value = finite_or(value, dv[f"tensor_{precision}"])
        np.copyto(peak, value, where=rows)
    conv_tf32 = np.asarray(dtype == "fp32") & np.asarray(family == "conv")
    if fma_kernel is not None:
        conv_tf32 = conv_tf32 & ~np.asarray(fma_kernel, dtype=bool)
    return np.where(conv_tf32, dv["tensor_tf32"], peak)


# FP32 FMA (SIMT) kernels of cuBLAS/cuDNN by name, and the tensor-core ones that may share a word with them
SIMT_KERNEL = re.compile(r"sgemm|scudnn|gcgemm|winograd|convolve", re.IGNORECASE)
TENSOR_KERNEL = re.compile(r"tf32|xmma|1688|16816|tensorop|hmma", re.IGNORECASE)


def simt_kernels(params_json: pd.Series) -> np.ndarray:
    """Per row: its measured kernel (``kernel_name`` in ``params_json``, as NeuSight's rows record it) is an
    FP32 FMA kernel, so its math ran on the FMA pipe whatever the GPU's TF32 tensor cores could do."""

    def simt(text: Any) -> bool:
        if not isinstance(text, str) or "kernel_name" not in text:
            return False
        try:
            name = str(json.loads(text).get("kernel_name") or "")
        except (ValueError, AttributeError):
            return False
        return bool(SIMT_KERNEL.search(name)) and not TENSOR_KERNEL.search(name)

    return np.fromiter((simt(t) for t in params_json), dtype=bool, count=len(params_json))


def compose_features(
    family: np.ndarray,
    dtype: np.ndarray,
    dem: dict[str, np.ndarray],
    dv: dict[str, np.ndarray],
    *,
    definition_flops: np.ndarray | None = None,
    grid: np.ndarray | None = None,
    block: np.ndarray | None = None,
    fma_kernel: np.ndarray | None = None,
) -> Composed:
    """The ``f_*`` features from the per-family demand (``family_demand``) and the device numbers (``dv``,
    one array per ``DEVICE_COLUMNS`` entry, row-aligned): pipes, tiles and waves, times, roofline.

    The one definition of these formulas, over arrays: the feature build (``analytical_features``) and
    serving (``components.serving.featurise``) both call it. ``definition_flops``: FLOPs by the op's
    definition where known (NaN/<= 0 elsewhere: the pipes' FLOPs; default: the registry's, ``dem["flops"]``);
    ``grid``/``block``: the measured launch (CTAs, threads per CTA; NaN or None where not measured: the tile
    estimate); ``fma_kernel``: rows whose measured kernel ran on the FMA pipe (``simt_kernels``)."""
    n = len(family)
    e = map_labels(dtype, dtypes.ELEM_BYTES, 4.0)
    tensor_peak = tensor_peak_of(family, dtype, dv, fma_kernel)
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
                    finite_or(dv["max_ctas_sm"], MAX_CTAS_PER_SM),
                    finite_or(dem["cap"], MAX_CTAS_PER_SM),
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
    dem = family_demand(family, op, dtype, dims, tile_from_names(names))

    dev = device_table(frame["device_id"].astype(object), catalog).reindex(
        frame["device_id"].astype(str).to_numpy()
    )
    dv = {c: dev[c].to_numpy("float64") for c in DEVICE_COLUMNS}
    grid = np.ones(n)
    block = np.ones(n)
    for axis in "xyz":  # the measured launch, where the row has one
        grid = grid * finite_or(numeric_column(frame, f"grid_{axis}"), 1.0 if axis != "x" else np.nan)
        block = block * finite_or(numeric_column(frame, f"block_{axis}"), 1.0 if axis != "x" else np.nan)
    fma_kernel = np.zeros(n, dtype=bool)  # only a conv's pipe follows its kernel (``tensor_peak_of``)
    fma_kernel[family == "conv"] = simt_kernels(params_json[family == "conv"])
    composed = compose_features(family, dtype, dem, dv, grid=grid, block=block, fma_kernel=fma_kernel)
    result = pd.DataFrame(composed.masked(), index=idx)
    result["f_bound"] = pd.Series(BOUND_LABELS[composed.bound_code()], index=idx, dtype="string")
    result = pd.concat([result, _measured_counter_features(frame, dv)], axis=1)
    result["feature_note"] = pd.Series(composed.notes(family, op), index=idx, dtype="string")
    return result


def _measured_counter_features(frame: pd.DataFrame, dv: dict[str, np.ndarray]) -> pd.DataFrame:
    """``m_*``: roofline from measured FLOP/byte counters (FP32, FP64, integer, each against its own peak)."""
    dram = numeric_column(frame, "dram_bytes")
    have = np.isfinite(dram) & (dram > 0)
    fp32 = finite_or(numeric_column(frame, "fp32_arith_intensity"), 0.0) * dram
    fp64 = finite_or(numeric_column(frame, "fp64_arith_intensity"), 0.0) * dram
    ints = finite_or(numeric_column(frame, "int_arith_intensity"), 0.0) * dram
    total = numeric_column(frame, "flops")
    split_known = (fp32 + fp64) > 0
    total = np.where(np.isfinite(total), total, np.where(split_known, fp32 + fp64, np.nan))
    # Without a precision split, count all FLOPs at the FP32 FMA peak.
    fp32 = np.where(split_known, fp32, finite_or(total, 0.0))
    t_compute = np.maximum.reduce(
        [
            fp32 / dv["fma_fp32"],
            fp64 / finite_or(dv["fma_fp64"], dv["fma_fp32"] / 64.0),
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
