"""The locks on ``components.common.file_lock``: the pipeline lock (``components.pipeline.lock``) refuses a
live holder naming it and takes over from a dead one; the promotion lock (``components.registry.lock``) makes
a second promoter wait its timeout and fail naming the model. Holders are real processes, killed as a crash
would."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]

_HOLD_PIPELINE = """
import sys
from pathlib import Path
from components.pipeline.lock import pipeline_lock
with pipeline_lock(Path(sys.argv[1]), "holder-under-test"):
    print("held", flush=True)
    sys.stdin.read()  # held until the test kills it (an event, not a 60 s sleep a busy box can outlast)
"""
_HOLD_PROMOTION = """
import sys
from pathlib import Path
from components.registry.lock import promotion_lock
with promotion_lock(Path(sys.argv[1]), "sqlite:///x.db", "kernelcast"):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def _held_by_another_process(script: str, folder: Path) -> Iterator[int]:
    """A process holding a lock under ``folder`` for the body (its pid), then SIGKILLed: a crash."""
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(folder)],
        cwd=PROJECT_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)  # the lock file stays, its flock dies
        holder.wait()
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.stdout.close()


def test_pipeline_lock_refuses_a_live_holder_and_takes_over_from_a_dead_one(tmp_path: Path) -> None:
    from components.pipeline.lock import PipelineLocked, pipeline_lock

    with _held_by_another_process(_HOLD_PIPELINE, tmp_path) as pid:
        expected = rf"pipeline\.lock: another pipeline run .*pid {pid} .*holder-under-test"
        with pytest.raises(PipelineLocked, match=expected), pipeline_lock(tmp_path):
            pass
    assert (tmp_path / "pipeline.lock").exists()
    with pipeline_lock(tmp_path, "second") as info:
        assert info.stale_from is not None and info.stale_from["pid"] == pid
        assert json.loads((tmp_path / "pipeline.lock").read_text())["command"] == "second"
    assert not (tmp_path / "pipeline.lock").exists()


def test_a_second_promoter_times_out_naming_the_model_and_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    from components.registry.lock import lock_path, promotion_lock

    with _held_by_another_process(_HOLD_PROMOTION, tmp_path):
        start = time.monotonic()
        with (
            pytest.raises(
                TimeoutError, match=r"another promotion of 'kernelcast' on sqlite:///x\.db has held"
            ),
            promotion_lock(tmp_path, "sqlite:///x.db", "kernelcast", timeout_s=0.3),
        ):
            pass
        assert time.monotonic() - start >= 0.3  # it waited its timeout before giving up
        with promotion_lock(tmp_path, "sqlite:///x.db", "another-model", timeout_s=0):
            pass  # another model's promotion is not held up
    path = lock_path(tmp_path, "sqlite:///x.db", "kernelcast")
    assert path.exists()
    with promotion_lock(tmp_path, "sqlite:///x.db", "kernelcast", timeout_s=0) as held:
        assert held == path
