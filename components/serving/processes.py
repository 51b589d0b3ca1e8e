"""Run a service as a child process group that stops, whole, with the kernelcast process.

Why: ``mlflow server`` starts uvicorn/gunicorn workers, and the prediction server may start
compiler subprocesses; stopping only the direct child leaves the rest running (seen: MLflow's
workers outliving ``kernelcast mlflow-ui``). The child runs in its own session (process group);
SIGINT/SIGTERM/SIGHUP to kernelcast are forwarded to the whole group, then -- after a grace
period -- SIGKILL; and whatever is still in the group when the leader exits is stopped too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

FORWARDED: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(
    pgid: int, signum: int = signal.SIGTERM, grace_s: float = 10.0, leader: subprocess.Popen | None = None
) -> None:
    """Signal every process of group ``pgid``; SIGKILL whatever is left after ``grace_s``.

    ``leader``: our own child leading the group -- reaped while waiting, or as a zombie it would
    keep the group "alive" for the whole grace period.
    """
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_process_group(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, grace_s: float = 10.0
) -> int:
    """Run ``command`` as the leader of a new process group until it exits or we are signalled.

    Returns the child's exit code (128 + signal when we stopped it on a signal).
    """
    child = subprocess.Popen(
        list(command), env=dict(env) if env is not None else None, start_new_session=True
    )
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if received:
                    # Forwarded already; give the group its grace period, then make sure.
                    stop_group(child.pid, received[-1], grace_s, child)
                    code = child.wait()
                    break
    finally:
        stop_group(child.pid, signal.SIGTERM, grace_s, child)  # workers the leader left behind
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 + received[-1] if received else code
