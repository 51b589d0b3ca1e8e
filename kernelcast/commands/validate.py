"""`kernelcast validate`."""

from __future__ import annotations

import typer


def validate_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast validate: not available in this build yet", err=True)
    raise typer.Exit(code=2)
