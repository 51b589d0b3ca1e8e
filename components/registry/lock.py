"""One promotion at a time per registered model: an exclusive file lock keyed by the registry URI.

Why a file lock and not a registry transaction: MLflow has no compare-and-set on an alias. The
lock (``fcntl.flock`` under ``KERNELCAST_HOME/locks``) serialises promoters on one machine -- or on
every machine that shares that folder (NFS with lock support); the promoter also re-reads the
champion alias under the lock and refuses to move it when it changed since it judged (see
``components.registry.promote``). For promoters on machines that share no folder, point them at
one ``KERNELCAST_HOME`` for locks or run promotion from one place (the pipeline's register stage);
the re-read then narrows the window to the two alias writes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(lock_dir: Path, tracking_uri: str, model_name: str) -> Path:
    key = hashlib.sha256(f"{tracking_uri}\n{model_name}".encode()).hexdigest()[:24]
    return Path(lock_dir) / f"promote-{key}.lock"


@contextmanager
def promotion_lock(
    lock_dir: Path, tracking_uri: str, model_name: str, timeout_s: float = 300.0
) -> Iterator[Path]:
    """Hold the promotion lock of (``tracking_uri``, ``model_name``); TimeoutError after ``timeout_s``."""
    import fcntl

    path = lock_path(lock_dir, tracking_uri, model_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with path.open("a+") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another promotion of {model_name!r} on {tracking_uri} has held "
                        f"{path} for over {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.05)
        try:
            yield path
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
