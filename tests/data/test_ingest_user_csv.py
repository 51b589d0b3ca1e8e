"""A team's own timings CSV through ingest and GX validation (``kernelcast ingest --source csv``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from components.devices import load_catalog
from components.ingest.base import IngestError
from components.ingest.user_csv import ingest
from kernelcast.settings import PROJECT_ROOT

GOOD = [
    'gemm,"M=4096,N=4096,K=4096",bf16,H100,190.5,',
    'gemm,"M=4096,N=4096,K=4096",bfloat16,H100 SXM,191.0,',  # a repeat: kept, its own run_id
    'rmsnorm,"B=4096,H=8192",bf16,H200,120,0.4',
    'attention,"B=1,S=2048,KV=2048,H=32,HKV=8,D=128",bf16,H100,800,',
]
IMPOSSIBLE = 'gemm,"M=8192,N=8192,K=8192",bf16,H100,1.0,'  # 1.1 PFLOP in 1 us: parses, fails physics (GX)
BAD = {
    'convolution,"N=4",fp32,H100,10,': "unknown op 'convolution'",
    'gemm,"M=4096,N=4096",bf16,H100,100,': "missing K",
    'gemm,"M=4096,N=4096,K=4096",bf17,H100,100,': "unknown dtype 'bf17'",
    'gemm,"M=4096,N=4096,K=4096",bf16,H100,-3,': "duration_us must be a positive number, got '-3'",
    'gemm,"M=4096,N=4096,K=4096",bf16,H100,abc,': "duration_us must be a positive number, got 'abc'",
    'gemm,"M=4096,N=4096,K=4096",bf16,H100,200,1.7': "l2_hit_rate must be a fraction 0-1",
    'gemm,"M=4096;N=4096",bf16,H100,200,': "expected NAME=positive integer",
    'gemm,"M=64,N=64,K=64",bf16,H100,5,0.5,extra': "expected 6 fields, found 7",
}
HEADER = "op,shape,dtype,device,duration_us,l2_hit_rate"


def _ingest(csv: Path, out: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``kernelcast ingest --source csv --from CSV --out OUT`` in its own process, state under ``home``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelcast.cli",
            "ingest",
            "--source",
            "csv",
            "--from",
            str(csv),
            "--out",
            str(out),
        ],
        cwd=PROJECT_ROOT,
        env={"KERNELCAST_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _write(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_good_and_bad_rows_nothing_lost(tmp_path: Path) -> None:
    path = _write(tmp_path / "team_h100.csv", [*GOOD, IMPOSSIBLE, *BAD])
    out = ingest(path, load_catalog())
    assert out.rows_in == len(GOOD) + 1 + len(BAD) == len(out.measurements) + len(out.rejects)
    reasons = out.rejects["reason"].tolist()
    for expected in BAD.values():
        assert sum(expected in r for r in reasons) == 1, (expected, reasons)
    m = out.measurements
    assert set(m["device_id"]) == {"h100-sxm", "h200"}
    assert m["measurement_id"].is_unique and m["run_id"].str.startswith("team_h100.csv").all()
    gemm = m[m["params_json"] == '{"K":4096,"M":4096,"N":4096}']
    assert len(gemm) == 2 and gemm["flops"].eq(2 * 4096**3).all()
    assert gemm["gflops"].tolist() == pytest.approx([2 * 4096**3 / 190.5e3, 2 * 4096**3 / 191.0e3])
    kernels = out.kernels.set_index("kernel_id")
    assert kernels.loc[gemm["kernel_id"].iloc[0], "dtype"] == "bf16"
    assert kernels.loc[gemm["kernel_id"].iloc[0], "family"] == "gemm"
    rms = m[m["params_json"] == '{"B":4096,"H":8192}']
    assert rms["l2_hit_rate"].tolist() == [0.4] and rms["flops"].tolist() == [6 * 4096 * 8192]


def test_units_and_optional_columns(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "ms.csv",
        ['gemm,"M=4096,N=4096,K=4096",bf16,H100,0.25,5,1e8,locked'],
        header="op,shape,dtype,device,duration_ms,n_trials,dram_bytes,clock_mode",
    )
    m = ingest(path, load_catalog()).measurements
    assert m["duration_us"].tolist() == [250.0] and m["n_trials"].tolist() == [5]
    assert m["achieved_gbps"].tolist() == pytest.approx([1e8 / 250e3])
    assert m["clock_mode"].tolist() == ["locked"] and m["profiler"].tolist() == ["user_csv"]


def test_unknown_device_is_one_error_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.csv", [*GOOD, 'gemm,"M=64,N=64,K=64",bf16,NOPE-9000,5,'])
    with pytest.raises(IngestError, match=r"'NOPE-9000' \(1 rows, lines 6.*catalog.yaml"):
        ingest(path, load_catalog())


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("op,shape,dtype,device", "no runtime column"),
        ("op,shape,dtype,device,duration_us,duration_ms", "give the runtime once"),
        ("op,shape,dtype,device,duration_us,l2_hitrate", "unknown column(s) l2_hitrate"),
        ("op,shape,device,duration_us", "missing column(s) dtype"),
    ],
)
def test_bad_columns_name_themselves(tmp_path: Path, header: str, message: str) -> None:
    with pytest.raises(IngestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ingest(_write(tmp_path / "h.csv", ["a,b,c,d,e,f"], header=header), load_catalog())


def test_cli_ingest_then_gx_validation_quarantines_the_impossible_row(tmp_path: Path) -> None:
    """The CLI writes canonical rows (csv partition per file, other sources kept); GX on them quarantines
    the runtime faster than the roofline with the expectation that caught it."""
    from components.validation.run import validate_dir
    from kernelcast.commands.validate import load_params

    path = _write(tmp_path / "team_h100.csv", [*GOOD, IMPOSSIBLE, *BAD])
    other = _write(tmp_path / "team_h200.csv", ['gemm,"M=1024,N=1024,K=1024",bf16,H200,20,'])
    out = tmp_path / "canonical"
    for csv in (other, path, path):  # the second ingest of a file replaces its own rows only
        done = _ingest(csv, out, tmp_path / "home")
        assert done.returncode == 0, done.stderr
    assert "kept csv@team_h200.csv" in done.stdout
    m = pd.read_parquet(out / "measurements.parquet")
    assert len(m) == len(GOOD) + 1 + 1 and len(pd.read_parquet(out / "rejects.parquet")) == len(BAD)
    summary = validate_dir(
        out, tmp_path / "validated", load_catalog(), load_params(PROJECT_ROOT / "params.yaml")
    )
    assert summary["rows_in"] == len(m)
    quarantine = pd.read_parquet(tmp_path / "validated" / "quarantine.parquet")
    assert quarantine["params_json"].tolist() == ['{"K":8192,"M":8192,"N":8192}']
    assert "gflops_within_dtype_peak" in quarantine["failed_expectations"].iloc[0]


def test_cli_unknown_device_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.csv", ['gemm,"M=64,N=64,K=64",bf16,NOPE,5,'])
    done = _ingest(path, tmp_path / "c", tmp_path / "home")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'NOPE'" in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "c" / "measurements.parquet").exists()
