"""`kernelcast serve`."""

from __future__ import annotations

import typer


def serve_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast serve: not available in this build yet", err=True)
    raise typer.Exit(code=2)
