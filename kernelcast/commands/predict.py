"""`kernelcast predict`."""

from __future__ import annotations

import typer


def predict_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast predict: not available in this build yet", err=True)
    raise typer.Exit(code=2)
