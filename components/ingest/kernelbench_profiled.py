"""KernelBench problems kernelcast timed itself (``kernelcast profile``, ``profiled-data/``) as KernelBench
timings: the same problem's kernel id as the bundled tree's, on the GPU that ran it.

A profiled program row (``case.kind == "program"``, ``case.path`` ending in
``KernelBench/level<L>/<file>.py``) times the current problem tree (``v0.1+``) on its GPU with CUDA events,
like KernelBench's own baseline files, with one difference in the harness: kernelcast's events backend zeroes
a buffer larger than the L2 before every timed call, outside the event pair and without waiting for it
(``components/profiling/backends/events.py``). While the GPU runs that flush, the host already dispatches the
forward, so up to the flush's duration of host time is spent before the first event fires. The rows say so
(``l2_flush_bytes`` in the canonical row's ``params_json``, ``profiled.program_flush``); the program model
subtracts that head start from the host side (``programs.overheads.HEAD_START``).

One join serves both readers: the train stage (``programs.kernelbench_model``) joins the canonical tables'
rows with :func:`kernelbench_timings`, and the bench (``benchmarks/kernelbench_level.py --profiled``) reads
run folders through the profiled adapter into the same function (``profiled.kernelbench_runs``).
"""

from __future__ import annotations

import json
import re

import pandas as pd

from components.ingest.kernelbench import SOURCE, V01
from components.ingest.schema import canonical_json, stable_id

# ``.../KernelBench/level3/10_ResNet101.py``: the bundled current tree's problems (v0.1+)
_PROBLEM = re.compile(r"(?:^|/)KernelBench/(?P<level>level\d+)/(?P<file>[^/]+\.py)$")
COLUMNS = ("measurement_id", "kernel_id", "device_id", "source", "run_id", "params_json", "duration_us")
# the profiled adapter's source (components.ingest.profiled.SOURCE: that module reads components.profiling)
PROFILED = "kernelcast"
FLUSH_KEY = "l2_flush_bytes"  # profiled.program_flush: what the harness flushed before each timed call


def problem_of(path: object) -> tuple[str, str] | None:
    """``(level, problem file)`` of a program path ending in ``KernelBench/level<L>/<file>.py``, else None."""
    found = _PROBLEM.search(str(path or ""))
    return (found["level"], found["file"]) if found else None


def kernelbench_timings(measurements: pd.DataFrame, kernels: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(rows, unrecorded): the canonical ``kernelcast`` CUDA-event rows of program kernels whose path is a
    bundled KernelBench problem, as that problem's KernelBench timings (``COLUMNS``): its kernel id, eager,
    problem set v0.1+, the flushed bytes the row carries; ``measurement_id`` is the row's own (the split's
    key). ``unrecorded``: such rows without the flush in their params (a table ingested before it was
    recorded), not joined -- their head start is unknown."""
    columns = ("measurement_id", "kernel_id", "device_id", "source", "params_json", "duration_us")
    missing = [c for c in (*columns, "profiler") if c not in measurements.columns]
    if missing:
        raise ValueError(f"kernelbench_timings: measurements lack {missing}")
    timed = measurements[(measurements["source"] == PROFILED) & (measurements["profiler"] == "cuda_event")]
    programs = kernels[(kernels["source"] == PROFILED) & (kernels["family"] == "program")]
    problems = {
        kid: found
        for kid, path in zip(programs["kernel_id"], programs["program"], strict=True)
        if (found := problem_of(path)) is not None
    }
    rows, unrecorded = [], 0
    for row in timed[timed["kernel_id"].isin(set(problems))].itertuples(index=False):
        params = json.loads(row.params_json)
        if FLUSH_KEY not in params:
            unrecorded += 1
            continue
        level, problem_file = problems[row.kernel_id]
        rows.append(
            {
                "measurement_id": row.measurement_id,
                "kernel_id": stable_id(SOURCE, V01, level, problem_file),
                "device_id": row.device_id,
                "source": SOURCE,
                "run_id": getattr(row, "run_id", None),
                "params_json": canonical_json(
                    {"mode": "eager", "level": level, "problem_set": V01, FLUSH_KEY: params[FLUSH_KEY]}
                ),
                "duration_us": float(row.duration_us),
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS)), unrecorded
