"""One pipeline run per state folder: a lock file under KERNELCAST_HOME naming its holder.

Two runs on one state folder would interleave DVC stages and MLflow registrations, so the second is
refused with a message naming the holder (pid, host, start time, command). The lock
(``components.common.file_lock``) is on ``<home>/pipeline.lock``, held for the whole run: a lock left
behind by a crashed run is stale by construction and the next run takes it over -- the pid written in the
file is for the message only. A state folder on a shared filesystem used from two machines needs an
external lock (a Prefect concurrency limit on the deployment does that on a cluster).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from components.common.file_lock import exclusive

LOCK_NAME = "pipeline.lock"


class PipelineLocked(RuntimeError):
    """Another live run holds the state folder's lock; the message names it."""


@dataclass(frozen=True)
class LockInfo:
    path: Path
    pid: int
    stale_from: dict[str, object] | None  # what a dead previous holder had written, if anything


def lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / LOCK_NAME


def read_holder(path: Path) -> dict[str, object]:
    """What the holder wrote (pid, host, started, command); ``{}`` when unreadable or empty."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, object]) -> str:
    if not holder:
        return "another process"
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')} "
        f"({holder.get('command')})"
    )


@contextmanager
def pipeline_lock(state_dir: Path, command: str | None = None) -> Iterator[LockInfo]:
    """Hold ``<state_dir>/pipeline.lock`` for the body, or raise ``PipelineLocked`` at once.

    Never waits: a scheduled run that finds the folder busy fails fast and is retried by its
    schedule, rather than queueing behind an hour-long run.
    """

    def busy(path: Path) -> PipelineLocked:
        return PipelineLocked(
            f"{path}: another pipeline run holds this state folder ({_describe(read_holder(path))}); "
            "wait for it to finish, or point KERNELCAST_HOME elsewhere"
        )

    # unlinked on release while still held, so a waiter never locks a file about to vanish
    with exclusive(lock_path(state_dir), 0, busy, unlink=True) as path:
        previous = read_holder(path)  # written by a holder that died without releasing
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": command or " ".join(sys.argv),
        }
        with path.open("r+") as handle:  # the locked file itself (no rename: the lock is on this inode)
            handle.truncate()
            handle.write(json.dumps(holder) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        yield LockInfo(path, os.getpid(), previous or None)


__all__ = ["LOCK_NAME", "LockInfo", "PipelineLocked", "lock_path", "pipeline_lock", "read_holder"]
