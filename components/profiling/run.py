"""The profile stage: a suite on one device, as Ray jobs (or in-process), into a run folder.

``profile_run`` is the one function behind ``kernelcast profile``, the ``profile_device`` Prefect
flow and the profiling step of ``retrain_on_new_gpu``. The run folder (``components/profiling/rows.py``)
is what ``kernelcast ingest --source kernelcast --from <parent>`` reads. Re-running into an existing
run folder of the same device/backend/suite resumes it: finished chunks are kept, the rest measured.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.profiling.backends import BACKEND_NAMES
from components.profiling.cases import Case, chunked, load_cases, read_suite
from components.profiling.rows import ROWS_FORMAT, read_manifest, read_rows, write_manifest
from components.profiling.schedule import (
    FAULT_ENV,
    HOLD_ENV,
    ChunkJob,
    check_available,
    placement_for,
    run_jobs,
    run_jobs_local,
)


class ProfilingError(RuntimeError):
    """The run produced nothing usable (every chunk failed); the message names the first reason."""


@dataclass(frozen=True)
class ProfileInputs:
    device: str  # catalog GPU name/alias, or "host"
    backend: str = "events"  # events | ncu | rocprofv3 | host
    suite: str = "smoke"  # a name under components/profiling/suites or a suite YAML path
    out_dir: Path | None = None  # run folder; default <state>/data/profiles/<run_id>
    run_id: str | None = None
    chunk_size: int = 8
    warmup: int | None = None  # default: the suite's, else 5
    repeats: int | None = None  # default: the suite's, else 25
    l2_flush: bool = True
    use_ray: bool = True
    ray_address: str | None = None  # None: the configured cluster (KERNELCAST_RAY_ADDRESS) or a local Ray
    timeout_s: float = 3600.0
    max_retries: int = 3
    case_filter: str = ""
    limit: int = 0
    model: str | None = None  # active-learning suites: the model whose intervals choose the cases
    # Active-learning suites: ``chooser(model, device_id)`` -> ``select(candidates, budget)``. It asks the
    # model, so it lives above profiling (``components.serving.active.interval_selector``); the caller
    # that profiles an active suite passes it.
    chooser: Callable[[str, str], Callable[[list[Case], int], list[Case]]] | None = None


@dataclass
class ProfileResult:
    run_dir: Path
    manifest: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def report(self) -> dict[str, Any]:
        return self.manifest["report"]


PROFILE_KEYS = frozenset({"chunk_size", "timeout_s", "max_retries", "l2_flush"})


def profile_params(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``profile:`` section of params.yaml (unknown keys are an error naming the key)."""
    from components.platform.config import load_params, section

    return section(params if params is not None else load_params(), "profile", allowed=PROFILE_KEYS)


