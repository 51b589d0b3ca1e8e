"""Profiled rows: one canonical record per measured (device, case[, kernel], backend, run), with provenance.

Every backend writes the same row shape, so ingest, validation and the scheduler never care which
tool measured a row. A row's id is a stable hash of device + case (+ kernel position) + backend +
run, so a chunk that is measured twice (a retried worker, a resumed run) yields the same ids and
the reader can prove nothing was lost or duplicated.

A run folder (what ``kernelcast profile`` writes; ``components/ingest/profiled.py`` reads):
    manifest.json              format, device, backend, suite, tool + version, chunk list, report
    chunks/<chunk_id>.jsonl    one row per line; each file written atomically by the job that measured it
    raw/<chunk_id>/...         the tool's own output for that chunk (ncu CSV, rocprofv3 CSVs), for audit
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write_text
from components.profiling.records import RowsError, read_chunk, read_rows  # noqa: F401 -- re-exported

ROWS_FORMAT = "kernelcast-rows/1"
BACKENDS: tuple[str, ...] = ("events", "ncu", "rocprofv3", "host")
# How each backend's durations were taken (kept apart downstream: never mix replayed, clock-locked
# counter runs with free-running event timings).
CLOCK_MODES: tuple[str, ...] = ("boost", "locked", "base", "host", "unknown")
# Canonical ``profiler`` value of each backend in the measurements table.
PROFILER_OF_BACKEND: dict[str, str] = {
    "events": "cuda_event",
    "ncu": "ncu",
    "rocprofv3": "rocprofv3",
    "host": "host",
}


def row_id(device: str, case_id: str, backend: str, run_id: str, kernel_position: int | None = None) -> str:
    """Stable id of one row: the same measurement in a retried or resumed job gets the same id."""
    parts = [device, case_id, backend, run_id, "" if kernel_position is None else str(kernel_position)]
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:20]


def timing_stats(samples_us: Sequence[float]) -> dict[str, float]:
    """Median and spread of repeated timings (the row's ``duration_us`` is the median)."""
    if not samples_us:
        raise ValueError("no timing samples")
    ordered = sorted(samples_us)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {
        "duration_us": statistics.median(ordered),
        "duration_mean_us": statistics.fmean(ordered),
        "duration_std_us": statistics.pstdev(ordered),
        "duration_min_us": ordered[0],
        "duration_max_us": ordered[-1],
        "duration_iqr_us": quartiles[2] - quartiles[0],
    }


def _plain(value: Any) -> Any:
    """JSON-safe: NaN/inf become null (a missing metric is null, never a number)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _plain(value.item())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write_chunk(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write a chunk's rows atomically (readers see all of them or none); returns the count."""
    lines = [json.dumps(_plain(r), sort_keys=True) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise RowsError(f"{path}: missing (not a run folder)") from None
    except json.JSONDecodeError as exc:
        raise RowsError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise RowsError(f"{path}: expected a JSON object")
    return manifest


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_text(
        Path(run_dir) / "manifest.json", json.dumps(_plain(manifest), indent=2, sort_keys=True) + "\n"
    )
