"""Validation suites on a real-data excerpt with planted defects (real GX, real catalog).

The excerpt is kernelcast's own H100 profile (``profiled-data/``: CUDA-event + Nsight Compute
rows, the only source with hit rates and FLOP/byte counts) plus the first gpuFLOPBench rows when
that adapter is present. Each planted row is a copy of a clean ncu row with one defect.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.ingest.schema import MEASUREMENT_COLUMNS, with_measurement_ids
from tests.conftest import H100_RUN

PARAMS: dict = {
    "validate": {
        "bandwidth_tolerance": 1.10,
        "flops_tolerance": 1.10,
        "arith_intensity_rel_tol": 0.05,
        "max_failure_share": 0.10,
        "drift_threshold": 0.25,
    }
}


@cache
def _catalog():
    from components.devices import load_catalog

    return load_catalog()


@cache
def _excerpt() -> tuple[pd.DataFrame, pd.DataFrame]:
    from components.ingest import profiled

    out = profiled.ingest(H100_RUN, _catalog())
    measurements = out.measurements
    if measurements["measurement_id"].isna().all():  # ids are filled by the ingest driver, not the adapter
        measurements = with_measurement_ids(measurements)
    return measurements, out.kernels


def real_excerpt() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernels) of real measurements; copies, so tests may modify them."""
    measurements, kernels = _excerpt()
    return measurements.copy(), kernels.copy()


@cache
def _clean() -> tuple[pd.DataFrame, pd.DataFrame]:
    from components.validation import validate_measurements

    measurements, kernels = real_excerpt()
    result = validate_measurements(measurements, _catalog(), PARAMS, kernels)
    assert result.summary["failure_share"] < 0.05, result.summary
    return result.valid, kernels


def clean_excerpt() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The excerpt's rows that pass the suite (asserted to be nearly all of them); copies."""
    valid, kernels = _clean()
    return valid.copy(), kernels.copy()


