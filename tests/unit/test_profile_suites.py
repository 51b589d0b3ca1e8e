"""Suites as data, row ids, row validation, placement and the CLI's clear errors (no Ray, no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.profiling.cases import SuiteError, chunked, load_cases, suite_names


def test_every_suite_file_loads_with_stable_unique_case_ids() -> None:
    from components.platform.config import get_settings

    datasets = get_settings().datasets_dir
    for name in suite_names():
        if name == "active":
            with pytest.raises(SuiteError, match="needs a model"):
                load_cases(name)
            continue
        if name == "kernelbench" and not (datasets / "kernelbench").is_dir():
            continue
        if name == "triton":
            pytest.importorskip("yaml")
        cases = load_cases(name)
        ids = [c.case_id for c in cases]
        assert len(ids) == len(set(ids)), name
        assert ids == [c.case_id for c in load_cases(name)], name
    assert len(load_cases("ops")) > 800 and len(load_cases("smoke")) <= 16
    assert load_cases("default") == load_cases("ops")  # the first runs' suite name still works


def test_bad_suites_are_named(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="--suite 'nope': no such suite; choose one of"):
        load_cases("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: ops\ngrids:\n  - family: gemm\n    op: matmul\n    dtypes: [fp13]\n"
        "    shapes: [{M: 1, N: 1, K: 1}]\n"
    )
    with pytest.raises(SuiteError, match=r"bad.yaml: grids\[0\]: dtype 'fp13'"):
        load_cases(str(bad))
    with pytest.raises(ValueError, match="--chunk-size 0"):
        chunked([], 0)


def test_cuda_source_suite_compiles_with_nvrtc_without_a_gpu() -> None:
    """Real NVRTC (cuda-python) compiles every source-suite kernel to an sm_90 cubin; launching needs a
    GPU."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from components.profiling.kernels_cuda import CudaSourceError, compile_cubin

    for case in load_cases("source"):
        cubin = compile_cubin(case.spec["source"], case.spec["name"], "sm_90")
        assert cubin[:4] == b"\x7fELF", case.case_id
    with pytest.raises(CudaSourceError, match="NVRTC could not compile broken"):
        compile_cubin('extern "C" __global__ void broken( {', "broken", "sm_90")


def test_row_ids_are_stable_and_distinguish_device_case_backend_run() -> None:
    from components.profiling.rows import row_id

    base = row_id("h100-sxm", "gemm.x", "ncu", "run1", 0)
    assert base == row_id("h100-sxm", "gemm.x", "ncu", "run1", 0)
    others = {
        row_id("h200", "gemm.x", "ncu", "run1", 0),
        row_id("h100-sxm", "gemm.y", "ncu", "run1", 0),
        row_id("h100-sxm", "gemm.x", "events", "run1", 0),
        row_id("h100-sxm", "gemm.x", "ncu", "run2", 0),
        row_id("h100-sxm", "gemm.x", "ncu", "run1", 1),
    }
    assert base not in others and len(others) == 5


def test_row_validation_quarantines_bad_rows_and_keeps_failed_cases() -> None:
    from components.validation.profiled import validate_rows

    good = {
        "row_id": "a",
        "run_id": "r",
        "device": "host",
        "device_name": "cpu",
        "backend": "host",
        "tool": "t",
        "tool_version": "1",
        "clock_mode": "host",
        "case_id": "c",
        "duration_us": 5.0,
        "duration_std_us": 0.1,
        "warmup": 1,
        "repeats": 3,
        "error": None,
    }
    failed_case = {**good, "row_id": "b", "duration_us": None, "error": "RuntimeError: OOM"}
    bad_rate = {**good, "row_id": "c", "l2_hit_rate": 1.5}
    no_time = {**good, "row_id": "d", "duration_us": None}
    duplicate = {**good}
    valid, quarantine, summary = validate_rows([good, failed_case, bad_rate, no_time, duplicate])
    assert [r["row_id"] for r in valid] == ["b"]
    reasons = {r["row_id"]: r["failed_expectations"] for r in quarantine if r["row_id"] != "a"}
    assert reasons == {"c": ["l2_hit_rate_in_0_1"], "d": ["measured_or_error"]}
    assert [r["failed_expectations"] for r in quarantine if r["row_id"] == "a"] == [["unique_row_id"]] * 2
    assert summary["rows_in"] == 5 and summary["rows_valid"] + summary["rows_quarantined"] == 5