def default_run_id(device: str, backend: str, suite: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{device}-{backend}-{Path(suite).stem}-{stamp}".lower().replace(" ", "-")


def chunk_id(index: int, device: str, backend: str, cases: list[Case]) -> str:
    digest = hashlib.sha1("\x1f".join([device, backend, *(c.case_id for c in cases)]).encode()).hexdigest()[
        :10
    ]
    return f"{index:04d}-{digest}"


def _select_cases(inputs: ProfileInputs, device_id: str) -> list[Case]:
    select = None
    if inputs.model is not None:
        if inputs.chooser is None:
            raise ValueError(
                f"--model {inputs.model}: no active-learning chooser given to choose the cases with"
            )
        select = inputs.chooser(inputs.model, device_id)
    cases = [c for c in load_cases(inputs.suite, select=select) if inputs.case_filter in c.case_id]
    if inputs.limit:
        cases = cases[: inputs.limit]
    if not cases:
        raise ValueError(f"--suite {inputs.suite}: no cases left after --filter {inputs.case_filter!r}")
    return cases


def _check(inputs: ProfileInputs) -> None:
    if inputs.backend not in BACKEND_NAMES:
        raise ValueError(f"--backend {inputs.backend!r}: choose one of {', '.join(BACKEND_NAMES)}")
    for name in ("warmup", "repeats"):
        value = getattr(inputs, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise ValueError(f"--{name} {value}: must be at least {0 if name == 'warmup' else 1}")
    if inputs.timeout_s <= 0:
        raise ValueError(f"--timeout {inputs.timeout_s}: must be positive")


def _resume_or_new(run_dir: Path, identity: dict[str, Any]) -> None:
    if not (run_dir / "manifest.json").exists():
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ValueError(f"--out {run_dir}: exists and is not a profiling run folder")
        return
    old = read_manifest(run_dir)
    clash = [k for k, v in identity.items() if old.get(k) != v]
    if clash:
        raise ValueError(
            f"--out {run_dir}: holds a run of another {clash[0]} ({old.get(clash[0])!r}); give a new folder"
        )


def _start_ray(ray_address: str | None) -> None:
    from components.platform.config import get_settings
    from components.platform.runtime import ensure_ray

    settings = get_settings()
    if ray_address:
        settings = settings.model_copy(update={"ray_address": ray_address})
    ensure_ray(settings)


def profile_run(inputs: ProfileInputs) -> ProfileResult:
    """Measure ``inputs.suite`` on ``inputs.device`` with ``inputs.backend``; write and return the run
    folder."""
    import os

    from components.platform.config import get_settings

    _check(inputs)
    placement = placement_for(inputs.device, inputs.backend)
    suite = read_suite(inputs.suite)
    cases = _select_cases(inputs, placement.device)
    run_id = inputs.run_id or (
        Path(inputs.out_dir).name
        if inputs.out_dir
        else default_run_id(placement.device, inputs.backend, inputs.suite)
    )
    run_dir = Path(inputs.out_dir) if inputs.out_dir else get_settings().data_dir / "profiles" / run_id
    identity = {
        "format": ROWS_FORMAT,
        "device": placement.device,
        "backend": inputs.backend,
        "suite": Path(inputs.suite).stem,
        "run_id": run_id,
    }
    _resume_or_new(run_dir, identity)
    warmup = inputs.warmup if inputs.warmup is not None else int(suite.get("warmup", 5))
    repeats = inputs.repeats if inputs.repeats is not None else int(suite.get("repeats", 25))
    groups = chunked(cases, inputs.chunk_size)
    jobs = [
        ChunkJob(
            run_dir=str(run_dir.resolve()),
            chunk_id=chunk_id(i, placement.device, inputs.backend, g),
            index=i,
            cases=[c.to_json() for c in g],
            backend=inputs.backend,
            device=placement.device,
            run_id=run_id,
            warmup=warmup,
            repeats=repeats,
            l2_flush=inputs.l2_flush,
            datasets_dir=str(get_settings().datasets_dir),
            fault=os.environ.get(FAULT_ENV),
            hold=os.environ.get(HOLD_ENV),
        )
        for i, g in enumerate(groups)
    ]
    manifest: dict[str, Any] = {
        **identity,
        "created": dt.datetime.now(dt.UTC).isoformat(),
        "status": "running",
        "warmup": warmup,
        "repeats": repeats,
        "l2_flush": inputs.l2_flush,
        "cases": len(cases),
        "chunks": [j.chunk_id for j in jobs],
        "placement": {"accelerator_type": placement.accelerator_type, "num_gpus": placement.num_gpus},
        "scheduler": "ray" if inputs.use_ray else "local",
    }
    if inputs.use_ray:  # an absent device is reported before anything is written
        _start_ray(inputs.ray_address)
        check_available(placement)
    (run_dir / "chunks").mkdir(parents=True, exist_ok=True)
    write_manifest(run_dir, manifest)
    if inputs.use_ray:
        report = run_jobs(jobs, placement, timeout_s=inputs.timeout_s, max_retries=inputs.max_retries)
    else:
        report = run_jobs_local(jobs)
    rows = read_rows(run_dir)
    errors = Counter(bool(r.get("error")) for r in rows)
    first = rows[0] if rows else {}
    manifest.update(
        {
            "status": "complete" if not (report.failed or report.timed_out) else "partial",
            "finished": dt.datetime.now(dt.UTC).isoformat(),
            "device_name": first.get("device_name"),
            "tool": first.get("tool"),
            "tool_version": first.get("tool_version"),
            "clock_mode": first.get("clock_mode"),
            "rows": len(rows),
            "rows_failed": errors[True],
            "report": report.as_dict(),
        }
    )
    write_manifest(run_dir, manifest)
    if not rows and (report.failed or report.timed_out):
        why = next(iter(report.failed.values()), None) or (
            f"{len(report.timed_out)} chunk(s) not finished within {inputs.timeout_s:g} s "
            f"(device {placement.device} busy or absent)"
        )
        raise ProfilingError(f"profiling {placement.device} with {inputs.backend} produced no rows: {why}")
    return ProfileResult(run_dir, manifest, rows)
