"""The ingest runner (merge, deterministic writes, summary, upstream fetch), registry and CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from components.ingest.base import AdapterOutput, IngestError
from components.ingest.registry import SOURCES, UPSTREAMS, check_source, get_adapter
from components.ingest.run import (
    REJECTED,
    fetch_upstream,
    merge_outputs,
    summarise,
    summary_dict,
    unknown_devices,
    write_canonical,
)
from components.ingest.schema import KERNEL_COLUMNS, MEASUREMENT_COLUMNS, REJECT_COLUMNS, conform
from kernelcast.settings import DEFAULT_DATASETS_DIR


def _output(source: str, rows: list[tuple[str, str, float]], rejects: int = 0) -> AdapterOutput:
    """A small adapter output: (kernel_id, device_id, duration_us) rows plus ``rejects`` bad rows."""
    measurements = pd.DataFrame(
        {
            "kernel_id": [k for k, _, _ in rows],
            "device_id": [d for _, d, _ in rows],
            "device_name_raw": [d.upper() for _, d, _ in rows],
            "source": source,
            "upstream_file": "f.csv",
            "upstream_row": list(range(len(rows))),
            "profiler": "cuda_event",
            "clock_mode": "unknown",
            "run_id": "r",
            "params_json": [json.dumps({"i": i}) for i in range(len(rows))],
            "duration_us": [t for _, _, t in rows],
        }
    )
    kernels = pd.DataFrame(
        {
            "kernel_id": sorted({k for k, _, _ in rows}),
            "source": source,
            "family": "gemm",
            "op": "gemm",
            "dtype": "fp32",
            "language": "op",
        }
    )
    bad = pd.DataFrame(
        {
            "source": source,
            "upstream_file": "f.csv",
            "upstream_row": range(len(rows), len(rows) + rejects),
            "reason": "unknown device 'Z9'",
            "raw": "x",
        }
    )
    return AdapterOutput(
        source,
        conform(measurements, MEASUREMENT_COLUMNS),
        conform(kernels, KERNEL_COLUMNS),
        conform(bad, REJECT_COLUMNS),
        len(rows) + rejects,
    )


def _outputs() -> list[AdapterOutput]:
    return [
        _output("pipeweave", [("k1", "h20", 3.0), ("k2", "h20", 4.0), ("k1", "h800", 2.0)], rejects=2),
        _output("neusight", [("k3", "t4", 10.0), ("k3", "p4", 20.0)]),
    ]


def test_merge_fills_unique_ids_and_sorts() -> None:
    result = merge_outputs(_outputs())
    m = result.measurements
    assert m["measurement_id"].notna().all() and m["measurement_id"].is_unique
    assert m["source"].tolist() == ["neusight"] * 2 + ["pipeweave"] * 3
    assert result.kernels["kernel_id"].tolist() == ["k1", "k2", "k3"]
    assert result.rows_in == {"pipeweave": 5, "neusight": 2}


def test_merge_refuses_a_shared_measurement_key() -> None:
    twice = _output("neusight", [("k3", "t4", 10.0)])
    with pytest.raises(IngestError, match="share a measurement key"):
        merge_outputs([twice, _output("neusight", [("k3", "t4", 11.0)])])


def test_merge_checks_balance() -> None:
    broken = _output("neusight", [("k3", "t4", 10.0)])
    broken.rows_in = 5
    with pytest.raises(AssertionError, match="rows_in 5"):
        merge_outputs([broken])


def test_write_canonical_is_byte_identical_and_order_independent(tmp_path: Path) -> None:
    first = write_canonical(merge_outputs(_outputs()), tmp_path / "a")
    second = write_canonical(merge_outputs(list(reversed(_outputs()))), tmp_path / "b")
    for name, path in first.items():
        assert path.read_bytes() == second[name].read_bytes(), name
    assert not list((tmp_path / "a").glob(".*"))  # no temp files left behind
    back = pd.read_parquet(first["measurements.parquet"])
    assert list(back.columns) == list(MEASUREMENT_COLUMNS) and len(back) == 5


def test_summary_counts_rows_and_rejects_per_device() -> None:
    result = merge_outputs(_outputs())
    table = summarise(result)
    got = {(s, d): (r, j) for s, d, r, j in table.itertuples(index=False)}
    assert got == {
        ("neusight", "p4"): (1, 0),
        ("neusight", "t4"): (1, 0),
        ("pipeweave", "h20"): (2, 0),
        ("pipeweave", "h800"): (1, 0),
        ("pipeweave", REJECTED): (0, 2),
    }
    summary = summary_dict(result)
    assert summary["rows_in"] == summary["measurements"] + summary["rejects"] == 7
    assert summary["by_source"]["pipeweave"]["by_device"] == {"h20": 2, "h800": 1}
    assert summary["by_source"]["neusight"]["upstream"]["commit"] == UPSTREAMS["neusight"].commit
    assert unknown_devices(result) == ["Z9"]


def test_registry_names_and_pins() -> None:
    assert SOURCES == (
        "neusight",
        "gpuflopbench",
        "kernelbench",
        "benchmark_hub",
        "pipeweave",
        "aiconfigurator",
        "aiter",
        "kernelcast",
        "csv",
    )
    assert set(UPSTREAMS) == set(SOURCES) - {"kernelcast", "csv"}  # our own data has no upstream
    assert callable(get_adapter("kernelcast"))
    assert all(len(u.commit) == 40 and int(u.commit, 16) >= 0 for u in UPSTREAMS.values())
    assert callable(get_adapter("neusight"))
    with pytest.raises(ValueError, match="valid sources: neusight, gpuflopbench"):
        check_source("nope")


# ----------------------------------------------------------------------------------------------
# Upstream fetch, on a local repository (no network)
# ----------------------------------------------------------------------------------------------
def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(cwd),
            "PATH": "/usr/bin:/bin",
        },
    )
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_fetch_upstream_checks_out_the_pinned_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "data.csv").write_text("a\n1\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "one", cwd=repo)
    pinned = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "data.csv").write_text("a\n2\n")
    _git("commit", "-q", "-am", "two", cwd=repo)

    checkout = fetch_upstream(repo.as_uri(), pinned, tmp_path / "cache")
    assert (checkout / "data.csv").read_text() == "a\n1\n"  # the pinned commit, not HEAD
    assert fetch_upstream(repo.as_uri(), pinned, tmp_path / "cache") == checkout  # reused
    with pytest.raises(IngestError, match="cannot fetch"):
        fetch_upstream((tmp_path / "missing").as_uri(), pinned, tmp_path / "cache")
    with pytest.raises(ValueError, match="40 hex"):
        fetch_upstream(repo.as_uri(), "abc", tmp_path / "cache")


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["ingest", *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "nope"], "unknown source 'nope'; valid sources: neusight"),
        (["--source", "neusight", "--from", "/no/such/dir"], "source directory not found: /no/such/dir"),
        ([], "nothing to ingest"),
        (["--source", "neusight", "--source", "pipeweave", "--from", "/tmp"], "--from reads one source"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(cli, args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_cli_unreadable_source_is_one_line(cli, tmp_path: Path) -> None:
    (tmp_path / "pw" / "dataset").mkdir(parents=True)
    result = cli("--source", "pipeweave", "--from", str(tmp_path / "pw"), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "gemm_fp8_train.csv" in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(
    not (DEFAULT_DATASETS_DIR / "pipeweave").is_dir(), reason="public datasets bundle not present"
)
def test_cli_ingests_and_prints_the_summary(cli, tmp_path: Path) -> None:
    root = tmp_path / "pw"
    for name in ("gemm_fp8_train.csv", "gemm_fp8_test.csv"):
        frame = pd.read_csv(DEFAULT_DATASETS_DIR / "pipeweave" / "dataset" / name, nrows=6)
        (root / "dataset").mkdir(parents=True, exist_ok=True)
        frame.to_csv(root / "dataset" / name, index=False)
    out = tmp_path / "out"
    result = cli("--source", "pipeweave", "--from", str(root), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "pipeweave" in result.output and "ALL" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measurements"] == 12 and summary["rejects"] == 0
    assert sum(summary["by_source"]["pipeweave"]["by_device"].values()) == 12
