"""Retry policy for tasks that do I/O: retry what may pass on a second try, never bad input.

Prefect calls ``transient_only(task, task_run, state)`` after a failed attempt; a task declared with
``retries=N, retry_condition_fn=transient_only`` retries network and disk hiccups (``OSError``:
connection reset, timeout, a busy file) but not an input that is wrong (a missing file, an
unknown name, a bad value), which would fail the same way every time.
"""

from __future__ import annotations

from typing import Any

# Deterministic: the same input fails the same way on every attempt.
BAD_INPUT: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ValueError,
    LookupError,
    TypeError,
)


def is_transient(error: BaseException) -> bool:
    """True for I/O errors worth another attempt (``OSError`` that is not a bad-input error)."""
    return isinstance(error, OSError) and not isinstance(error, BAD_INPUT)


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` for Prefect tasks: retry only when the attempt failed on transient I/O."""
    try:
        state.result()
    except BaseException as error:
        return is_transient(error)
    return False
