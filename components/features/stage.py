"""The static and features stages: static features of the shipped CUDA kernels, and the feature table.

``static_stage`` and ``features_stage`` are the functions behind ``kernelcast features static-table``
/ ``kernelcast features build``, the DVC ``static`` / ``features`` stages and the tasks of
``flows/features.py``. ``features_from_tables`` is the in-memory core, also used by the evaluate
stage on a freshly ingested source.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from components.common.atomic import atomic_write

if TYPE_CHECKING:
    from components.platform.config import Settings


# --------------------------------------------------------------------------- static


# The sources whose kernels the static stage compiles: gpuFLOPBench's CUDA programs and benchmark_hub's HIP
# tuning configurations.
STATIC_SOURCES: tuple[str, ...] = ("gpuflopbench", "benchmark_hub")


@dataclass(frozen=True)
class StaticInputs:
    # kernels.parquet (measurements.parquet beside it: the HIP configurations); None: read the STATIC_SOURCES
    # among ``sources`` from ``datasets_dir`` with their ingest adapters, so the stage needs no ingest
    kernels_file: Path | None
    out_file: Path
    datasets_dir: Path  # where the kernels' CUDA sources live
    arch: str = "sm_90"
    sources: tuple[str, ...] = STATIC_SOURCES


@dataclass(frozen=True)
class StaticResult:
    out_file: Path
    kernels: int
    features: int
    coverage: dict[str, Any]


def static_stage(inputs: StaticInputs) -> StaticResult:
    """Compile every shipped CUDA kernel (NVRTC + nvdisasm, cached) and write its s_* features."""
    from components.features.static.table import build_static_table

    kernels, measurements = _static_tables(inputs)
    table, coverage = build_static_table(kernels, inputs.datasets_dir, inputs.arch)
    hip_rows, hip_coverage = _hip_config_rows(kernels, measurements, inputs.datasets_dir)
    coverage["hip"] = hip_coverage
    if not hip_rows.empty:
        table = pd.concat([table, hip_rows], ignore_index=True)
    atomic_write(inputs.out_file, lambda tmp: table.to_parquet(tmp, index=False))
    return StaticResult(Path(inputs.out_file), len(table), table.shape[1] - 1, coverage)


def _static_tables(inputs: StaticInputs) -> tuple[pd.DataFrame, Any]:
    """(kernels, measurements file or frame, or None): from ``kernels_file`` and the measurements beside it,
    or -- ``kernels_file`` None -- the static sources read from the datasets by the ingest adapters and merged
    as ingest merges them, so their kernel ids and row order are the canonical tables' (the stage then runs
    beside ingest: it reads no ingest output)."""
    if inputs.kernels_file is None:
        from components.ingest.registry import default_root
        from components.ingest.schema import KERNEL_COLUMNS, conform
        from components.ingest.stage import ingest_tables

        chosen = [s for s in STATIC_SOURCES if s in inputs.sources]
        if not chosen:
            return conform(pd.DataFrame(), KERNEL_COLUMNS), None
        result = ingest_tables(chosen, {s: default_root(s, inputs.datasets_dir) for s in chosen})
        return result.kernels, result.measurements
    if not Path(inputs.kernels_file).is_file():
        raise FileNotFoundError(
            f"kernels table not found: {inputs.kernels_file} -- run `kernelcast ingest` first"
        )
    return pd.read_parquet(inputs.kernels_file), Path(inputs.kernels_file).parent / "measurements.parquet"


def _hip_config_rows(
    kernels: pd.DataFrame, measurements: Any, datasets_dir: Path
) -> tuple[pd.DataFrame, dict]:
    """benchmark_hub's HIP tuning configurations (a hash-chosen sample, static.hip_table), or nothing
    -- with the reason in the coverage -- where no HIP compiler is installed. ``measurements``: a frame, the
    measurements.parquet beside the kernels table, or None (no benchmark_hub source)."""
    from components.features.static.hip import hip_available
    from components.features.static.hip_table import HIP_CONFIG_SHARE, build_hip_config_table

    if not hip_available():
        return pd.DataFrame(), {"skipped": "no HIP compiler (apt-get install hipcc rocm-device-libs)"}
    columns = ["kernel_id", "params_json", "device_id", "source"]
    if isinstance(measurements, Path):
        if not measurements.is_file():
            return pd.DataFrame(), {"skipped": f"no {measurements} beside the kernels table"}
        measurements = pd.read_parquet(measurements, columns=columns)
    elif measurements is None:
        measurements = pd.DataFrame(columns=columns)
    from components.devices import load_catalog

    return build_hip_config_table(
        measurements[columns], kernels, load_catalog(), datasets_dir, HIP_CONFIG_SHARE, workers=2
    )


# --------------------------------------------------------------------------- features


@dataclass(frozen=True)
class FeatureInputs:
    measurements_file: Path
    kernels_file: Path
    out_file: Path
    static_file: Path | None = None  # s_* static features by kernel_id; None: no static features
    chunks: int = 1  # row chunks computed as Ray tasks (1 = in-process)


@dataclass(frozen=True)
class FeaturesResult:
    out_file: Path
    rows: int
    columns: int
    coverage: pd.DataFrame  # rows and rows with a roofline time, per source and family


def locate_tables(folder: Path, canonical_dir: Path, hint: str = "") -> tuple[Path, Path]:
    """(measurements, kernels) files: measurements from ``folder``, kernels from the same folder or
    the canonical one. ``hint`` is appended to the error when the measurements are missing."""
    measurements = Path(folder) / "measurements.parquet"
    if not measurements.is_file():
        raise FileNotFoundError(f"validated measurements not found: {measurements}{hint}")
    for candidate in (Path(folder) / "kernels.parquet", Path(canonical_dir) / "kernels.parquet"):
        if candidate.is_file():
            return measurements, candidate
    raise FileNotFoundError(f"kernels table not found in {folder} or {canonical_dir}")


def features_from_tables(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    catalog: Any = None,
    static: pd.DataFrame | None = None,
    chunks: int = 1,
    settings: Settings | None = None,
) -> pd.DataFrame:
    """The feature table (f_*/m_*/dev_*/s_*, one row per measurement) from tables in memory;
    ``chunks`` > 1 computes row chunks as Ray tasks (identical result)."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table, build_features_parallel

    catalog = catalog if catalog is not None else load_catalog()
    if chunks > 1:
        return build_features_parallel(
            measurements, kernels, catalog, static, n_chunks=chunks, settings=settings
        )
    return build_feature_table(measurements, kernels, catalog, static)


def features_stage(
    inputs: FeatureInputs, catalog: Any = None, settings: Settings | None = None
) -> FeaturesResult:
    """Join measurements with kernels, compute every feature family and write the feature table."""
    from components.features.build import coverage_summary, write_features

    if inputs.static_file is not None and not Path(inputs.static_file).is_file():
        raise FileNotFoundError(f"static features file not found: {inputs.static_file}")
    for path in (inputs.measurements_file, inputs.kernels_file):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: not found")
    static = pd.read_parquet(inputs.static_file) if inputs.static_file else None
    table = features_from_tables(
        pd.read_parquet(inputs.measurements_file),
        pd.read_parquet(inputs.kernels_file),
        catalog,
        static,
        inputs.chunks,
        settings,
    )
    out = write_features(table, inputs.out_file)
    return FeaturesResult(Path(out), len(table), table.shape[1], coverage_summary(table))
