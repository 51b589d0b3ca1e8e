"""The static stage reads its sources (gpuFLOPBench kernels, benchmark_hub configurations) from the datasets
with the ingest adapters, so it runs beside ingest: the tables it reads are those sources' rows of the
canonical tables -- same kernel ids, columns and order -- whichever other sources the ingest merges."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from components.features.stage import STATIC_SOURCES, StaticInputs, _static_tables
from components.ingest.registry import default_root
from components.ingest.stage import ingest_tables
from kernelcast.settings import DEFAULT_DATASETS_DIR


def _rows_of(frame: pd.DataFrame, sources: tuple[str, ...]) -> pd.DataFrame:
    return frame[frame["source"].isin(sources)].reset_index(drop=True)


def test_static_tables_are_the_canonical_rows_of_its_sources(tmp_path: Path) -> None:
    kernels, measurements = _static_tables(
        StaticInputs(None, tmp_path / "static.parquet", DEFAULT_DATASETS_DIR)
    )
    # an ingest of more sources (kernelbench merges between them by kernel id and by source)
    wider = ["kernelbench", *STATIC_SOURCES]
    merged = ingest_tables(wider, {s: default_root(s, DEFAULT_DATASETS_DIR) for s in wider})
    assert set(kernels["source"]) == set(STATIC_SOURCES) == set(measurements["source"])
    pd.testing.assert_frame_equal(kernels, _rows_of(merged.kernels, STATIC_SOURCES))
    pd.testing.assert_frame_equal(measurements, _rows_of(merged.measurements, STATIC_SOURCES))


def test_only_the_static_sources_that_ingest_reads_are_read(tmp_path: Path) -> None:
    out = tmp_path / "static.parquet"
    kernels, measurements = _static_tables(
        StaticInputs(None, out, DEFAULT_DATASETS_DIR, sources=("neusight",))
    )
    assert kernels.empty and "kernel_id" in kernels.columns and measurements is None
    kernels, measurements = _static_tables(
        StaticInputs(None, out, DEFAULT_DATASETS_DIR, sources=("gpuflopbench", "neusight"))
    )
    assert set(kernels["source"]) == {"gpuflopbench"} == set(measurements["source"])
