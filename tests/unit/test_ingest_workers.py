"""Adapters side by side: ``ingest_sources`` in two spawned processes writes the same tables as in one
(real adapters on real folders: our first H100 run, ``H100_RUN``, the tests' small real subset, and a team
CSV), and the worker count follows KERNELCAST_INGEST_WORKERS, capped by the number of sources; a bad value
is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import H100_RUN

CSV = """op,shape,dtype,device,duration_us
gemm,"M=4096,N=4096,K=4096",bf16,H100,190.5
gemm,"M=2048,N=2048,K=2048",bf16,H100,30.1
"""


def test_two_processes_write_the_same_tables_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from components.devices import load_catalog
    from components.ingest.run import ingest_sources

    team = tmp_path / "team.csv"
    team.write_text(CSV)
    roots = {"kernelcast": H100_RUN, "csv": team}
    catalog = load_catalog()
    results = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("KERNELCAST_INGEST_WORKERS", workers)
        said: list[str] = []
        results[workers] = ingest_sources(["kernelcast", "csv"], roots, catalog, progress=said.append)
        assert len(said) == 2 and ("2 processes" in said[0]) == (workers == "2"), said
    one, two = results["1"], results["2"]
    assert len(one.measurements) == 662 + 2 and set(one.measurements["source"]) == {"kernelcast", "csv"}
    for table in ("measurements", "kernels", "rejects"):
        assert getattr(one, table).equals(getattr(two, table)), table
    assert one.rows_in == two.rows_in


def test_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from components.ingest.run import ingest_workers

    monkeypatch.setenv("KERNELCAST_INGEST_WORKERS", "3")
    assert ingest_workers(8) == 3 and ingest_workers(2) == 2 and ingest_workers(1) == 1
    monkeypatch.setenv("KERNELCAST_INGEST_WORKERS", "0")
    assert ingest_workers(8) == 1
    monkeypatch.setenv("KERNELCAST_INGEST_WORKERS", "many")
    with pytest.raises(ValueError, match="KERNELCAST_INGEST_WORKERS='many'"):
        ingest_workers(8)
    monkeypatch.delenv("KERNELCAST_INGEST_WORKERS")
    assert 1 <= ingest_workers(8) <= 4
