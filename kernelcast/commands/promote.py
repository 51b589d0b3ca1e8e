"""`kernelcast promote`: move the registry's `champion` alias, only through the threshold gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


def _register_thresholds(params_file: Any) -> dict[str, float]:
    import yaml

    params = yaml.safe_load(params_file.read_text()) or {}
    thresholds = params.get("register")
    if not thresholds:
        raise UserError(f"{params_file} has no 'register:' thresholds; refusing to promote without a gate")
    return {key: float(value) for key, value in thresholds.items()}


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
    from components.registry import mlflow_registry as registry

    if registration is not None:
        if version is not None or rollback:
            raise UserError("--registration replaces --version; give one of them")
        if not registration.is_file():
            raise UserError(f"--registration {registration}: file not found (run `kernelcast train` first)")
        recorded = json.loads(registration.read_text())
        if recorded.get("version") is None:
            raise UserError(f"--registration {registration}: the model was trained with --no-register")
        version = int(recorded["version"])
        model_name = model_name or recorded.get("model_name")
    if rollback == (version is not None):
        raise UserError("give exactly one of --version N, --registration FILE or --rollback")
    settings = prepared_settings()
    name = model_name or settings.registered_model
    uri = settings.tracking_uri()

    if rollback:
        result = registry.rollback(name, tracking_uri=uri)
        typer.echo(f"{name}: champion -> v{result.champion} ({result.reason})")
        return

    if not _version_exists(name, version, uri):
        raise UserError(f"model {name!r} has no version {version} in {uri}")
    result = registry.promote(name, str(version), None, _register_thresholds(settings.params_file), tracking_uri=uri)
    status = "champion" if result.promoted else "challenger only"
    typer.echo(f"{name} v{result.version}: {status} ({result.reason}); champion is v{result.champion}")
    for failure in result.failures:
        typer.echo(f"  threshold failed: {failure}")
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps({"model_name": name, "version": result.version, "promoted": result.promoted,
                                      "champion": result.champion, "reason": result.reason,
                                      "failures": list(result.failures)}, indent=2, sort_keys=True))
    if not result.promoted and not allow_challenger:
        raise typer.Exit(code=1)


def _version_exists(name: str, version: int | None, tracking_uri: str) -> bool:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri).get_model_version(name, str(version))
    except MlflowException:
        return False
    return True
