"""The feature table: one row per measurement, with targets, analytical, device and static features.

Columns: keys/provenance (``measurement_id, kernel_id, device_id, source, family, op, dtype,
upstream_file, run_id``), targets (canonical metric names), ``f_*``/``m_*`` analytical features
(see ``analytical``), ``dev_*`` device-catalog features, ``s_*`` static-analysis features joined by
``kernel_id`` and ``feature_note`` (why a row lacks features). No row is ever dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.features.analytical import analytical_features
from components.ingest.schema import TARGET_METRICS

# What a row is: its ids and the kernel's family, op and dtype (reports keep these beside the targets).
IDENTITY_COLUMNS: tuple[str, ...] = (
    "measurement_id",
    "kernel_id",
    "device_id",
    "source",
    "family",
    "op",
    "dtype",
)
KEY_COLUMNS: tuple[str, ...] = (
    *IDENTITY_COLUMNS,
    "upstream_file",
    "upstream_row",
    "run_id",
    "program",
)
# Labels a published task scores against (Bolet et al.'s rule), carried so every split runs on the
# feature table alone, without re-joining the canonical tables.
LABEL_COLUMNS: tuple[str, ...] = ("roofline_class_published",)
TARGET_COLUMNS: tuple[str, ...] = (*TARGET_METRICS, "roofline_class")
_KERNEL_COLUMNS: tuple[str, ...] = ("kernel_id", "family", "op", "dtype", "shape_json", "name", "program")


def _joined(measurements: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Measurements with their kernel's family/op/dtype/shape (a left join: a missing kernel keeps
    its row)."""
    kern = kernels.loc[:, [c for c in _KERNEL_COLUMNS if c in kernels.columns]].drop_duplicates("kernel_id")
    frame = measurements.reset_index(drop=True).merge(
        kern, on="kernel_id", how="left", validate="many_to_one"
    )
    for column in ("family", "op", "dtype", "shape_json", "name", "program"):
        if column not in frame.columns:
            frame[column] = pd.Series([None] * len(frame), dtype="string")
    return frame


def device_features(
    device_ids: pd.Series, catalog: Any, device_vector: Callable[[Any], Mapping[str, float]] | None = None
) -> pd.DataFrame:
    """``dev_*`` columns from ``components.devices.device_feature_vector`` (NaN for unknown devices)."""
    if device_vector is None:
        from components.devices import device_feature_vector as device_vector

    table: dict[str, dict[str, float]] = {}
    for device_id in sorted({d for d in device_ids.dropna().astype(str)}):
        try:
            spec = catalog.get(device_id)
            if spec is None:
                continue
            vector = device_vector(spec)
        except (KeyError, LookupError):
            continue
        table[device_id] = {
            (k if k.startswith("dev_") else f"dev_{k}"): float(v) for k, v in dict(vector).items()
        }
    frame = pd.DataFrame.from_dict(table, orient="index", dtype="float64")
    return frame.reindex(device_ids.astype(str).to_numpy()).set_index(device_ids.index)


CONFIG_KEYS: tuple[str, ...] = ("kernel_id", "params_json", "device_id")


def _config_ids(frame: pd.DataFrame) -> pd.Series:
    """A short id of each row's tuning configuration (benchmark_hub), so splits can pick configurations."""
    from components.features.static.hip_table import config_id

    if "params_json" not in frame.columns or "source" not in frame.columns:
        return pd.Series(pd.NA, index=frame.index, dtype="string")
    tuned = frame["source"].eq("benchmark_hub") & frame["params_json"].notna()
    ids = pd.Series(pd.NA, index=frame.index, dtype="string")
    ids[tuned] = [config_id(p) for p in frame.loc[tuned, "params_json"]]
    return ids


def _static_join(frame: pd.DataFrame, static: pd.DataFrame | None) -> pd.DataFrame | None:
    """s_* columns per row: by kernel_id, or -- for static rows that carry ``params_json`` and
    ``device_id`` (HIP tuning configurations, static.hip_table) -- by (kernel_id, params_json, device_id)."""
    if static is None or static.empty:
        return None
    cols = [c for c in static.columns if c.startswith("s_")]
    keys = frame["kernel_id"]
    per_config = (
        static["params_json"].notna() if "params_json" in static.columns else pd.Series(False, static.index)
    )
    by_kernel = static[~per_config].drop_duplicates("kernel_id").set_index("kernel_id")[cols]
    out = by_kernel.reindex(keys.astype(str).to_numpy()).set_index(keys.index)
    if per_config.any() and all(k in frame.columns for k in CONFIG_KEYS):
        configs = static[per_config].drop_duplicates(list(CONFIG_KEYS))
        index = pd.MultiIndex.from_frame(frame[list(CONFIG_KEYS)].astype("string").fillna(""))
        table = configs.set_index(pd.MultiIndex.from_frame(configs[list(CONFIG_KEYS)].astype("string")))[cols]
        matched = table.reindex(index).set_index(keys.index)
        out = matched.combine_first(out)[cols]
    return out


