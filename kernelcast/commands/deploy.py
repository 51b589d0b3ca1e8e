"""`kernelcast deploy`: register infra/prefect.yaml's deployments (schedules, work pool) with Prefect."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


@clean_errors
def deploy_command(
    prefect_file: Annotated[
        Path | None, typer.Option("--prefect-file", help="deployments file (default infra/prefect.yaml)")
    ] = None,
    name: Annotated[
        list[str] | None, typer.Option("--name", help="register just this deployment (repeatable)")
    ] = None,
    work_pool: Annotated[
        str | None,
        typer.Option(
            "--work-pool",
            help=(
                "register every deployment on this `process` work pool instead of the file's "
                "(one VM, no Kubernetes)"
            ),
        ),
    ] = None,
    pool_type: Annotated[
        str, typer.Option("--pool-type", help="type of the file's work pool when it must be created")
    ] = "kubernetes",
    api_url: Annotated[
        str | None,
        typer.Option(
            "--api-url", help=("Prefect server (default: KERNELCAST_PREFECT_API_URL / PREFECT_API_URL)")
        ),
    ] = None,
) -> None:
    """Register the deployments with their schedules; then `prefect worker start --pool POOL` runs them.

    Needs a Prefect server that outlives this command (`prefect server start`, or the team's):
    deployments registered on a temporary server would vanish with it.
    """
    from components.platform.config import PROJECT_ROOT
    from flows.deploy import PREFECT_YAML, read_deployments, register
    from flows.runtime import server_is_healthy

    settings = prepared_settings()
    target = api_url or settings.prefect_api_url
    if target is None:
        from prefect.settings import PREFECT_API_URL

        target = PREFECT_API_URL.value()
    if not target:
        raise UserError(
            "no Prefect server: start one (`prefect server start`) and pass --api-url "
            "http://127.0.0.1:4200/api, or set KERNELCAST_PREFECT_API_URL"
        )
    if not server_is_healthy(target):
        raise UserError(f"--api-url {target}: no Prefect server answers there")
    specs, pull_steps = read_deployments(prefect_file or PREFECT_YAML, name)
    from flows.runtime import prefect_server  # points this process's client at target

    settings = settings.model_copy(update={"prefect_api_url": target})
    with prefect_server(settings):
        registered = register(
            specs,
            pull_steps,
            work_pool=work_pool,
            path=str(PROJECT_ROOT) if work_pool else None,
            pool_type=pool_type,
        )
    for entry in registered:
        schedules = ", ".join(str(s) for s in entry["schedules"]) or "no schedule"
        created = " (work pool created)" if entry["work_pool_created"] else ""
        typer.echo(f"{entry['name']:<48} pool {entry['work_pool']}{created}; {schedules}")
    pools = sorted({entry["work_pool"] for entry in registered})
    typer.echo(
        f"registered {len(registered)} deployment(s) on {target}; run them with "
        + " / ".join(f"`prefect worker start --pool {pool}`" for pool in pools)
    )
