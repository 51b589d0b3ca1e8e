"""The feature table of op questions, built with vectorised numpy for all questions x devices at once.

Why not ``components.features.build.build_feature_table``: it parses each question's shape from
JSON text and looks FLOPs up per distinct kernel in Python -- right for ingested data, ~100x too
slow for a server answering thousands of questions per request or the >= 1M predictions/s the
batch path aims at. Here a question is already numbers (a dims matrix in
``components.features.analytical.DIMS`` order), so the same formulas run as array operations.

The formulas are the analytical model's own (``_family_demand`` and the composition below mirror
``analytical_features`` for rows without measured launch or counters); ``tests/unit/test_serving_
questions.py`` checks this table against ``build_feature_table`` column by column, so the two
cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from components.features import analytical as an

QUERY_SOURCE = "query"


_DEVICE_CACHE: dict[tuple[Any, ...], tuple[dict[str, np.ndarray], pd.DataFrame]] = {}


def _device_arrays(specs: Sequence[Any]) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Per distinct spec: the analytical device numbers and the ``dev_*`` feature vector (cached per
    spec set: a server asks about the same few GPUs again and again)."""
    try:
        key: tuple[Any, ...] | None = tuple(specs)
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _DEVICE_CACHE:
        return _DEVICE_CACHE[key]
    result = _device_arrays_uncached(specs)
    if key is not None:
        if len(_DEVICE_CACHE) > 256:
            _DEVICE_CACHE.clear()
        _DEVICE_CACHE[key] = result
    return result


def _device_arrays_uncached(specs: Sequence[Any]) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    from components.devices import Catalog, device_feature_vector

    catalog = Catalog(list(specs))
    table = an.device_table([s.id for s in specs], catalog).reindex([s.id for s in specs])
    dev = pd.DataFrame([{(k if k.startswith("dev_") else f"dev_{k}"): float(v)
                         for k, v in device_feature_vector(s).items()} for s in specs])
    return {c: table[c].to_numpy("float64") for c in an.DEVICE_COLUMNS}, dev


def _definition_flops(family: np.ndarray, op: np.ndarray, col: dict[str, np.ndarray],
                      fallback: np.ndarray) -> np.ndarray:
    """``components.ingest.derived.op_flops`` as array arithmetic for the op families questions name."""
    from components.ingest.derived import ELEMENTWISE_FLOPS_PER_ELEMENT, ROW_OP_FLOPS_PER_ELEMENT

    b = an._or(col["B"], 1.0)
    out = np.full(len(family), np.nan)
    gemm = np.isin(family, ["gemm", "linear", "bmm"])
    out[gemm] = (2.0 * b * col["M"] * col["N"] * col["K"])[gemm]
    elementwise = family == "elementwise"
    if elementwise.any():
        per = an.map_labels(op, ELEMENTWISE_FLOPS_PER_ELEMENT, np.nan)
        numel = np.where(np.isfinite(col["N"]), col["N"], col["B"] * col["H"])
        out[elementwise] = (per * numel)[elementwise]
    for fam, per_element in ROW_OP_FLOPS_PER_ELEMENT.items():
        rows = family == fam
        out[rows] = (per_element * col["B"] * col["H"])[rows]
    return np.where(np.isfinite(out) & (out > 0), out, fallback)


def op_feature_table(family: np.ndarray, op: np.ndarray, dtype: np.ndarray, dims: np.ndarray,
                     device_index: np.ndarray, specs: Sequence[Any]) -> pd.DataFrame:
    """The feature table (``f_*``, ``m_*``, ``dev_*``, keys) of op questions, one row per question.

    ``family``/``op``/``dtype``: string arrays (canonical family, op and dtype); ``dims``: float
    matrix ``len(family) x len(DIMS)`` (NaN = absent); ``device_index``: each row's position in
    ``specs`` (the distinct DeviceSpecs asked about).
    """
    return table_of(op_feature_columns(family, op, dtype, dims, device_index, specs))


