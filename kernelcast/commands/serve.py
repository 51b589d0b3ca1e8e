"""`kernelcast serve`: the HTTP prediction service (FastAPI + uvicorn) on loopback by default."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelcast.commands._common import clean_errors, prepared_settings


@clean_errors
def serve_command(
    model: Annotated[str, typer.Option(help="models:/kernelcast@champion, a predictor dir, or 'roofline'")] = (
        "models:/kernelcast@champion"),
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
) -> None:
    """Serve POST /predict, GET /devices and GET /health."""
    prepared_settings()
    import uvicorn

    from components.serving.app import create_app

    uvicorn.run(create_app(model), host=host, port=port, log_level="info")
