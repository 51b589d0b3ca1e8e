"""Run a kernel suite and record raw timings: the process that runs *on* the profiled machine.

Backends:
- ``cuda_event``: CUDA-event timing (median of N trials after warm-ups) plus the names and launch
  dimensions of the kernels each case launches (torch.profiler, one extra pass).
- ``ncu_target``: the program Nsight Compute profiles. Each case is warmed up outside the profiled
  region, then run exactly once between cudaProfilerStart/Stop (ncu ``--profile-from-start off``),
  so the i-th profiled kernels belong to the i-th case; ``ncu.py`` maps them back with the kernel
  counts recorded by the ``cuda_event`` pass.
- ``host``: wall-clock timing of the same ops on the CPU (perf_counter), for the pipeline on a
  machine with no GPU. Host rows are never mixed with GPU measurements.

Writes JSON lines (one per case) with stdlib only, so it runs on a bare GPU worker with torch.
Usage: ``python -m components.profiling.runner --backend cuda_event --suite default --out FILE``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from components.atomic import atomic_write
from components.profiling.suites import SUITES, OpCase, build


def _device_name(device: str) -> str:
    import torch

    if device == "cpu":
        import platform

        return f"host-cpu:{platform.processor() or platform.machine()}"
    return torch.cuda.get_device_name(0)


def time_cuda_events(case: OpCase, warmup: int, trials: int) -> dict[str, float]:
    """Per-call GPU time from CUDA events, one event pair per trial (no host overhead inside)."""
    import torch

    call = build(case, "cuda")
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0)  # ms -> us
    return {"duration_us": statistics.median(samples), "duration_mean_us": statistics.fmean(samples),
            "duration_std_us": statistics.pstdev(samples), "duration_min_us": min(samples), "n_trials": trials}


def kernels_launched(case: OpCase) -> list[dict[str, object]]:
    """Names and launch dims of the kernels one call launches, from torch.profiler (CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    call = build(case, "cuda")
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = []
    for event in prof.events():
        if getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type):
            device_time = getattr(event, "device_time", None)
            if device_time is None:  # older torch names it cuda_time
                device_time = getattr(event, "cuda_time", float("nan"))
            kernels.append({"name": event.name, "duration_us": device_time})
    return kernels


def time_host(case: OpCase, warmup: int, trials: int) -> dict[str, float]:
    call = build(case, "cpu")
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(trials):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return {"duration_us": statistics.median(samples), "duration_mean_us": statistics.fmean(samples),
            "duration_std_us": statistics.pstdev(samples), "duration_min_us": min(samples), "n_trials": trials}


def run_ncu_target(cases: list[OpCase], warmup: int) -> None:
    import torch

    for case in cases:
        try:
            call = build(case, "cuda")
            for _ in range(warmup):
                call()
            torch.cuda.synchronize()
        except Exception as exc:  # the cuda_event pass records the same failure; nothing is profiled
            print(f"skip {case.case_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda_event", "ncu_target", "host"), required=True)
    parser.add_argument("--suite", choices=sorted(SUITES), default="default")
    parser.add_argument("--out", type=Path, help="JSON-lines output (not used by ncu_target)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--trials", type=int, default=25)
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (0 = all)")
    parser.add_argument("--filter", default="", help="only cases whose id contains this text")
    args = parser.parse_args(argv)
    cases = [case for case in SUITES[args.suite]() if args.filter in case.case_id]
    if args.limit:
        cases = cases[: args.limit]
    if args.backend == "ncu_target":
        run_ncu_target(cases, args.warmup)
        return 0
    if args.out is None:
        parser.error("--out is required for this backend")
    device = "cpu" if args.backend == "host" else "cuda"
    device_name = _device_name(device)
    atomic_write(args.out, lambda tmp: _record_cases(tmp, cases, args, device_name))
    return 0


def _record_cases(path: Path, cases: list[OpCase], args: argparse.Namespace, device_name: str) -> None:
    """One JSON line per case, flushed as it is measured (a failing case is recorded, not dropped)."""
    with path.open("w") as sink:
        for index, case in enumerate(cases):
            record: dict[str, object] = {"index": index, "case_id": case.case_id, "case": json.loads(case.to_json()),
                                         "device_name": device_name, "backend": args.backend}
            try:
                if args.backend == "host":
                    record.update(time_host(case, args.warmup, args.trials))
                else:
                    record.update(time_cuda_events(case, args.warmup, args.trials))
                    record["kernels"] = kernels_launched(case)
            except Exception as exc:  # a case that fails (OOM, unsupported dtype) is recorded, not dropped
                record["error"] = f"{type(exc).__name__}: {exc}"
            sink.write(json.dumps(record) + "\n")
            sink.flush()


if __name__ == "__main__":
    sys.exit(main())
