"""`kernelcast train`."""

from __future__ import annotations

import typer


def train_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast train: not available in this build yet", err=True)
    raise typer.Exit(code=2)
