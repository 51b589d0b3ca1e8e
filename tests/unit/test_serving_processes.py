"""A service run as a child process group stops whole -- grandchildren included -- with kernelcast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from components.serving.processes import run_process_group, stop_group


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_sigterm_to_the_supervisor_stops_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The "service": a leader that starts two workers (which ignore nothing) and waits, like mlflow server.
    service = f"sleep 300 & echo $! >> {pids}; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    supervisor = textwrap.dedent(f"""
        import sys
        from components.serving.processes import run_process_group
        sys.exit(run_process_group(["sh", "-c", {service!r}], grace_s=5))
    """)
    process = subprocess.Popen([sys.executable, "-c", supervisor], cwd=Path(__file__).resolve().parents[2])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 3):
        time.sleep(0.1)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3 and all(_alive(p) for p in started)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.1)
    assert not any(_alive(p) for p in started), "a process of the service outlived kernelcast"


def test_workers_left_behind_by_an_exiting_leader_are_stopped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The leader exits at once; its worker would otherwise linger as an orphan.
    code = run_process_group(["sh", "-c", f"sleep 300 & echo $! > {pids}; exit 3"], grace_s=5)
    assert code == 3
    worker = int(pids.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.1)
    assert not _alive(worker)


def test_stop_group_escalates_to_sigkill() -> None:
    # The shell says "ready" once its trap is set (an explicit event, not a 0.3 s guess that a busy
    # box can lose: a SIGTERM before the trap would end the shell and never test the escalation).
    stubborn = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; echo ready; sleep 300"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline().strip() == "ready"
    stop_group(stubborn.pid, signal.SIGTERM, grace_s=1.0, leader=stubborn)
    assert stubborn.wait(timeout=10) == -signal.SIGKILL
    stubborn.stdout.close()
