"""Prefect flow: static features of the shipped CUDA kernels, then the feature table.

Each task wraps the same stage function as ``kernelcast features static-table`` / ``features
build`` and the DVC ``static`` / ``features`` stages (``components.features.stage``); the feature
table's row chunks run as Ray tasks when ``chunks`` > 1.

    python -m flows.features
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.features.stage import (
    FeatureInputs,
    FeaturesResult,
    StaticInputs,
    StaticResult,
    features_stage,
    locate_tables,
    static_stage,
)
from components.platform.config import Settings, get_settings


@task(name="static-features")
def static_task(inputs: StaticInputs) -> StaticResult:
    """``static_stage``: NVRTC + nvdisasm features of every shipped CUDA kernel (cached)."""
    return static_stage(inputs)


@task(name="feature-table")
def features_task(inputs: FeatureInputs, settings: Settings | None = None) -> FeaturesResult:
    """``features_stage``: f_*/m_*/dev_*/s_* features, one row per validated measurement."""
    return features_stage(inputs, settings=settings)


def feature_inputs(
    validated_dir: Path, canonical_dir: Path, static_file: Path | None, out_file: Path, chunks: int
) -> FeatureInputs:
    """Inputs of the features task: measurements from ``validated_dir``, kernels from there or canonical."""
    measurements, kernels = locate_tables(validated_dir, canonical_dir)
    return FeatureInputs(measurements, kernels, out_file, static_file, chunks)


@flow(name="features", log_prints=True)
def features_flow(
    validated_dir: str | None = None,
    out_file: str | None = None,
    static: bool = True,
    chunks: int = 4,
    arch: str = "sm_90",
) -> dict[str, Any]:
    """Static table (unless ``static`` is off) then the feature table, under data_dir by default."""
    settings = get_settings()
    static_file = None
    report: dict[str, Any] = {}
    if static:
        built = static_task(
            StaticInputs(
                settings.data_dir / "canonical" / "kernels.parquet",
                settings.data_dir / "static" / "static.parquet",
                settings.datasets_dir,
                arch,
            )
        )
        static_file = built.out_file
        report["static"] = {
            "kernels": built.kernels,
            "features": built.features,
            "out_file": str(built.out_file),
        }
    inputs = feature_inputs(
        Path(validated_dir) if validated_dir else settings.data_dir / "validated",
        settings.data_dir / "canonical",
        static_file,
        Path(out_file) if out_file else settings.data_dir / "features" / "features.parquet",
        chunks,
    )
    table = features_task(inputs, settings)
    report["features"] = {"rows": table.rows, "columns": table.columns, "out_file": str(table.out_file)}
    return report


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    with prefect_server(get_settings()):
        print(features_flow(*argv[:2]))


if __name__ == "__main__":
    main(sys.argv[1:])
