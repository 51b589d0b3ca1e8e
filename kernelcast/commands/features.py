"""`kernelcast features` subcommands."""

from __future__ import annotations

import typer

app = typer.Typer(help="features", no_args_is_help=True)
