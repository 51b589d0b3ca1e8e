"""`kernelcast pipeline`."""

from __future__ import annotations

import typer


def pipeline_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast pipeline: not available in this build yet", err=True)
    raise typer.Exit(code=2)
