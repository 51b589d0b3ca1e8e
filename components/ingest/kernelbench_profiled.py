"""KernelBench problems kernelcast timed itself (``kernelcast profile``, ``profiled-data/``) as KernelBench
timings: the same problem's kernel id as the bundled tree's, on the GPU that ran it.

A profiled program row (``case.kind == "program"``, ``case.path`` ending in
``KernelBench/level<L>/<file>.py``) times the current problem tree (``v0.1+``) on its GPU with CUDA events,
like KernelBench's own baseline files, with one difference in the harness: kernelcast's events backend zeroes
a buffer larger than the L2 before every timed call, outside the event pair and without waiting for it
(``components/profiling/backends/events.py``). While the GPU runs that flush, the host already dispatches the
forward, so up to the flush's duration of host time is spent before the first event fires. The rows say so
(``l2_flush_bytes`` in ``params_json``); the program model subtracts that head start from the host side
(``programs.overheads.HEAD_START``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from components.ingest.base import IngestError
from components.ingest.kernelbench import SOURCE, V01
from components.ingest.schema import canonical_json, stable_id

# ``.../KernelBench/level3/10_ResNet101.py``: the bundled current tree's problems (v0.1+)
_PROBLEM = re.compile(r"(?:^|/)KernelBench/(?P<level>level\d+)/(?P<file>[^/]+\.py)$")
COLUMNS = ("kernel_id", "device_id", "source", "run_id", "params_json", "duration_us")


def problem_of(case: dict[str, Any]) -> tuple[str, str] | None:
    """``(level, problem file)`` of a profiled KernelBench program case, or None for any other case."""
    if case.get("kind") != "program":
        return None
    found = _PROBLEM.search(str(case.get("path") or ""))
    return (found["level"], found["file"]) if found else None


def profiled_kernelbench(root: Path, catalog: Any) -> pd.DataFrame:
    """Measurement rows (``COLUMNS``) of every KernelBench program timed (CUDA events, no error, not
    quarantined) in the run folders directly under ``root`` (or ``root`` itself when it is one run), in the
    KernelBench adapter's layout: eager, problem set v0.1+, and the bytes the harness flushed before each
    timed call (``l2_flush_bytes``, 0 without a flush). A device the catalog does not know is an error
    naming the run."""
    from components.ingest.profiled import run_folders
    from components.profiling.launch import L2_FLUSH_BYTES
    from components.profiling.records import quarantined_ids, read_rows

    rows = []
    for run in run_folders(root):
        quarantined = quarantined_ids(run)
        for row in read_rows(run):
            problem = problem_of(row.get("case") or {})
            if (
                problem is None
                or row.get("error")
                or row["row_id"] in quarantined
                or row.get("backend") != "events"
            ):
                continue
            try:
                device = catalog.resolve(row["device"])
            except LookupError as exc:
                raise IngestError(f"{run}: device {row['device']!r} is not in the catalog") from exc
            level, problem_file = problem
            flush = L2_FLUSH_BYTES if row.get("l2_flush") else 0
            params = {"mode": "eager", "level": level, "problem_set": V01, "l2_flush_bytes": flush}
            rows.append(
                {
                    "kernel_id": stable_id(SOURCE, V01, level, problem_file),
                    "device_id": device.id,
                    "source": SOURCE,
                    "run_id": str(row.get("run_id") or run.name),
                    "params_json": canonical_json(params),
                    "duration_us": float(row["duration_us"]),
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
