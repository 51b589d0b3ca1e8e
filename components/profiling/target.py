"""The program a GPU profiler runs: the cases of one chunk, each warmed up, then run once in a
marked region, so the profiler's kernels can be attributed to cases.

    python -m components.profiling.target --cases CASES.json --mode ncu|rocprof|kernels [--out FILE]

- ``ncu``: each case's measured call sits between cudaProfilerStart/Stop (``ncu --profile-from-start
  off``), so the i-th profiled kernels belong to the i-th case (matched by the ``kernels`` pass).
- ``rocprof``: each measured call sits in a ROCTx range ``kc:<case_id>``; rocprofv3's marker trace
  gives the range's timestamps and every dispatch inside it belongs to that case.
- ``kernels``: no profiler; records the kernel names each case launches (torch.profiler), one JSON
  line per case, to match ncu's launch-ordered rows.
Stdlib + torch only: this runs on a bare GPU worker image.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Callable
from pathlib import Path

from components.profiling.cases import Case
from components.profiling.launch import build_callable

RANGE_PREFIX = "kc:"


def _roctx() -> tuple[Callable[[str], None], Callable[[], None]]:
    """ROCTx push/pop: rocprofiler-sdk's library when present, else torch's (roctx on ROCm builds)."""
    for name in ("librocprofiler-sdk-roctx.so", "librocprofiler-sdk-roctx.so.1", "libroctx64.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.roctxRangePushA.argtypes = [ctypes.c_char_p]
        return (lambda text, lib=lib: lib.roctxRangePushA(text.encode())), (
            lambda lib=lib: lib.roctxRangePop()
        )
    import torch

    return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def kernel_names(call: Callable[[], object]) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))]
    return [n for n in names if not n.startswith("Memset") and not n.startswith("Memcpy")]


def run(cases: list[Case], mode: str, warmup: int, out: Path | None) -> None:
    import torch

    push, pop = _roctx() if mode == "rocprof" else (None, None)
    sink = out.open("w") if out else None
    for case in cases:
        record: dict[str, object] = {"case_id": case.case_id}
        try:
            call = build_callable(case, "cuda")
            for _ in range(warmup):
                call()
            torch.cuda.synchronize()
        except Exception as exc:  # the case is reported as failed by the backend; nothing is profiled
            record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            print(f"skip {case.case_id}: {record['error']}", file=sys.stderr)
            if sink:
                sink.write(json.dumps(record) + "\n")
            continue
        if mode == "ncu":
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        elif mode == "rocprof":
            push(RANGE_PREFIX + case.case_id)
            call()
            torch.cuda.synchronize()
            pop()
        else:
            record["kernels"] = kernel_names(call)
        if sink:
            sink.write(json.dumps(record) + "\n")
            sink.flush()
    if sink:
        sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--mode", choices=("ncu", "rocprof", "kernels"), required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    cases = [Case.from_json(c) for c in json.loads(args.cases.read_text())]
    run(cases, args.mode, args.warmup, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
