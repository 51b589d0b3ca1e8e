"""`kernelcast evaluate`."""

from __future__ import annotations

import typer


def evaluate_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast evaluate: not available in this build yet", err=True)
    raise typer.Exit(code=2)
