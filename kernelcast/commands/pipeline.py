"""`kernelcast pipeline`: ingest -> validate -> features -> train -> evaluate -> register."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


@clean_errors
def pipeline_command(
    from_stage: Annotated[str | None, typer.Option("--from-stage", help="start at this stage")] = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="run just these stages (repeatable)")] = None,
    force: Annotated[bool, typer.Option(help="rerun stages even if DVC finds them up to date")] = False,
    push: Annotated[bool, typer.Option(help="push outputs to the DVC remote at the end")] = True,
) -> None:
    """Run the whole pipeline as a Prefect flow; each task reproduces one DVC stage."""
    from flows.pipeline import StageFailed, run_pipeline, select_stages

    settings = prepared_settings()
    stages = select_stages(from_stage, only)
    try:
        reports = run_pipeline(settings, stages, force=force, push=push)
    except StageFailed as exc:
        raise UserError(str(exc)) from exc
    for report in reports:
        typer.echo(f"{report['stage']:<10} {report['seconds']:>7.1f} s")
    typer.echo(f"pipeline done; MLflow UI: kernelcast mlflow-ui (store {settings.tracking_uri()})")
