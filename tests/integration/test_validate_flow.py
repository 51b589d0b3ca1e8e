"""The validate flow for real: a Prefect flow run whose task runs the validation as a Ray job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.test_validation import real_excerpt

pytestmark = pytest.mark.slow


def test_validate_flow_runs_on_ray(tmp_path: Path, prefect_harness: str, local_ray: None) -> None:
    from flows.validate import validate_flow

    measurements, kernels = real_excerpt()
    bad = measurements.copy()
    bad.loc[0, "duration_us"] = 0.0  # one real defect planted: it must reach the quarantine
    canonical = tmp_path / "canonical"
    canonical.mkdir()
    bad.to_parquet(canonical / "measurements.parquet", index=False)
    kernels.to_parquet(canonical / "kernels.parquet", index=False)
    out, summary_path = tmp_path / "validated", tmp_path / "summary.json"

    summary = validate_flow(str(canonical), str(out), str(summary_path))

    assert summary["worker_pid"] != os.getpid(), "validation did not run in a Ray worker"
    assert summary["rows_in"] == len(bad) == summary["rows_valid"] + summary["rows_quarantined"]
    assert summary["by_expectation"].get("duration_us_positive") == 1
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    assert "duration_us_positive" in json.loads(quarantine["failed_expectations"].iloc[0])
    assert len(pd.read_parquet(out / "measurements.parquet")) == summary["rows_valid"]
    assert json.loads(summary_path.read_text())["rows_in"] == summary["rows_in"]
    assert (out / "report.html").is_file()
