"""Parsing real profiler output into canonical rows: Nsight Compute raw CSV from our H100 and the
rocprofv3 sample outputs rocprofiler-sdk commits (tests/fixtures/profiling/PROVENANCE.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from components.profiling.backends import CounterPermissionError, MeasureContext
from components.profiling.backends import ncu as ncu_backend
from components.profiling.backends import rocprofv3 as roc
from components.profiling.cases import Case, op_case

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profiling"
H100_ENV = {
    "device_name": "NVIDIA H100 80GB HBM3",
    "tool": "ncu",
    "tool_version": "2025.3.1.0 (fixture)",
    "clock_mode": "locked",
}


def _ncu_inputs() -> tuple[list[Case], list[dict], str, dict[str, str]]:
    folder = FIXTURES / "ncu_h100"
    passes = [json.loads(line) for line in (folder / "kernels.jsonl").read_text().splitlines()]
    cases = [
        op_case(p["case"]["family"], p["case"]["op"], p["case"]["dtype"], p["case"]["shape"]) for p in passes
    ]
    roles = json.loads((folder / "ncu_roles.json").read_text())["roles"]
    return cases, passes, (folder / "ncu_raw.csv").read_text(), roles


def _ncu_rows(run_id: str = "fixture") -> list[dict]:
    cases, passes, raw, roles = _ncu_inputs()
    return ncu_backend.rows_from_ncu(
        cases,
        passes,
        raw,
        roles,
        MeasureContext("h100-sxm", run_id),
        H100_ENV,
        FIXTURES / "ncu_h100" / "ncu_raw.csv",
    )


def test_ncu_raw_csv_gives_one_row_per_kernel_with_physical_counters() -> None:
    rows = _ncu_rows()
    assert [(r["case_id"], r["kernel_position"]) for r in rows] == [
        ("gemm.matmul.fp32.M256-N256-K256", 0),
        ("gemm.matmul.fp32.M256-N256-K256", 1),
        ("gemm.matmul.fp16.M4096-N4096-K4096", 0),
        ("bmm.bmm.bf16.B32-M1024-N1024-K128", 0),
    ]
    by_case = {(r["case_id"], r["kernel_position"]): r for r in rows}
    # Executed FLOPs from SASS/tensor counters match each op's definition (2 x M x N x K).
    hgemm = by_case[("gemm.matmul.fp16.M4096-N4096-K4096", 0)]
    assert hgemm["flops_tensor"] == pytest.approx(2 * 4096**3, rel=1e-6) and hgemm["flops_fp32"] == 0
    assert by_case[("bmm.bmm.bf16.B32-M1024-N1024-K128", 0)]["flops"] == pytest.approx(
        2 * 32 * 1024 * 1024 * 128, rel=1e-6
    )
    sgemm = by_case[("gemm.matmul.fp32.M256-N256-K256", 0)]
    assert sgemm["flops_fp32"] == pytest.approx(2 * 256**3, rel=0.01) and sgemm["flops_tensor"] == 0
    assert hgemm["duration_us"] == pytest.approx(213.536) and hgemm["dram_read_bytes"] > 3 * 2 * 4096**2 * 0.9
    for row in rows:
        assert 0 <= row["l2_hit_rate"] <= 1 and 0 <= row["l1_hit_rate"] <= 1
        assert row["backend"] == "ncu" and row["clock_mode"] == "locked" and row["repeats"] == 1
    assert len({r["row_id"] for r in rows}) == 4
    assert [r["row_id"] for r in _ncu_rows()] == [r["row_id"] for r in rows]  # stable ids
    assert {r["row_id"] for r in _ncu_rows("another-run")}.isdisjoint(r["row_id"] for r in rows)


def test_ncu_rows_matched_to_the_wrong_case_are_an_error_naming_the_row() -> None:
    cases, passes, raw, roles = _ncu_inputs()
    from components.profiling.records import ProfileDataError

    with pytest.raises(
        ProfileDataError, match=r"row 0: kernel 'sm80_xmma_gemm.*does not match case bmm\.bmm\.bf16"
    ):
        ncu_backend.rows_from_ncu(
            cases[::-1],
            passes[::-1],
            raw,
            roles,
            MeasureContext("h100-sxm", "x"),
            H100_ENV,
            FIXTURES / "ncu_h100" / "ncu_raw.csv",
        )


def test_ncu_rows_ingest_and_pass_the_canonical_validation(tmp_path: Path) -> None:
    """Real H100 counters -> run folder -> kernelcast ingest adapter -> GX validation against the catalog."""
    from components.devices import load_catalog
    from components.ingest.profiled import ingest
    from components.profiling.rows import write_chunk, write_manifest
    from components.validation.run import validate_measurements

    run = tmp_path / "runs" / "h100-ncu"
    write_chunk(run / "chunks" / "0000-x.jsonl", [{**r, "chunk_id": "0000-x"} for r in _ncu_rows()])
    write_manifest(
        run, {"format": "kernelcast-rows/1", "device": "h100-sxm", "backend": "ncu", "run_id": "h100-ncu"}
    )
    catalog = load_catalog()
    out = ingest(tmp_path / "runs", catalog)
    assert len(out.measurements) == 4 and len(out.rejects) == 0 and out.rows_in == 4
    m = out.measurements
    assert (
        set(m["device_id"]) == {"h100-sxm"}
        and set(m["profiler"]) == {"ncu"}
        and set(m["clock_mode"]) == {"locked"}
    )
    assert m["dram_bytes"].notna().all() and m["l2_hit_rate"].between(0, 1).all()
    result = validate_measurements(
        m,
        catalog,
        {
            "validate": {
                "bandwidth_tolerance": 1.1,
                "flops_tolerance": 1.1,
                "arith_intensity_rel_tol": 0.05,
                "max_failure_share": 0.1,
            }
        },
        out.kernels,
    )
    assert len(result.valid) == 4, result.quarantine.get("failed_expectations")


def test_ncu_counter_permission_error_is_clear() -> None:
    # The message as ncu prints it (error code documented at https://developer.nvidia.com/ERR_NVGPUCTRPERM).
    output = (
        "==PROF== Connected to process 4242 (/usr/bin/python3)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
        "Counters on the target device 0.\n"
    )
    problem = ncu_backend.permission_problem(output, "NVIDIA H100 80GB HBM3")
    assert isinstance(problem, CounterPermissionError)
    assert (
        "ERR_NVGPUCTRPERM" in str(problem)
        and "CAP_SYS_ADMIN" in str(problem)
        and "--backend events" in str(problem)
    )
    assert ncu_backend.permission_problem('"ID","Kernel Name"\n', "H100") is None


def test_rocprofv3_kernel_trace_parses_dispatches_and_durations() -> None:
    dispatches = roc.parse_kernel_trace((FIXTURES / "rocprofv3" / "kernel_trace.csv").read_text())
    assert len(dispatches) == 9
    first = next(d for d in dispatches if d.dispatch_id == 1)
    assert first.kernel_name.startswith("void addition_kernel<float>")
    assert first.duration_us == pytest.approx((1550151853042437 - 1550151853029637) / 1000)
    assert first.grid == (1024, 1024, 1) and first.workgroup == (64, 1, 1) and first.vgpr == 8


def test_rocprofv3_counter_collection_parses_and_missing_counters_stay_missing() -> None:
    dispatches = roc.parse_counter_collection((FIXTURES / "rocprofv3" / "counter_collection.csv").read_text())
    assert [d.dispatch_id for d in dispatches] == [1, 2, 3, 4]
    assert all(d.counters == {"SQ_WAVES": 16384.0} for d in dispatches)
    metrics = roc.derived_metrics(dispatches[0].counters)
    # Only SQ_WAVES was collected: FLOPs, HBM bytes and hit rates are unknown, never zero.
    assert all(math.isnan(v) for v in metrics.values())


def test_rocprofv3_dispatches_are_attributed_to_cases_by_roctx_range() -> None:
    """Marker ranges are built here around the real trace's timestamps (the sample has no markers)."""
    trace = roc.parse_kernel_trace((FIXTURES / "rocprofv3" / "kernel_trace.csv").read_text())
    ranges = [("case-a", 1550151853029000, 1550151853051000), ("case-b", 1550151853052000, 1550151853076000)]
    assigned = roc.assign_to_cases(trace, ranges)
    assert [d.dispatch_id for d in assigned["case-a"]] == [1, 2]
    assert [d.dispatch_id for d in assigned["case-b"]] == [3, 4]
    cases = [Case("op", "case-a", {}), Case("op", "case-b", {}), Case("op", "case-c", {})]
    env = {
        "device_name": "AMD Instinct MI300X",
        "tool": "rocprofv3",
        "tool_version": "fixture",
        "clock_mode": "boost",
    }
    rows = roc.rows_from_rocprof(cases, assigned, [], MeasureContext("mi300x", "r"), env)
    assert [(r["case_id"], r["kernel_position"]) for r in rows[:4]] == [
        ("case-a", 0),
        ("case-a", 1),
        ("case-b", 0),
        ("case-b", 1),
    ]
    assert rows[0]["duration_us"] == pytest.approx(12.8) and rows[4]["error"].startswith("no dispatches")
    with pytest.raises(roc.RocprofOutputError, match="case case-a: 1 dispatches in a counter pass"):
        roc.rows_from_rocprof(
            cases[:1], assigned, [{"case-a": assigned["case-a"][:1]}], MeasureContext("mi300x", "r"), env
        )


