"""A request's time limit, seen by the work behind it.

The server answers 504 when a request runs past its limit, but the worker thread doing the work cannot be
killed from outside. So the limit travels with the work: the handler sets a ``Deadline`` in a context
variable (``asyncio.to_thread`` copies the context into the worker), cancels it on timeout, and the
answering loops call ``check()`` between steps (each kernel group, each program prediction): a timed-out
request stops at the next step instead of compiling and tracing on for nobody. Work without a deadline (the
CLI, the pyfunc) never stops.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class DeadlineExceeded(RuntimeError):
    """The request this work belongs to ran out of time (or was cancelled); the message says where it
    stopped."""


@dataclass
class Deadline:
    expires_at: float  # time.monotonic() seconds
    cancelled: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def cancel(self) -> None:
        self.cancelled.set()

    def check(self, where: str) -> None:
        if self.cancelled.is_set() or time.monotonic() >= self.expires_at:
            raise DeadlineExceeded(f"request time limit reached; stopped before {where}")


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "kernelcast_deadline", default=None
)


def current() -> Deadline | None:
    return _CURRENT.get()


def check(where: str) -> None:
    """Raise DeadlineExceeded when the current request's limit has passed; a no-op outside a request."""
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.check(where)


@contextmanager
def bound(deadline: Deadline) -> Iterator[Deadline]:
    """``deadline`` is the current one inside the block (and in threads started with a copy of the
    context)."""
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)
