"""`kernelcast mlflow-ui`: open the MLflow UI on the embedded (or configured) tracking store."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer

from kernelcast.commands._common import prepared_settings


def mlflow_ui_command(
    port: Annotated[int, typer.Option(help="port to listen on (loopback only)")] = 5000,
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
) -> None:
    """Serve the MLflow UI for this installation's runs and registry."""
    settings = prepared_settings()
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", settings.tracking_uri(),
        "--default-artifact-root", settings.artifact_root(),
        "--host", host, "--port", str(port),
    ]
    typer.echo(f"MLflow UI on http://{host}:{port} (store: {settings.tracking_uri()})")
    raise typer.Exit(code=subprocess.call(command))
