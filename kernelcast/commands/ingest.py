"""`kernelcast ingest`."""

from __future__ import annotations

import typer


def ingest_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast ingest: not available in this build yet", err=True)
    raise typer.Exit(code=2)
