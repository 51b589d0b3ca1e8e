"""`kernelcast profile`."""

from __future__ import annotations

import typer


def profile_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast profile: not available in this build yet", err=True)
    raise typer.Exit(code=2)
