"""Helpers shared by CLI commands: settings + environment, and clean user-facing errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

if TYPE_CHECKING:  # pydantic-settings costs ~0.2-0.4 s: --help and a fast error never load it
    from components.platform.config import Settings

P = ParamSpec("P")
R = TypeVar("R")


def dtype_help(default: str) -> str:
    """``--dtype``'s help from the one list of accepted dtypes (``components.physics.dtypes.DTYPES``), so a
    dtype added there is in every command's help."""
    from components.physics.dtypes import DTYPES

    return f"{' | '.join(DTYPES)} ({default})"


class UserError(Exception):
    """Bad input from the user: printed as one clear line, exit code 2, no traceback."""


def prepared_settings() -> Settings:
    """Settings with the process environment configured (telemetry off, state under home)."""
    from components.platform.config import get_settings
    from components.platform.runtime import configure_environment

    settings = get_settings()
    configure_environment(settings)
    return settings


def clean_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn expected input errors into a one-line message instead of a traceback."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (UserError, FileNotFoundError, ValueError, KeyError, LookupError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            typer.echo(f"error: {message}", err=True)
            sys.exit(2)

    return wrapper