def test_rocprofv3_derived_metrics_follow_the_compute_profiler_formulas() -> None:
    counters = {
        "SQ_INSTS_VALU_ADD_F32": 10,
        "SQ_INSTS_VALU_MUL_F32": 5,
        "SQ_INSTS_VALU_FMA_F32": 100,
        "SQ_INSTS_VALU_TRANS_F32": 1,
        "SQ_INSTS_VALU_FMA_F16": 0,
        "SQ_INSTS_VALU_ADD_F64": 0,
        "SQ_INSTS_VALU_MFMA_MOPS_F16": 3,
        "TCC_EA0_RDREQ_sum": 100,
        "TCC_EA0_RDREQ_32B_sum": 20,
        "TCC_EA0_WRREQ_sum": 50,
        "TCC_EA0_WRREQ_64B_sum": 10,
        "TCC_HIT_sum": 30,
        "TCC_MISS_sum": 10,
        "TCP_TOTAL_CACHE_ACCESSES_sum": 200,
        "TCP_TCC_READ_REQ_sum": 40,
        "TCP_TCC_WRITE_REQ_sum": 10,
    }
    m = roc.derived_metrics(counters)
    assert m["flops_fp32"] == 64 * (10 + 5 + 1 + 2 * 100) and m["flops_tensor"] == 512 * 3
    assert m["flops"] == m["flops_fp32"] + m["flops_fp16"] + m["flops_fp64"] + m["flops_tensor"]
    assert m["dram_read_bytes"] == 80 * 64 + 20 * 32 and m["dram_write_bytes"] == 40 * 32 + 10 * 64
    assert m["l2_hit_rate"] == 0.75 and m["l1_hit_rate"] == 0.75


def test_rocprofv3_output_that_is_not_rocprofv3_is_named() -> None:
    with pytest.raises(roc.RocprofOutputError, match=r"x\.csv: not rocprofv3 output"):
        roc.parse_kernel_trace('"ID","Kernel Name"\n"0","k"\n', "x.csv")
