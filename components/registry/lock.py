"""One promotion at a time per registered model: an exclusive file lock keyed by the registry URI.

Why a file lock and not a registry transaction: MLflow has no compare-and-set on an alias. The lock
(``components.common.file_lock`` under ``KERNELCAST_HOME/locks``) serialises promoters on one machine --
or on every machine that shares that folder (NFS with lock support); the promoter also re-reads the
champion alias under the lock and refuses to move it when it changed since it judged (see
``components.registry.promote``). For promoters on machines that share no folder, point them at
one ``KERNELCAST_HOME`` for locks or run promotion from one place (the pipeline's register stage);
the re-read then narrows the window to the two alias writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components.common.file_lock import exclusive


def lock_path(lock_dir: Path, tracking_uri: str, model_name: str) -> Path:
    key = hashlib.sha256(f"{tracking_uri}\n{model_name}".encode()).hexdigest()[:24]
    return Path(lock_dir) / f"promote-{key}.lock"


@contextmanager
def promotion_lock(
    lock_dir: Path, tracking_uri: str, model_name: str, timeout_s: float = 300.0
) -> Iterator[Path]:
    """Hold the promotion lock of (``tracking_uri``, ``model_name``); TimeoutError after ``timeout_s``."""

    def busy(path: Path) -> TimeoutError:
        return TimeoutError(
            f"another promotion of {model_name!r} on {tracking_uri} has held {path} "
            f"for over {timeout_s:.0f} s"
        )

    with exclusive(lock_path(lock_dir, tracking_uri, model_name), timeout_s, busy) as path:
        yield path
