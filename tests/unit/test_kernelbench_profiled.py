"""KernelBench problems kernelcast timed itself join the program model's rows as their problem's timings, and
the harness's L2 flush gives the host a head start the model subtracts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.devices import load_catalog
from components.ingest.base import IngestError
from components.ingest.kernelbench import SOURCE, V01
from components.ingest.kernelbench_profiled import profiled_kernelbench
from components.ingest.schema import stable_id
from components.programs.kernelbench_model import head_start_us
from components.programs.overheads import HEAD_START, ConfigModel

REPO = Path(__file__).resolve().parents[2]


def _row(row_id: str, case: dict, **extra) -> dict:
    return {
        "row_id": row_id,
        "case": case,
        "case_id": case["case_id"],
        "backend": "events",
        "device": "h200",
        "run_id": "r1",
        "duration_us": 1000.0,
        "l2_flush": True,
        "error": None,
        **extra,
    }


def _run(tmp_path: Path, rows: list[dict]) -> Path:
    run = tmp_path / "run"
    (run / "chunks").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"format": "kernelcast-rows/1"}))
    (run / "chunks" / "0000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _program(level: str, name: str) -> dict:
    return {
        "case_id": f"program.{level}.{name}",
        "kind": "program",
        "level": level,
        "path": f"kernelbench/KernelBench/{level}/{name}.py",
    }


def test_profiled_programs_become_their_problem_s_kernelbench_timings(tmp_path: Path):
    op = {"case_id": "op.gemm.1", "kind": "op"}
    rows = [
        _row("a", _program("level3", "1_MLP")),
        _row("b", _program("level2", "7_Conv"), duration_us=50.0),
        _row("c", op),  # an op case: not a program
        _row("d", _program("level3", "2_X"), error="OutOfMemoryError"),  # failed on the device
        _row("e", _program("level3", "3_Y"), backend="ncu"),  # counters, not a wall-clock time
    ]
    out = profiled_kernelbench(_run(tmp_path, rows), load_catalog())
    assert list(out["kernel_id"]) == [
        stable_id(SOURCE, V01, "level3", "1_MLP.py"),  # the KernelBench adapter's id of the bundled problem
        stable_id(SOURCE, V01, "level2", "7_Conv.py"),
    ]
    assert set(out["source"]) == {SOURCE}
    params = [json.loads(p) for p in out["params_json"]]
    assert [p["level"] for p in params] == ["level3", "level2"]
    assert all(p["mode"] == "eager" and p["problem_set"] == V01 for p in params)
    assert [p["l2_flush_bytes"] for p in params] == [512 * 1024 * 1024] * 2  # the events backend's flush
    assert out["duration_us"].tolist() == [1000.0, 50.0]


def test_an_unknown_device_is_an_error_naming_the_run(tmp_path: Path):
    run = _run(tmp_path, [_row("a", _program("level3", "1_MLP"), device="no-such-gpu")])
    with pytest.raises(IngestError, match="no-such-gpu"):
        profiled_kernelbench(run, load_catalog())
    with pytest.raises(IngestError, match="no run folders"):
        profiled_kernelbench(tmp_path / "empty", load_catalog())


def test_the_repository_s_h200_runs_hold_all_fifty_level_3_problems():
    out = profiled_kernelbench(REPO / "profiled-data", load_catalog())
    level3 = out[out["params_json"].str.contains('"level":"level3"')]
    assert set(level3["device_id"]) == {"h200"}
    assert level3["kernel_id"].nunique() == 50


def test_the_flush_head_start_is_the_flush_s_bytes_at_dram_bandwidth():
    flush = 512 * 1024 * 1024
    table = pd.DataFrame({"flush_bytes": [flush, flush / 2, 0.0], "dram_gbps": [4800.0, 4800.0, 4800.0]})
    head = head_start_us(table)
    full = flush / 4.8e12 * 1e6  # 512 MiB written at 4.8 TB/s, in us: 112 us
    assert head == pytest.approx([full, full / 2, 0.0])
    assert np.all(head_start_us(table.drop(columns="flush_bytes")) == 0.0)  # KernelBench's own files


def test_the_head_start_shortens_only_the_host_side():
    model = ConfigModel({}, launch_us=1.0, framework_us=10.0)
    rows = pd.DataFrame({"n_kernels": [10.0, 10.0], "n_aten": [100.0, 100.0], "pred_gemm": [50.0, 5000.0]})
    cold = model.predict(rows, "pred")
    warm = model.predict(rows.assign(**{HEAD_START: 500.0}), "pred")
    assert warm[0] < cold[0]  # host-bound (1000 us of dispatch, 60 us of GPU): half the dispatch hidden
    assert warm[0] >= 60.0  # never below the GPU side
    assert warm[1] == pytest.approx(cold[1], rel=1e-3)  # GPU-bound: the host was hidden anyway
