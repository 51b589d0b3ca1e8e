"""A JSON object asked for by a user (a question row, a launch, a deployment): parsed and checked once.

One error per problem, naming the input (``where``) and what is wrong, raised as the caller's error type
(``QueryError``, ``ProgramError``, ...), so each surface keeps its own one-line error path.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any


def json_object(
    value: Any,
    where: str,
    error: type[Exception],
    allowed: Collection[str] | None = None,
    expected: str = "expected a JSON object",
) -> dict[str, Any]:
    """``value`` (a dict, or the JSON text of one) as a dict whose keys are all in ``allowed`` (None: any)."""
    prefix = f"{where}: " if where else ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise error(f"{prefix}not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict):
        raise error(f"{prefix}{expected}")
    unknown = sorted(set(value) - set(allowed)) if allowed is not None else []
    if unknown:
        raise error(f"{prefix}unknown field {unknown[0]!r}; accepted: {', '.join(sorted(allowed or ()))}")
    return value
