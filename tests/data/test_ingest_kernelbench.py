"""KernelBench adapter: problem-set pairing, per-entry hardware, failed runs and corrupted files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.devices import load_catalog
from components.ingest.base import IngestError
from components.ingest.kernelbench import ingest
from kernelcast.settings import DEFAULT_DATASETS_DIR

ROOT = DEFAULT_DATASETS_DIR / "kernelbench"


def _tree(tmp_path: Path, timing: dict) -> Path:
    root = tmp_path / "kernelbench"
    problem = ROOT / "KernelBench/level1/1_Square_matrix_multiplication_.py"
    (root / "KernelBench/level1").mkdir(parents=True)
    (root / "KernelBench/level1" / problem.name).write_text(problem.read_text())
    (root / "results/timing/H100_Modal").mkdir(parents=True)
    (root / "results/timing/H100_Modal/baseline_time_torch.json").write_text(json.dumps(timing))
    return root


def test_full_bundle_balances_and_uses_entry_hardware() -> None:
    out = ingest(ROOT, load_catalog())
    assert out.rows_in == len(out.measurements) + len(out.rejects)
    assert not out.measurements.duplicated(["kernel_id", "device_id", "params_json", "run_id"]).any()
    # The lowercase H100_modal folder holds H200 entries: the hardware field wins over the folder.
    mixed = out.measurements[out.measurements["upstream_file"].str.contains("H100_modal/")]
    assert "h200" in set(mixed["device_id"])
    assert (out.rejects["reason"].str.startswith("unusable file")).sum() > 0


def test_excerpt_units_source_and_null_entry(tmp_path: Path) -> None:
    entry = {
        "mean": 2.5,
        "std": 0.01,
        "min": 2.4,
        "max": 2.7,
        "num_trials": 100,
        "hardware": "NVIDIA H100 80GB HBM3",
        "device": "cuda:0",
    }
    root = _tree(tmp_path, {"level1": {"1_Square_matrix_multiplication_.py": entry, "2_Missing.py": None}})
    out = ingest(root, load_catalog())
    row = out.measurements.iloc[0]
    assert row["duration_us"] == pytest.approx(2500.0) and row["device_id"] == "h100-sxm"
    assert "torch.matmul" in out.kernels.iloc[0]["source_text"]
    assert out.rejects.iloc[0]["reason"] == "run failed (null)"


def test_broken_json_names_the_file(tmp_path: Path) -> None:
    root = _tree(tmp_path, {})
    (root / "results/timing/H100_Modal/baseline_time_torch.json").write_text(
        '{"level1": {"1_x.py": {"mean": 1'
    )
    with pytest.raises(IngestError, match=r"baseline_time_torch\.json"):
        ingest(root, load_catalog())
