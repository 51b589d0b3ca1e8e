"""An exclusive lock on a file, held for a block: ``filelock``'s ``flock``, with the caller's own error.

The kernel drops a ``flock`` when its holder dies, however it dies (SIGKILL, OOM): a lock file left behind
by a crashed holder is stale by construction and the next caller takes it over. ``flock`` is per host: a
folder on a shared filesystem used from two machines needs an external lock (NFS with lock support serves
the locks that need it; see their callers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(
    path: Path, timeout_s: float, busy: Callable[[Path], Exception], unlink: bool = False
) -> Iterator[Path]:
    """Hold the lock on ``path`` for the body, waiting at most ``timeout_s`` (0: never wait); raise
    ``busy(path)`` when another holder keeps it. ``unlink``: remove the file on release, while still holding
    the lock (a waiter that opened it retries on the new file)."""
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=timeout_s)
    try:
        lock.acquire(poll_interval=0.05)
    except Timeout:
        raise busy(path) from None
    try:
        yield path
    finally:
        if unlink:
            path.unlink(missing_ok=True)
        lock.release()
