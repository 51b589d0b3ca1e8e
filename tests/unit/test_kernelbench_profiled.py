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
from components.ingest.kernelbench_profiled import PROFILED
from components.ingest.profiled import SOURCE as PROFILED_SOURCE
from components.ingest.profiled import kernelbench_runs
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
        "device_name": "NVIDIA H200",
        "clock_mode": "boost",
        "repeats": 5,
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


OP = {"case_id": "op.gemm.1", "kind": "op", "family": "gemm", "op": "mm", "dtype": "fp32", "shape": {"m": 8}}


def test_profiled_programs_become_their_problem_s_kernelbench_timings(tmp_path: Path):
    op = OP
    rows = [
        _row("a", _program("level3", "1_MLP")),
        _row("b", _program("level2", "7_Conv"), duration_us=50.0),
        _row("c", op),  # an op case: not a program
        _row("d", _program("level3", "2_X"), error="OutOfMemoryError"),  # failed on the device
        _row("e", _program("level3", "3_Y"), backend="ncu"),  # counters, not a wall-clock time
    ]
    out = kernelbench_runs(_run(tmp_path, rows), load_catalog())
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
        kernelbench_runs(run, load_catalog())
    with pytest.raises(IngestError, match="empty"):  # names the folder that holds no run
        kernelbench_runs(tmp_path / "empty", load_catalog())


def test_the_repository_s_h200_runs_hold_all_fifty_level_3_problems():
    out = kernelbench_runs(REPO / "profiled-data", load_catalog())
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


def test_the_canonical_row_of_a_timed_program_carries_the_flush_and_an_op_s_row_does_not(tmp_path: Path):
    from components.ingest.profiled import ingest

    op = OP
    rows = [
        _row("a", _program("level3", "1_MLP")),
        _row("b", _program("level2", "7_Conv"), l2_flush=False),
        _row("c", op),
    ]
    out = ingest(_run(tmp_path, rows), load_catalog())
    params = [json.loads(p) for p in out.measurements["params_json"]]
    assert [p.get("l2_flush_bytes") for p in params] == [512 * 1024 * 1024, 0, None]


def _canonical(rows: list[tuple[str, str, str, str, str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernels) of kernelcast rows ``(measurement id, kernel id, profiler, program path,
    params)``."""
    measurements = pd.DataFrame(
        {
            "measurement_id": [r[0] for r in rows],
            "kernel_id": [r[1] for r in rows],
            "device_id": "h200",
            "source": "kernelcast",
            "profiler": [r[2] for r in rows],
            "params_json": [r[4] for r in rows],
            "duration_us": 100.0,
        }
    )
    kernels = pd.DataFrame(
        {
            "kernel_id": [r[1] for r in rows],
            "source": "kernelcast",
            "family": ["program" if r[3] else "gemm" for r in rows],
            "program": [r[3] or None for r in rows],
            "source_text": None,
        }
    ).drop_duplicates("kernel_id")
    return measurements, kernels


def test_canonical_rows_of_bundled_problems_join_as_kernelbench_timings():
    from components.ingest.kernelbench_profiled import kernelbench_timings

    flushed, old = '{"case":"x","l2_flush_bytes":536870912}', '{"case":"x"}'
    path = "kernelbench/KernelBench/level3/1_MLP.py"
    measurements, kernels = _canonical(
        [
            ("m1", "k1", "cuda_event", path, flushed),
            ("m2", "k2", "ncu", path, flushed),  # counters of one kernel, not a wall-clock time
            ("m3", "k3", "cuda_event", "kernelcast/my_model.py", flushed),  # a program, not a bundled problem
            ("m4", "k4", "cuda_event", "", flushed),  # an op
            ("m5", "k5", "cuda_event", "kernelbench/KernelBench/level1/2_X.py", old),  # flush not recorded
        ]
    )
    assert PROFILED == PROFILED_SOURCE  # the adapter's source, named where its reader is not imported
    rows, unrecorded = kernelbench_timings(measurements, kernels)
    assert rows["measurement_id"].tolist() == ["m1"]  # its own id: the split's key
    assert rows["kernel_id"].tolist() == [stable_id(SOURCE, V01, "level3", "1_MLP.py")]
    assert json.loads(rows["params_json"][0]) == {
        "mode": "eager",
        "level": "level3",
        "problem_set": V01,
        "l2_flush_bytes": 536870912,
    }
    assert unrecorded == 1
    with pytest.raises(ValueError, match="profiler"):
        kernelbench_timings(measurements.drop(columns="profiler"), kernels)


def test_a_profiled_timing_joins_the_train_side_only_with_its_row_and_problem_there(tmp_path: Path):
    from types import SimpleNamespace

    from components.programs.kernelbench_model import _train_side_tables

    flushed = '{"case":"x","l2_flush_bytes":536870912}'
    problem = {name: stable_id(SOURCE, V01, "level3", f"{name}.py") for name in ("A", "B")}
    a, b = "kernelbench/KernelBench/level3/A.py", "kernelbench/KernelBench/level3/B.py"
    measurements, kernels = _canonical(
        [
            ("p1", "kA", "cuda_event", a, flushed),  # joins
            ("p2", "kA2", "cuda_event", a, flushed),  # its row held out
            ("p3", "kB", "cuda_event", b, flushed),  # its problem held out
        ]
    )
    own = pd.DataFrame(
        {
            "measurement_id": ["oA", "oB"],
            "kernel_id": [problem["A"], problem["B"]],
            "device_id": "a100-80gb",
            "source": SOURCE,
            "profiler": "wall_clock",
            "params_json": '{"level":"level3","mode":"eager"}',
            "duration_us": 90.0,
        }
    )
    canonical = tmp_path / "data" / "canonical"
    canonical.mkdir(parents=True)
    pd.concat([measurements, own]).to_parquet(canonical / "measurements.parquet")
    bundled = pd.DataFrame(
        {"kernel_id": list(problem.values()), "source": SOURCE, "family": "program", "program": "p"}
    ).assign(source_text="t")
    pd.concat([kernels, bundled]).to_parquet(canonical / "kernels.parquet")
    train_side = pd.DataFrame({"source": [SOURCE, PROFILED, PROFILED], "measurement_id": ["oA", "p1", "p3"]})
    lines: list[str] = []
    settings = SimpleNamespace(data_dir=tmp_path / "data")
    timings, kernels_out, ids = _train_side_tables(train_side, settings, lines.append)
    assert ids == {"oA", "p1"}
    joined = timings[timings["measurement_id"] == "p1"]
    assert joined["kernel_id"].tolist() == [problem["A"]] and set(timings["source"]) == {SOURCE}
    assert set(kernels_out["source"]) == {SOURCE}
    assert any("1 of 3 profiled KernelBench timings on the train side (h200)" in line for line in lines)
