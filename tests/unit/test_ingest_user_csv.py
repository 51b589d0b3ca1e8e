"""The ``csv`` source's parsing rules: shapes, dtypes, op names, columns (no files beyond tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.ingest.base import IngestError
from components.ingest.registry import SOURCES, default_root
from components.ingest.run import _run_of
from components.ingest.user_csv import OPS, canonical_row_dtype, csv_files, parse_shape, shape_problem


def test_ops_are_the_predict_vocabulary() -> None:
    from components.serving.query import FAMILY_OF_OP

    assert OPS == FAMILY_OF_OP


def test_every_shape_predict_accepts_is_accepted() -> None:
    from components.serving.query import SHAPE_DIMS

    for op, (family, _) in OPS.items():
        for dims in SHAPE_DIMS[family]:
            assert shape_problem(family, dict.fromkeys(dims, 8)) is None, (op, dims)


def test_parse_shape() -> None:
    assert parse_shape("M=4096, N=8,K=16") == {"M": 4096, "N": 8, "K": 16}
    assert "positive integer" in parse_shape("M=0,N=1,K=1")
    assert "positive integer" in parse_shape("M=4096;N=4")
    assert "twice" in parse_shape("M=1,M=2")
    assert "empty" in parse_shape("")


def test_shape_problem_names_missing_and_unknown_dimensions() -> None:
    problem = shape_problem("gemm", {"M": 1, "N": 2, "X": 3})
    assert "missing K" in problem and "unknown X" in problem
    assert "B,H or N" in shape_problem("elementwise", {"M": 3}) or "N or B,H" in shape_problem(
        "elementwise", {"M": 3}
    )
    assert shape_problem("attention", {"B": 1, "S": 1, "KV": 8, "H": 8, "HKV": 8, "D": 64}) is None


def test_dtypes() -> None:
    assert canonical_row_dtype("bfloat16") == "bf16"
    assert canonical_row_dtype(" FP8_block ") == "fp8_block"
    assert canonical_row_dtype("bf17") is None
    assert canonical_row_dtype("") is None


def test_csv_has_no_default_location_and_all_skips_it() -> None:
    assert "csv" in SOURCES
    with pytest.raises(ValueError, match="--from FILE"):
        default_root("csv", Path("/nowhere"))


def test_csv_files(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no such file"):
        csv_files(tmp_path / "x.csv")
    with pytest.raises(IngestError, match=r"no \*\.csv"):
        csv_files(tmp_path)
    (tmp_path / "b.csv").write_text("x")
    (tmp_path / "a.csv").write_text("x")
    assert [p.name for p in csv_files(tmp_path)] == ["a.csv", "b.csv"]


def test_a_root_file_is_its_own_partition() -> None:
    import pandas as pd

    files = pd.Series(["run1/chunks/0.jsonl", "mine.csv", ""])
    assert _run_of(files, pd.Series(["r", "mine.csv/rep1", "rid"])).tolist() == ["run1", "mine.csv", "rid"]
    assert _run_of(files).tolist() == ["run1", "mine.csv", ""]
