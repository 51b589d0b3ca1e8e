"""`kernelcast mlflow-ui`: open the MLflow UI on the embedded (or configured) tracking store.

The MLflow server and its workers run as one child process group: SIGINT/SIGTERM to kernelcast
stop all of them (MLflow's workers used to outlive it).

Start-up: MLflow's defaults are four uvicorn workers and a job-execution runner (huey, for the GenAI
features' background jobs), each importing MLflow again; on a 2-core box those imports, side by side,
were most of the 36-65 s before the first page. One person browsing runs needs one worker and no jobs
(``--workers`` for a shared server; ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true`` brings the runner back).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from kernelcast.commands._common import prepared_settings

JOB_EXECUTION_DEFAULT = "false"  # unless the caller's environment says otherwise (see the module docstring)


def mlflow_ui_command(
    port: Annotated[int, typer.Option(help="port to listen on (loopback only)")] = 5000,
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    workers: Annotated[
        int, typer.Option(min=1, help="uvicorn worker processes (1 starts fastest; more for a shared server)")
    ] = 1,
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
        "--workers",
        str(workers),
    ]
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": JOB_EXECUTION_DEFAULT, **os.environ}
    typer.echo(f"MLflow UI on http://{host}:{port} (store: {settings.tracking_uri()})")
    code = run_process_group(command, env=env)
    raise typer.Exit(code=0 if code in (128 + 2, 128 + 15) else code)
