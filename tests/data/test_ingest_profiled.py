"""The adapter for our own H100 measurements (profiled-data/), on the committed run and corrupted copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from components.devices import load_catalog
from components.ingest.base import AdapterOutput, IngestError
from components.ingest.profiled import ingest
from kernelcast.settings import PROJECT_ROOT

RUN = PROJECT_ROOT / "profiled-data" / "h100-sxm-2026-11-22"


def test_committed_h100_run_ingests_completely() -> None:
    out = ingest(RUN, load_catalog())  # the H100 run alone (profiled-data/ holds later runs too)
    m = out.measurements
    assert out.rows_in == len(m) + len(out.rejects)
    assert set(m["device_id"]) == {"h100-sxm"}
    assert m["measurement_id"].notna().all() and m["measurement_id"].is_unique
    by_profiler = m.groupby("profiler").size().to_dict()
    assert by_profiler == {"cuda_event": 390, "ncu": 272}  # 2 x 195 cases; 199 + 73 kernels
    ncu = m[m["profiler"] == "ncu"]
    assert ncu["l2_hit_rate"].between(0, 1).all() and ncu["l1_hit_rate"].between(0, 1).all()
    # An 8192^3 bf16 GEMM executes 2*8192^3 tensor FLOPs plus tile padding (cuBLAS picked 320x128
    # tiles: 8192/320 pads to 8320 rows, +1.6%) -- and no double counting of counter families.
    big = ncu[ncu["params_json"].str.contains('"K":8192,"M":8192,"N":8192')]
    kernels = out.kernels.set_index("kernel_id").loc[big["kernel_id"]]
    bf16 = big[(kernels["dtype"] == "bf16").to_numpy() & big["run_id"].str.endswith("tensor").to_numpy()]
    assert len(bf16) == 1
    assert 2 * 8192**3 <= bf16["flops"].iloc[0] <= 2 * 8192**2 * 8320 * 1.001


def test_mismatched_kernel_order_is_an_error_naming_the_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    lines = (run / "cuda_event.jsonl").read_text().splitlines()
    lines[0], lines[2] = lines[2], lines[0]  # cases out of launch order
    (run / "cuda_event.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=r"ncu_raw\.csv"):
        ingest(tmp_path, load_catalog())


def test_truncated_timing_file_names_file_and_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["ncu"] = []
    (run / "manifest.json").write_text(json.dumps(manifest))
    text = (run / "cuda_event.jsonl").read_text()
    (run / "cuda_event.jsonl").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"cuda_event.jsonl: line \d+"):
        ingest(tmp_path, load_catalog())


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="not found"):
        ingest(tmp_path / "nope", load_catalog())


@pytest.fixture(scope="module")
def every_run() -> AdapterOutput:
    """The whole profiled-data/ folder, ingested once for the tests below (its every run)."""
    return ingest(RUN.parent, load_catalog())


def test_every_committed_run_ingests_with_no_reject(every_run: AdapterOutput) -> None:
    """profiled-data/'s row count, in one place: the first H100 run (662 rows), the H200 runs of
    2026-11-26 (2,108) and of 2026-11-27 (5,319: the wide sweep and KernelBench levels 1-2). The Ray
    ingest-validate flow (tests/integration/test_services.py) runs on the H100 run alone."""
    assert every_run.rows_in == 8089 == len(every_run.measurements) and len(every_run.rejects) == 0
    assert every_run.measurements["measurement_id"].is_unique


def test_committed_h200_runs_ingest_and_the_base_clock_repeat_stays_out(every_run: AdapterOutput) -> None:
    """The H200 runs of 2026-11-26 (profiled-data/PROVENANCE.md): every row ingests as an H200 row, the llm
    suite's attention and fp8 GEMM rows among them; the repeat that ran at base clock (a killed ncu left the
    clocks locked) sits one folder deeper and is not read."""
    out = every_run
    m = out.measurements
    h200 = m[m["run_id"].str.startswith("h200-20261126")]
    assert len(h200) == 2108 and set(h200["device_id"]) == {"h200"}
    assert not m["run_id"].str.contains("ops-run2|kernelbench-level1|baseclock").any()
    kernels = out.kernels.set_index("kernel_id").loc[h200["kernel_id"]]
    assert {("attention", "bf16"), ("gemm", "fp8")} <= set(
        zip(kernels["family"], kernels["dtype"], strict=True)
    )
    assert set(h200["clock_mode"]) == {"boost", "locked"}  # CUDA events at boost, Nsight Compute locked


def test_committed_h200_wide_sweep_ingests_every_family_and_dtype_it_measured(
    every_run: AdapterOutput,
) -> None:
    """The H200 runs of 2026-11-27 (profiled-data/PROVENANCE.md): the wide sweep's 5,199 op rows, with the
    families and dtypes the first runs lacked (cuDNN convolutions, int8 GEMMs), and 120 KernelBench
    programs."""
    out = every_run
    m = out.measurements
    h200 = m[m["run_id"].str.startswith("h200-20261127")]
    assert h200.groupby("run_id").size().to_dict() == {
        "h200-20261127-wide": 5199,
        "h200-20261127-kernelbench-l2": 96,
        "h200-20261127-kernelbench-l1": 24,
    }
    assert set(h200["device_id"]) == {"h200"} and set(h200["clock_mode"]) == {"boost"}
    kernels = out.kernels.set_index("kernel_id").loc[h200["kernel_id"]]
    pairs = set(zip(kernels["family"], kernels["dtype"], strict=True))
    assert {
        ("conv", "fp32"),
        ("conv", "bf16"),
        ("gemm", "int8"),
        ("gemm", "fp8"),
        ("attention", "fp16"),
    } <= pairs
