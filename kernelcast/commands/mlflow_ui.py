"""`kernelcast mlflow-ui`: open the MLflow UI on the embedded (or configured) tracking store.

The MLflow server and its workers run as one child process group: SIGINT/SIGTERM to kernelcast
stop all of them (MLflow's workers used to outlive it).
"""

from __future__ import annotations

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
    from components.serving.processes import run_process_group

    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        settings.tracking_uri(),
        "--default-artifact-root",
        settings.artifact_root(),
        "--host",
        host,
        "--port",
        str(port),
    ]
    typer.echo(f"MLflow UI on http://{host}:{port} (store: {settings.tracking_uri()})")
    code = run_process_group(command)
    raise typer.Exit(code=0 if code in (128 + 2, 128 + 15) else code)
