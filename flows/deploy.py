"""Register the deployments of ``infra/prefect.yaml`` (schedules, work pool) with a Prefect server.

The same file ``prefect deploy --prefect-file infra/prefect.yaml --all`` reads; this registers it
through the Prefect client without building or pushing anything (the worker image already holds
the project), creating the work pool first when it does not exist. A deployment that exists is
updated in place (its schedules replaced), so ``kernelcast deploy`` can be rerun after an edit.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.platform.config import PROJECT_ROOT

PREFECT_YAML = PROJECT_ROOT / "infra" / "prefect.yaml"


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    entrypoint: str  # "flows/x.py:flow_function"
    work_pool: str
    work_queue: str | None = None
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    schedules: tuple[dict[str, Any], ...] = ()
    job_variables: dict[str, Any] = field(default_factory=dict)
    concurrency_limit: int | None = None
    tags: tuple[str, ...] = ()


def read_deployments(
    path: Path = PREFECT_YAML, only: list[str] | None = None
) -> tuple[list[DeploymentSpec], list]:
    """Deployments (and the file's pull steps) from a ``prefect.yaml``; errors name the deployment."""
    import yaml

    try:
        document = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise FileNotFoundError(f"deployments file not found: {path}") from None
    entries = document.get("deployments") or []
    names = [str(e.get("name")) for e in entries]
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise ValueError(
            f"--name {', '.join(unknown)}: no such deployment in {path}; it has {', '.join(names)}"
        )
    specs = []
    for entry in entries:
        name = str(entry.get("name"))
        if only and name not in only:
            continue
        pool = entry.get("work_pool") or {}
        if not entry.get("entrypoint") or not pool.get("name"):
            raise ValueError(f"{path}: deployment {name!r} needs an entrypoint and a work_pool.name")
        schedules = tuple(entry.get("schedules") or [])
        for schedule in schedules:
            if not any(k in schedule for k in ("cron", "interval", "rrule")):
                raise ValueError(
                    f"{path}: deployment {name!r} has a schedule without cron, interval or rrule"
                )
        specs.append(
            DeploymentSpec(
                name=name,
                entrypoint=str(entry["entrypoint"]),
                work_pool=str(pool["name"]),
                work_queue=pool.get("work_queue_name"),
                description=entry.get("description"),
                parameters=dict(entry.get("parameters") or {}),
                schedules=schedules,
                job_variables=dict(pool.get("job_variables") or {}),
                concurrency_limit=entry.get("concurrency_limit"),
                tags=tuple(entry.get("tags") or ()),
            )
        )
    return specs, list(document.get("pull") or [])


def load_flow(entrypoint: str) -> Any:
    """The flow object an entrypoint (``flows/x.py:name``) names, imported as a module of ours."""
    from prefect import Flow

    path, _, attribute = entrypoint.partition(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    candidate = getattr(module, attribute, None)
    if not isinstance(candidate, Flow):
        raise ValueError(f"entrypoint {entrypoint!r} is not a Prefect flow")
    return candidate


def _schedule(entry: dict[str, Any]) -> Any:
    import datetime as dt

    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule, RRuleSchedule

    timezone = entry.get("timezone")
    if "cron" in entry:
        schedule: Any = CronSchedule(cron=entry["cron"], timezone=timezone)
    elif "interval" in entry:
        every = dt.timedelta(seconds=float(entry["interval"]))
        schedule = IntervalSchedule(interval=every, timezone=timezone)
    else:
        schedule = RRuleSchedule(rrule=entry["rrule"], timezone=timezone)
    return DeploymentScheduleCreate(schedule=schedule, active=bool(entry.get("active", True)))


def ensure_work_pool(client: Any, name: str, pool_type: str) -> bool:
    """Create work pool ``name`` of ``pool_type`` unless it exists; True when created."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    try:
        client.read_work_pool(name)
        return False
    except ObjectNotFound:
        client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
        return True


def register(
    specs: list[DeploymentSpec],
    pull_steps: list,
    work_pool: str | None = None,
    path: str | None = None,
    pool_type: str = "kubernetes",
) -> list[dict[str, Any]]:
    """Register every spec with the Prefect API this process points at; returns what was registered.

    A missing work pool is created with ``pool_type``; ``work_pool`` replaces the file's pool with a
    ``process`` pool (one VM: the worker runs flows as subprocesses in this checkout, ``path``).
    """
    from prefect import get_client
    from prefect.utilities.callables import parameter_schema

    if work_pool and path:  # this checkout, not the worker image's /opt/kernelcast
        pull_steps = [{"prefect.deployments.steps.set_working_directory": {"directory": path}}]
    registered = []
    with get_client(sync_client=True) as client:
        for spec in specs:
            flow = load_flow(spec.entrypoint)
            pool = work_pool or spec.work_pool
            created = ensure_work_pool(client, pool, "process" if work_pool else pool_type)
            flow_id = client.create_flow_from_name(flow.name)
            deployment_id = client.create_deployment(
                flow_id=flow_id,
                name=spec.name,
                work_pool_name=pool,
                work_queue_name=spec.work_queue,
                schedules=[_schedule(s) for s in spec.schedules],
                parameters=spec.parameters,
                description=spec.description,
                entrypoint=spec.entrypoint,
                pull_steps=pull_steps or None,
                path=path,
                job_variables=spec.job_variables if not work_pool else {},
                concurrency_limit=spec.concurrency_limit,
                tags=list(spec.tags),
                parameter_openapi_schema=parameter_schema(flow).model_dump(exclude_unset=True),
                enforce_parameter_schema=True,
            )
            schedules = [s.get("cron") or s.get("interval") or s.get("rrule") for s in spec.schedules]
            registered.append(
                {
                    "name": f"{flow.name}/{spec.name}",
                    "id": str(deployment_id),
                    "work_pool": pool,
                    "work_pool_created": created,
                    "schedules": schedules,
                }
            )
    return registered


__all__ = ["PREFECT_YAML", "DeploymentSpec", "load_flow", "read_deployments", "register"]