def table_of(columns: dict[str, Any]) -> pd.DataFrame:
    """``op_feature_columns``' arrays as the feature-table DataFrame (labels as categoricals)."""
    n = len(columns["family"])
    data = {k: v for k, v in columns.items() if not k.startswith("_")}
    bound = columns["_bound_code"]
    data["f_bound"] = pd.Categorical.from_codes(bound, categories=["bandwidth", "compute"])
    data["m_bound"] = pd.Categorical.from_codes(np.full(n, -1), categories=["bandwidth", "compute"])
    data["feature_note"] = pd.Categorical.from_codes(columns["_note_code"], categories=[
        "no analytical formula for this op and shape", "device missing peak/bandwidth for this precision"])
    return pd.DataFrame(data)


def op_feature_columns(family: np.ndarray, op: np.ndarray, dtype: np.ndarray, dims: np.ndarray,
                       device_index: np.ndarray, specs: Sequence[Any]) -> dict[str, Any]:
    """The feature table's columns as numpy arrays (no DataFrame): what the fast model path reads.

    Labels are integer codes: ``_bound_code`` (0 bandwidth, 1 compute, -1 unknown) and ``_note_code``.
    """
    n = len(family)
    # Object arrays of str, compared elementwise below; no conversion to numpy unicode (slow per row).
    family, op, dtype = (np.asarray(a, dtype=object) for a in (family, op, dtype))
    device_index = np.asarray(device_index, dtype="int64")
    dims = np.asarray(dims, dtype="float64")
    dims_frame = {name: dims[:, j] for j, name in enumerate(an.DIMS)}  # columns as views: no DataFrame
    no_tile = (np.full(n, np.nan), np.full(n, np.nan))
    dem = an._family_demand(family, op, dtype, dims_frame, no_tile)
    per_device, dev_features = _device_arrays(specs)
    dv = {c: v[device_index] for c, v in per_device.items()}
    e = an.map_labels(dtype, an.ELEM_BYTES, 4.0)

    # From here on: analytical_features' composition, for rows without a measured grid or counters.
    tensor_peak = np.select(
        [dtype == "fp16", dtype == "bf16", dtype == "fp8", dtype == "fp64", (dtype == "fp32") & (family == "conv")],
        [dv["tensor_fp16"], dv["tensor_bf16"], an._or(dv["tensor_fp8"], dv["tensor_bf16"]), dv["tensor_fp64"],
         dv["tensor_tf32"]], default=np.nan)
    fma_peak = np.where(dtype == "fp64", dv["fma_fp64"], dv["fma_fp32"])
    uses_tensor = dem["tensor_capable"] & np.isfinite(tensor_peak)
    fma_flops = np.where(dem["tensor_capable"] & ~uses_tensor, dem["tensor"], dem["fma"])
    tensor_flops = np.where(uses_tensor, dem["tensor"], np.where(dem["tensor_capable"], 0.0, dem["tensor"]))
    sfu_ops = dem["sfu"]
    flops_pipes = tensor_flops + fma_flops
    covered = np.isfinite(flops_pipes) & np.isfinite(dem["bytes_min"]) & (dem["bytes_min"] > 0)
    col = {k: dims_frame[k] for k in ("B", "M", "N", "K", "H")}
    flops = np.where(covered, _definition_flops(family, op, col, flops_pipes), np.nan)

    ctas, threads = dem["ctas"], dem["threads"]
    with np.errstate(divide="ignore", invalid="ignore"):
        ctas_per_sm = np.maximum(1.0, np.minimum.reduce([np.floor(dv["max_threads_sm"] / threads),
                                                        an._or(dv["max_ctas_sm"], an.MAX_CTAS_PER_SM),
                                                        an._or(dem["cap"], an.MAX_CTAS_PER_SM)]))
        slots = dv["sms"] * ctas_per_sm
        waves = np.ceil(ctas / slots)
        wave_eff = ctas / (waves * slots)
        busiest = np.ceil(ctas / dv["sms"])
        imbalance = busiest * dv["sms"] / ctas
        active = np.minimum(ctas, dv["sms"]) / dv["sms"]
        t_tensor = np.where(tensor_flops > 0, tensor_flops / tensor_peak, 0.0)
        t_fma = np.where(fma_flops > 0, fma_flops / fma_peak, 0.0)
        t_sfu = sfu_ops / dv["sfu_ops_s"]
        t_dram = dem["bytes_min"] / dv["dram_Bps"]
        t_l2 = dem["bytes_l2"] / dv["l2_Bps"]
        t_compute = np.maximum.reduce([t_tensor, t_fma, t_sfu])
        roofline = np.maximum(t_compute, t_dram)
        pipes = np.maximum.reduce([t_compute * imbalance, t_dram, t_l2])
        compute_bound = t_compute >= t_dram
        peak_compute = np.where(uses_tensor, tensor_peak, fma_peak)
        clock = dv["clock_hz"]
        f = {
            "f_flops": flops, "f_tensor_flops": tensor_flops, "f_fma_flops": fma_flops, "f_sfu_ops": sfu_ops,
            "f_uses_tensor": uses_tensor.astype("float64"), "f_precision_bytes": e,
            "f_dram_bytes_min": dem["bytes_min"], "f_l2_bytes_tiled": dem["bytes_l2"],
            "f_arith_intensity": flops / dem["bytes_min"], "f_arith_intensity_tiled": flops / dem["bytes_l2"],
            "f_tile_m": dem["tile_m"], "f_tile_n": dem["tile_n"], "f_ctas": ctas,
            "f_ctas_measured": np.zeros(n), "f_threads_per_cta": threads,
            "f_ctas_per_sm": ctas_per_sm, "f_waves": waves, "f_wave_efficiency": wave_eff,
            "f_busiest_sm_ctas": busiest, "f_sm_imbalance": imbalance, "f_active_sm_fraction": active,
            "f_peak_compute_flops": peak_compute, "f_ridge_point": peak_compute / dv["dram_Bps"],
            "f_tensor_time_us": t_tensor * 1e6, "f_fma_time_us": t_fma * 1e6, "f_sfu_time_us": t_sfu * 1e6,
            "f_dram_time_us": t_dram * 1e6, "f_l2_time_us": t_l2 * 1e6, "f_compute_time_us": t_compute * 1e6,
            "f_tensor_cycles": t_tensor * clock, "f_fma_cycles": t_fma * clock, "f_sfu_cycles": t_sfu * clock,
            "f_dram_cycles": t_dram * clock, "f_l2_cycles": t_l2 * clock,
            "f_busiest_sm_cycles": t_compute * imbalance * clock,
            "f_roofline_time_us": roofline * 1e6, "f_pipes_time_us": pipes * 1e6,
            "f_compute_bound": compute_bound.astype("float64"),
        }
    columns: dict[str, Any] = {
        "device_id": np.array([s.id for s in specs], dtype=object)[device_index],
        "source": np.full(n, QUERY_SOURCE, dtype=object), "family": family, "op": op, "dtype": dtype,
    }
    if covered.all():  # the usual case: every question has a formula; no masking pass over ~40 columns
        columns.update({k: np.asarray(v, dtype="float64") for k, v in f.items()})
    else:
        columns.update({k: np.where(covered, np.asarray(v, dtype="float64"), np.nan) for k, v in f.items()})
    known = covered & np.isfinite(roofline)
    columns["_bound_code"] = np.where(known, compute_bound.astype(np.int8), -1)
    for name in an.M_COLUMNS[:-1]:
        columns[name] = np.full(n, np.nan)
    dev = dev_features.to_numpy("float64")[device_index]
    for j, name in enumerate(dev_features.columns):
        columns[name] = dev[:, j]
    columns["_note_code"] = np.where(~covered, 0, np.where(~np.isfinite(roofline), 1, -1))
    return columns
