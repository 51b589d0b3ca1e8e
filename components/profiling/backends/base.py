"""The backend interface and the provenance every row carries."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from components.profiling.cases import Case
from components.profiling.rows import row_id


class BackendUnavailable(RuntimeError):
    """This backend cannot run on this machine (no GPU, tool missing, ...); the message says which."""


class CounterPermissionError(BackendUnavailable):
    """The profiler may not read GPU performance counters (NVIDIA ERR_NVGPUCTRPERM / AMD perfmon)."""


@dataclass(frozen=True)
class MeasureContext:
    device: str  # the device name the run was asked for (catalog name, or "host")
    run_id: str
    warmup: int = 5
    repeats: int = 25
    l2_flush: bool = True
    raw_dir: Path | None = None  # where the tool's own output for this chunk goes
    datasets_dir: Path | None = None  # KernelBench programs are read from here
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: str
    kinds: frozenset[str]  # case kinds this backend can measure

    def check(self) -> None:
        """Raise ``BackendUnavailable`` when this machine cannot run the backend."""

    def environment(self) -> dict[str, Any]:
        """``device_name``, ``tool``, ``tool_version``, ``clock_mode`` of this machine."""

    def measure(self, cases: list[Case], ctx: MeasureContext) -> list[dict[str, Any]]:
        """One or more rows per case (a failing case is a row with ``error``, never dropped)."""


def base_row(
    ctx: MeasureContext,
    env: dict[str, Any],
    backend: str,
    case: Case,
    kernel_name: str | None = None,
    kernel_position: int | None = None,
) -> dict[str, Any]:
    """The identity and provenance fields of one row; the backend adds the metrics."""
    return {
        "row_id": row_id(ctx.device, case.case_id, backend, ctx.run_id, kernel_position),
        "run_id": ctx.run_id,
        "device": ctx.device,
        "device_name": env["device_name"],
        "backend": backend,
        "tool": env["tool"],
        "tool_version": env["tool_version"],
        "clock_mode": env["clock_mode"],
        "warmup": ctx.warmup,
        "repeats": ctx.repeats,
        "l2_flush": bool(ctx.l2_flush and env.get("can_flush", True)),
        "case_id": case.case_id,
        "case": case.to_json(),
        "kernel_name": kernel_name,
        "kernel_position": kernel_position,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(),
        "error": None,
    }


def unsupported(
    ctx: MeasureContext, env: dict[str, Any], backend: str, case: Case, why: str
) -> dict[str, Any]:
    row = base_row(ctx, env, backend, case)
    row["error"] = why
    return row
