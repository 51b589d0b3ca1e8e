"""`kernelcast promote`: move the registry's `champion` alias, only through the threshold gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import clean_errors, prepared_settings


@clean_errors
def promote_command(
    version: Annotated[
        int | None, typer.Option("--version", "-v", help="registered model version to promote")
    ] = None,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="point `champion` back at `previous-champion`")
    ] = False,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="registered model (default: settings.registered_model)")
    ] = None,
    registration: Annotated[
        Path | None, typer.Option("--registration", help="registration.json written by `kernelcast train`")
    ] = None,
    allow_challenger: Annotated[
        bool, typer.Option("--allow-challenger", help="exit 0 when the version stays challenger (pipelines)")
    ] = False,
    report: Annotated[Path | None, typer.Option("--report", help="write the promotion result as JSON")] = None,
) -> None:
    """Make VERSION the challenger, and the champion if it meets params.yaml `register:` thresholds
    and beats the current champion (metrics are the ones logged with the version's run).

    Exit code 0 when `champion` moved, 1 when the version was kept as challenger only.
    """
    from components.config import load_params
    from components.registry.promote import PromoteInputs, gate_thresholds, promote_stage

    settings = prepared_settings()
    inputs = PromoteInputs(tracking_uri=settings.tracking_uri(), model_name=model_name,
                           default_model=settings.registered_model,
                           version=None if version is None else str(version), registration=registration,
                           rollback=rollback, report=report)
    params_file = settings.params_file
    thresholds = None if rollback else gate_thresholds(load_params(params_file), str(params_file))
    result = promote_stage(inputs, thresholds)
    if result.rolled_back:
        typer.echo(f"{result.model_name}: champion -> v{result.champion} ({result.reason})")
        return
    status = "champion" if result.promoted else "challenger only"
    typer.echo(f"{result.model_name} v{result.version}: {status} ({result.reason}); "
               f"champion is v{result.champion}")
    for failure in result.failures:
        typer.echo(f"  threshold failed: {failure}")
    if not result.promoted and not allow_challenger:
        raise typer.Exit(code=1)
