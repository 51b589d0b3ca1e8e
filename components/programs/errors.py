"""The one error type a whole-program question raises when it cannot be answered."""

from __future__ import annotations


class ProgramError(ValueError):
    """A module or source that cannot be traced or analysed; the message names it and says why."""