def build_feature_table(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    catalog: Any,
    static: pd.DataFrame | None = None,
    device_vector: Callable[[Any], Mapping[str, float]] | None = None,
) -> pd.DataFrame:
    """One row per measurement, in the measurements' order (pure: no I/O).

    ``device_vector`` maps a catalog spec to its features
    (default: ``components.devices.device_feature_vector``).
    """
    frame = _joined(measurements, kernels)
    parts = [
        frame.reindex(columns=list(KEY_COLUMNS)),
        frame.reindex(columns=list(TARGET_COLUMNS)),
        frame.reindex(columns=list(LABEL_COLUMNS)),
    ]
    analytical = analytical_features(frame, catalog)
    note = analytical.pop("feature_note")
    missing_kernel = frame["family"].isna().to_numpy()
    note = note.mask(missing_kernel, "kernel_id not in the kernels table")
    parts.append(analytical)
    parts.append(device_features(frame["device_id"], catalog, device_vector))
    static_part = _static_join(frame, static)
    if static_part is not None:
        parts.append(static_part)
    table = pd.concat(parts, axis=1)
    table["config_id"] = _config_ids(frame)
    table["feature_note"] = note.astype("string")
    return table.reset_index(drop=True)


def _chunk_task(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    catalog: Any,
    static: pd.DataFrame | None,
    device_vector: Any,
) -> pd.DataFrame:
    return build_feature_table(measurements, kernels, catalog, static, device_vector)


def build_features_parallel(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    catalog: Any,
    static: pd.DataFrame | None = None,
    n_chunks: int = 4,
    settings: Any = None,
    device_vector: Callable[[Any], Mapping[str, float]] | None = None,
) -> pd.DataFrame:
    """``build_feature_table`` over ``n_chunks`` row chunks as Ray tasks; identical to the serial result."""
    import ray

    from components.platform.config import get_settings
    from components.platform.runtime import ensure_ray

    if n_chunks <= 1 or len(measurements) < 2:
        return build_feature_table(measurements, kernels, catalog, static, device_vector)
    ensure_ray(settings or get_settings())
    remote = ray.remote(num_cpus=1)(_chunk_task)
    kernels_ref, catalog_ref = ray.put(kernels), ray.put(catalog)
    static_ref = ray.put(static)
    bounds = np.linspace(0, len(measurements), min(n_chunks, len(measurements)) + 1).astype(int)
    futures = [
        remote.remote(measurements.iloc[lo:hi], kernels_ref, catalog_ref, static_ref, device_vector)
        for lo, hi in itertools.pairwise(bounds)
        if hi > lo
    ]
    chunks = ray.get(futures)
    table = pd.concat(chunks, ignore_index=True)
    # Chunks may lack optional columns (e.g. no static row matched); align to the union, serial order.
    return _align_dtypes(table)


def _align_dtypes(table: pd.DataFrame) -> pd.DataFrame:
    for column in table.columns:
        if column.startswith(("f_", "m_", "dev_", "s_")) and table[column].dtype == object:
            converted = pd.to_numeric(table[column], errors="coerce")
            if converted.notna().sum() == table[column].notna().sum():
                table[column] = converted
    return table


def write_features(df: pd.DataFrame, path: Path) -> Path:
    """Atomic parquet write: a temporary file in the same folder, then rename."""
    from components.common.atomic import atomic_write

    path = Path(path)
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))
    return path


def coverage_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Rows and rows with a roofline time, per source and family (for the CLI's report)."""
    has = table["f_roofline_time_us"].notna() | table["m_roofline_time_us"].notna()
    return (
        table.assign(_has=has)
        .groupby(["source", "family"], dropna=False)["_has"]
        .agg(rows="size", with_roofline="sum")
        .reset_index()
    )
