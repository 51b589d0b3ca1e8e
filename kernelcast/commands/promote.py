"""`kernelcast promote`."""

from __future__ import annotations

import typer


def promote_command() -> None:
    """Not built yet."""
    typer.echo("kernelcast promote: not available in this build yet", err=True)
    raise typer.Exit(code=2)
