"""Profiling backends behind one interface: each measures a chunk of cases into canonical rows.

``events`` (CUDA events via torch), ``ncu`` (Nsight Compute raw CSV), ``rocprofv3`` (AMD kernel
trace + counters) and ``host`` (CPU timing through torch, for CI). ``get_backend(name)`` returns
one; ``Backend.check()`` raises ``BackendUnavailable`` naming what is missing on this machine
(no GPU, tool not on PATH, counters not permitted) before any case runs.
"""

from __future__ import annotations

from components.profiling.backends.base import (
    Backend,
    BackendUnavailable,
    CounterPermissionError,
    MeasureContext,
    base_row,
)

BACKEND_NAMES: tuple[str, ...] = ("events", "ncu", "rocprofv3", "host")


def get_backend(name: str) -> Backend:
    if name == "host":
        from components.profiling.backends.host import HostBackend

        return HostBackend()
    if name == "events":
        from components.profiling.backends.events import EventsBackend

        return EventsBackend()
    if name == "ncu":
        from components.profiling.backends.ncu import NcuBackend

        return NcuBackend()
    if name == "rocprofv3":
        from components.profiling.backends.rocprofv3 import RocprofBackend

        return RocprofBackend()
    raise ValueError(f"--backend {name!r}: choose one of {', '.join(BACKEND_NAMES)}")


__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BackendUnavailable",
    "CounterPermissionError",
    "MeasureContext",
    "base_row",
    "get_backend",
]