def test_placement_by_accelerator_type() -> None:
    from components.profiling.schedule import DeviceUnavailable, placement_for

    h100 = placement_for("H100", "events")
    assert h100.accelerator_type == "H100" and h100.num_gpus == 1 and h100.gpu_memory_gb == 80
    assert h100.options(3)["resources"] == {"accelerator_type:H100": 0.001}
    assert h100.options(3, memory_resource=True)["resources"] == {
        "accelerator_type:H100": 0.001,
        "gpu_memory_gb": 80,
    }
    assert placement_for("mi300x", "rocprofv3").resource == "accelerator_type:AMD-Instinct-MI300X"
    assert placement_for("host", "host").resource is None
    with pytest.raises(DeviceUnavailable, match="--device GTX 9999: not a catalog GPU"):
        placement_for("GTX 9999", "events")
    with pytest.raises(DeviceUnavailable, match="host backend profiles --device host only"):
        placement_for("host", "ncu")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        from components.profiling.schedule import local_device

        with pytest.raises(DeviceUnavailable, match="no --device given and no GPU on this machine"):
            local_device()


def test_profile_cli_errors_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kernelcast.cli import app

    runner = CliRunner()
    for args, message in [
        (
            ["--device", "host", "--backend", "nvprof"],
            "--backend 'nvprof': choose one of events, ncu, rocprofv3, host",
        ),
        (["--device", "host", "--backend", "host", "--suite", "nope"], "--suite 'nope': no such suite"),
        (["--device", "H100", "--backend", "host"], "the host backend profiles --device host only"),
        (["--device", "host", "--backend", "host", "--suite", "active"], "needs a model to choose its cases"),
    ]:
        result = runner.invoke(app, ["profile", *args, "--no-ray", "--out", str(tmp_path / "run")])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_events_backend_without_a_gpu_is_reported_per_chunk(tmp_path: Path) -> None:
    """In-process (no Ray) on this CPU-only machine: the run fails with the backend's reason."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from components.profiling.run import ProfileInputs, ProfilingError, profile_run

    with pytest.raises(ProfilingError, match="no GPU visible to torch on this machine"):
        profile_run(
            ProfileInputs(
                device="H100", backend="events", suite="smoke", out_dir=tmp_path / "run", use_ray=False
            )
        )


def test_active_learning_ranks_by_interval_width_and_needs_intervals() -> None:
    import pandas as pd

    from components.models.roofline import RooflinePredictor
    from components.profiling.cases import op_case
    from components.serving.active import ActiveLearningError, choose, interval_widths

    candidates = [op_case("gemm", "matmul", "fp16", {"M": m, "N": 1024, "K": 1024}) for m in (1, 64, 4096)]
    widths = pd.Series([0.1, 0.9, float("inf")], index=[c.case_id for c in candidates])
    assert [c.case_id for c in choose(widths, candidates, 2)] == [
        candidates[2].case_id,
        candidates[1].case_id,
    ]
    with pytest.raises(ActiveLearningError, match="gives no runtime intervals"):
        interval_widths(RooflinePredictor(), candidates, "h100-sxm")


def test_a_chunk_job_records_cases_its_backend_cannot_measure(tmp_path: Path) -> None:
    """In-process chunk job on the host backend: op cases timed, a CUDA-source case a row with the reason."""
    pytest.importorskip("torch")
    from components.profiling.rows import read_rows
    from components.profiling.schedule import ChunkJob, ScheduleReport, _todo, measure_chunk, save_chunk

    cases = load_cases("smoke")[:2] + load_cases("source")[:1]
    job = ChunkJob(
        run_dir=str(tmp_path),
        chunk_id="0000-t",
        index=0,
        cases=[c.to_json() for c in cases],
        backend="host",
        device="host",
        run_id="t",
        warmup=1,
        repeats=2,
        l2_flush=False,
    )
    assert save_chunk(job, measure_chunk(job)) == 3
    rows = {r["case_id"]: r for r in read_rows(tmp_path)}
    assert rows[cases[2].case_id]["error"] == "host backend cannot measure source cases"
    assert all(rows[c.case_id]["duration_us"] > 0 for c in cases[:2])
    report = ScheduleReport()
    assert _todo([job], report) == [] and report.reused == [
        "0000-t"
    ]  # the chunk file exists: not measured twice


def test_events_backend_rows_with_a_mocked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU MOCKED: torch.cuda events/sync/name are replaced by CPU stand-ins and the ops built on the
    CPU, to check the events backend's warm-up/repeat/flush loop and the rows it writes."""
    import time

    torch = pytest.importorskip("torch")
    import components.profiling.launch as launch
    from components.profiling.backends import MeasureContext
    from components.profiling.backends.events import EventsBackend

    class MockEvent:
        def __init__(self, enable_timing: bool) -> None:
            self.at = 0.0

        def record(self) -> None:
            self.at = time.perf_counter()

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: MockEvent) -> float:
            return (end.at - self.at) * 1e3  # ms, like CUDA events

    flushes: list[int] = []
    real_build = launch.build_callable
    monkeypatch.setattr(torch.cuda, "Event", MockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Mock GPU")
    monkeypatch.setattr(launch, "build_callable", lambda case, device, datasets=None: real_build(case, "cpu"))
    monkeypatch.setattr(launch, "l2_flusher", lambda device: lambda: flushes.append(1))
    cases = load_cases("smoke")[:2]
    rows = EventsBackend().measure(cases, MeasureContext("h100-sxm", "mock-run", warmup=2, repeats=4))
    assert [r["case_id"] for r in rows] == [c.case_id for c in cases] and len(
        flushes
    ) == 8  # flushed per repeat
    for row in rows:
        assert (
            row["duration_min_us"] <= row["duration_us"] <= row["duration_max_us"] and row["duration_us"] > 0
        )
        assert row["backend"] == "events" and row["clock_mode"] == "boost" and row["l2_flush"] is True
        assert (row["warmup"], row["repeats"], row["device_name"]) == (2, 4, "Mock GPU")


def test_llm_suite_attention_and_fp8_cases_run_on_the_host() -> None:
    """The llm suite's two new kinds of case, built on the CPU with real torch at small sizes: fused attention
    (prefill S = KV causal, decode S = 1, grouped heads) and an fp8 e4m3 GEMM with a bf16 result."""
    pytest.importorskip("torch")
    from components.profiling.suites import OpCase, build

    cases = load_cases("llm")
    assert {(c.spec["family"], c.spec["dtype"]) for c in cases} >= {("attention", "bf16"), ("gemm", "fp8")}
    assert all(
        c.spec["shape"]["S"] in (1, c.spec["shape"]["KV"]) for c in cases if c.spec["family"] == "attention"
    )

    def shape(**dims: int) -> tuple[tuple[str, int], ...]:
        return tuple(dims.items())

    prefill = build(
        OpCase("attention", "attention", "bf16", shape(B=1, S=64, KV=64, H=8, HKV=2, D=32)), "cpu"
    )
    assert tuple(prefill().shape) == (1, 8, 64, 32)
    decode = build(OpCase("attention", "attention", "fp16", shape(B=2, S=1, KV=64, H=4, HKV=4, D=32)), "cpu")
    assert tuple(decode().shape) == (2, 4, 1, 32)
    fp8 = build(OpCase("gemm", "matmul", "fp8", shape(M=16, N=32, K=64)), "cpu")()
    assert tuple(fp8.shape) == (16, 32) and str(fp8.dtype) == "torch.bfloat16"
    with pytest.raises(ValueError, match=r"prefill \(S = KV\) or decode \(S = 1\)"):
        build(OpCase("attention", "attention", "bf16", shape(B=1, S=8, KV=64, H=4, HKV=4, D=32)), "cpu")
    with pytest.raises(ValueError, match="fp8 is profiled for GEMMs only"):
        build(OpCase("softmax", "softmax", "fp8", shape(B=4, H=8)), "cpu")


def test_cuda_source_arguments_are_the_tuple_cuda_bindings_takes() -> None:
    """cuda-bindings 13's cuLaunchKernel takes kernelParams as a tuple (values, ctypes types); a list was
    refused on the H200 (every source case failed with 'kernelParams is not a valid type')."""
    import ctypes

    from components.profiling.kernels_cuda import _arguments

    keep, params = _arguments([{"int": 7}, {"float": 2.0}])
    assert keep == [] and params == ((7, 2.0), (ctypes.c_int, ctypes.c_float))
    assert isinstance(params, tuple)