def _planted(clean: pd.DataFrame, kernels: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Rows with one defect each, and the expectation each must fail (keyed by measurement_id)."""
    catalog = _catalog()
    ncu = clean[(clean["profiler"] == "ncu") & clean["flops"].notna() & (clean["dram_bytes"] > 0)]
    base = ncu.iloc[0]
    spec = catalog.get(base["device_id"])
    from components.devices import PRECISIONS

    # Twice the device's best rate at any precision is above the ceiling of whatever the kernel's dtype is.
    best_peak_gflops = max(spec.peak_flops(p, None) for p in PRECISIONS if spec.has_pipe(p, None)) / 1e9
    plants: dict[str, tuple[dict, str]] = {
        "duration0": ({"duration_us": 0.0}, "duration_us_positive"),
        "hit15": ({"l2_hit_rate": 1.5}, "l2_hit_rate_in_0_1"),
        "l1neg": ({"l1_hit_rate": -0.2}, "l1_hit_rate_in_0_1"),
        "bw10x": ({"achieved_gbps": 10 * spec.dram_gbps}, "achieved_gbps_within_dram_peak"),
        "gflops2x": ({"gflops": 2 * best_peak_gflops}, "gflops_within_dtype_peak"),
        "fp32_2x": ({"fp32_gflops": 2 * spec.peak_flops("fp32") / 1e9}, "fp32_gflops_within_fp32_peak"),
        "fp64_2x": ({"fp64_gflops": 2 * spec.peak_flops("fp64") / 1e9}, "fp64_gflops_within_fp64_peak"),
        "unknown_device": ({"device_id": "no-such-gpu"}, "device_id_in_catalog"),
        "ai3x": ({"arith_intensity": 3 * base["arith_intensity"]}, "arith_intensity_consistent"),
        "null_kernel": ({"kernel_id": None}, "not_null_kernel_id"),
        "null_device": ({"device_id": None}, "not_null_device_id"),
        "null_source": ({"source": None}, "not_null_source"),
        "trials0": ({"n_trials": 0}, "n_trials_at_least_1"),
        "bytes_neg": ({"dram_bytes": -1.0}, "dram_bytes_nonnegative"),
        "class_bad": ({"roofline_class": "memory"}, "roofline_class_in_set"),
    }
    rows, reasons = [], {}
    for tag, (changes, reason) in plants.items():
        row = base.copy()
        for column, value in changes.items():
            row[column] = value
        row["measurement_id"] = f"planted-{tag}"
        row["run_id"] = f"planted-{tag}"  # keep the compound key unique too
        rows.append(row)
        reasons[row["measurement_id"]] = reason
    duplicate = ncu.iloc[1].copy()  # an exact second copy of a clean row: both copies are ambiguous
    rows.append(duplicate)
    reasons[duplicate["measurement_id"]] = "unique_measurement_id"
    frame = pd.DataFrame(rows)
    for column, dtype in MEASUREMENT_COLUMNS.items():
        frame[column] = frame[column].astype(dtype)
    return frame, reasons


def test_clean_real_excerpt_passes() -> None:
    from components.validation import validate_measurements

    clean, kernels = clean_excerpt()
    result = validate_measurements(clean, _catalog(), PARAMS, kernels)
    assert result.summary["rows_quarantined"] == 0, result.summary["by_expectation"]
    assert result.summary["passed"] and result.summary["table_failures"] == []
    assert len(result.valid) == len(clean)
    assert list(result.valid.columns) == list(MEASUREMENT_COLUMNS)


def test_every_planted_row_is_quarantined_with_its_reason() -> None:
    from components.validation import FAILED_COLUMN, validate_measurements

    clean, kernels = clean_excerpt()
    planted, reasons = _planted(clean, kernels)
    frame = pd.concat([clean, planted], ignore_index=True)
    result = validate_measurements(frame, _catalog(), PARAMS, kernels)
    s = result.summary

    assert s["rows_in"] == len(frame) == s["rows_valid"] + s["rows_quarantined"]
    assert len(result.valid) + len(result.quarantine) == len(frame)
    failed = {}
    for mid, text in zip(result.quarantine["measurement_id"], result.quarantine[FAILED_COLUMN], strict=True):
        failed.setdefault(mid, []).append(json.loads(text))
    for mid, reason in reasons.items():
        assert mid in failed, f"planted row {mid} ({reason}) was not quarantined"
        assert all(reason in names for names in failed[mid]), (mid, failed[mid])
    # The planted null measurement ids are none; the duplicate's original copy is quarantined too.
    dup_id = planted["measurement_id"].iloc[-1]
    assert len(failed[dup_id]) == 2
    assert not result.valid["measurement_id"].isin(list(reasons)).any()
    # Clean rows other than the duplicated one stay valid.
    assert s["rows_quarantined"] == len(planted) + 1
    for reason in set(reasons.values()):
        assert s["by_expectation"][reason] >= 1
    source = str(clean["source"].iloc[0])
    assert s["by_source"][source]["rows_quarantined"] == len(planted)  # the null-source row is counted apart
    assert s["by_source"]["<null>"]["by_expectation"]["not_null_source"] == 1


def test_null_measurement_id_is_quarantined() -> None:
    from components.validation import validate_measurements

    clean, kernels = clean_excerpt()
    frame = clean.copy()
    frame.loc[3, "measurement_id"] = None
    result = validate_measurements(frame, _catalog(), PARAMS, kernels)
    assert result.summary["by_expectation"] == {"not_null_measurement_id": 1}


def test_broken_schema_quarantines_every_row() -> None:
    from components.validation import validate_measurements

    clean, kernels = clean_excerpt()
    result = validate_measurements(clean.drop(columns=["l2_hit_rate"]), _catalog(), PARAMS, kernels)
    assert result.summary["rows_valid"] == 0
    assert "schema_columns" in result.summary["table_failures"]
    assert not result.summary["passed"]


def test_wrong_dtype_is_a_table_failure() -> None:
    from components.validation import validate_measurements

    clean, kernels = clean_excerpt()
    frame = clean.assign(n_trials=clean["n_trials"].astype("float64"))
    result = validate_measurements(frame, _catalog(), PARAMS, kernels)
    assert "dtype_n_trials" in result.summary["table_failures"]
    assert result.summary["rows_quarantined"] == len(frame)


def test_tolerances_come_from_params() -> None:
    from components.validation import validate_measurements

    clean, kernels = clean_excerpt()
    strict = {"validate": {**PARAMS["validate"], "bandwidth_tolerance": 1e-6}}
    result = validate_measurements(clean, _catalog(), strict, kernels)
    with_bw = clean["achieved_gbps"].fillna(0) > 0
    assert result.summary["by_expectation"]["achieved_gbps_within_dram_peak"] == int(with_bw.sum())


def test_kernels_suite_flags_duplicates_and_bad_dtype() -> None:
    from components.validation import validate_kernels

    _, kernels = real_excerpt()
    kernels = kernels.reset_index(drop=True)
    bad = pd.concat([kernels, kernels.iloc[[0]]], ignore_index=True)
    bad.loc[1, "dtype"] = "fp128"
    result = validate_kernels(bad, PARAMS)
    assert result.summary["by_expectation"] == {"unique_kernel_id": 2, "dtype_in_set": 1}
    assert validate_kernels(kernels, PARAMS).summary["rows_quarantined"] == 0


def test_write_validation_outputs(tmp_path: Path) -> None:
    from components.validation import validate_measurements, write_validation

    clean, kernels = clean_excerpt()
    planted, _ = _planted(clean, kernels)
    result = validate_measurements(
        pd.concat([clean, planted], ignore_index=True), _catalog(), PARAMS, kernels
    )
    paths = write_validation(result, tmp_path / "validated")
    valid = pd.read_parquet(paths["measurements.parquet"])
    quarantine = pd.read_parquet(paths["quarantine.parquet"])
    assert (
        len(valid) == result.summary["rows_valid"] and len(quarantine) == result.summary["rows_quarantined"]
    )
    assert json.loads(paths["summary.json"].read_text())["rows_in"] == result.summary["rows_in"]
    page = paths["report.html"].read_text()
    assert "duration_us_positive" in page and "<table>" in page
    assert not list((tmp_path / "validated").glob(".*tmp"))  # no temp files left behind


# ---------------------------------------------------------------------------------------------
# CLI


def _write_canonical(folder: Path, measurements: pd.DataFrame, kernels: pd.DataFrame) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    measurements.to_parquet(folder / "measurements.parquet", index=False)
    kernels.to_parquet(folder / "kernels.parquet", index=False)
    return folder


@pytest.fixture()
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from typer.testing import CliRunner

    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["validate", *args])


def test_cli_passes_on_clean_data(tmp_path: Path, cli) -> None:
    clean, kernels = clean_excerpt()
    src = _write_canonical(tmp_path / "canonical", clean, kernels)
    out, summary = tmp_path / "validated", tmp_path / "summary.json"
    result = cli("--in", str(src), "--out", str(out), "--summary", str(summary))
    assert result.exit_code == 0, result.output
    assert "total" in result.output and (out / "report.html").is_file()
    assert json.loads(summary.read_text())["passed"] is True


def test_cli_exit_1_when_too_many_rows_fail(tmp_path: Path, cli) -> None:
    clean, kernels = clean_excerpt()
    bad = clean.copy()
    n_bad = int(len(bad) * 0.2)
    bad.loc[bad.index[:n_bad], "duration_us"] = -1.0
    src = _write_canonical(tmp_path / "canonical", bad, kernels)
    result = cli("--in", str(src), "--out", str(tmp_path / "validated"))
    assert result.exit_code == 1
    assert "max_failure_share" in result.output


def test_cli_exit_2_on_missing_input(tmp_path: Path, cli) -> None:
    result = cli("--in", str(tmp_path / "nowhere"), "--out", str(tmp_path / "validated"))
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------
# Drift


def test_drift_flags_a_shift_and_not_an_identical_table() -> None:
    from components.validation import drift_report
    from components.validation.drift import with_family

    clean, kernels = clean_excerpt()
    frame = with_family(clean, kernels)
    metrics = ["duration_us", "achieved_gbps"]
    same = drift_report(frame, frame.copy(), metrics, threshold=0.25)
    assert not same["drifted"]
    assert all(r["psi"] == pytest.approx(0.0, abs=1e-9) for r in same["results"] if r["psi"] is not None)
    shifted = frame.assign(duration_us=frame["duration_us"] * 4.0)
    report = drift_report(frame, shifted, metrics, threshold=0.25)
    assert report["drifted"] and "duration_us/<all>" in report["drifted_pairs"]
    assert not any(p.startswith("achieved_gbps/") for p in report["drifted_pairs"])


def test_drift_psi_is_small_for_two_samples_of_one_distribution() -> None:
    from components.validation.drift import ks_statistic, population_stability_index

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=5000), rng.normal(size=5000)
    assert population_stability_index(a, b) < 0.02 and ks_statistic(a, b) < 0.05
    assert population_stability_index(a, b + 1.0) > 0.25
