"""`kernelcast serve`: the HTTP prediction service (FastAPI + uvicorn), loopback by default.

    kernelcast serve --port 8000                              # POST /v1/predict, /v1/rank; docs at /docs
    KC_KEY=secret kernelcast serve --host 0.0.0.0 --api-key-env KC_KEY

The server runs as a child process group: SIGINT/SIGTERM stop it and everything it started.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


@clean_errors
def serve_command(
    model: Annotated[
        str,
        typer.Option(
            help="models:/kernelcast@champion (followed when the alias moves), a predictor dir, or 'roofline'"
        ),
    ] = "models:/kernelcast@champion",
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port", min=1, max=65535)] = 8000,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            help="environment variable holding the API key; requests then need 'Authorization: Bearer <key>'"
        ),
    ] = None,
    allow_modules: Annotated[
        bool, typer.Option(help="answer PyTorch module questions (traced in a sandbox)")
    ] = False,
    max_body_kb: Annotated[int, typer.Option(help="request body limit (KiB)", min=1, max=65536)] = 1024,
    max_questions: Annotated[
        int, typer.Option(help="kernels x devices per request", min=1, max=1_000_000)
    ] = 4096,
    timeout_s: Annotated[float, typer.Option(help="per-request time limit (s)", min=0.1, max=600)] = 20.0,
    poll_s: Annotated[
        float,
        typer.Option(help="how often to check the registry alias for a new model (s)", min=0.5, max=3600),
    ] = 5.0,
) -> None:
    """Serve POST /v1/predict and /v1/rank, GET /v1/devices, /healthz, /readyz (OpenAPI docs at /docs)."""
    prepared_settings()
    from components.serving.processes import run_process_group

    if api_key_env is not None and not os.environ.get(api_key_env):
        raise UserError(f"--api-key-env {api_key_env}: the variable is unset or empty")
    if host not in ("127.0.0.1", "localhost", "::1") and api_key_env is None:
        typer.echo(
            f"warning: serving on {host} without --api-key-env: anyone who can reach it may query it",
            err=True,
        )
    config = {
        "host": host,
        "port": port,
        "model": model,
        "api_key_env": api_key_env,
        "allow_modules": allow_modules,
        "limits": {
            "max_body_bytes": max_body_kb * 1024,
            "max_questions": max_questions,
            "request_timeout_s": timeout_s,
            "poll_s": poll_s,
        },
    }
    typer.echo(f"kernelcast serving {model} on http://{host}:{port} (docs: /docs)")
    code = run_process_group(
        [
            sys.executable,
            "-c",
            "import sys; from components.serving.app import run_server; run_server(sys.argv[1])",
            json.dumps(config),
        ]
    )
    raise typer.Exit(code=0 if code in (0, 128 + 2, 128 + 15) else code)
