"""`kernelcast devices` subcommands."""

from __future__ import annotations

import typer

app = typer.Typer(help="devices", no_args_is_help=True)
