"""The promotion lock (``components.registry.lock`` on ``components.common.file_lock``): a second promoter
waits its timeout and fails naming the model; a killed holder's lock is taken over at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]

_HOLD = """
import sys
from pathlib import Path
from components.registry.lock import promotion_lock
with promotion_lock(Path(sys.argv[1]), "sqlite:///x.db", "kernelcast"):
    print("held", flush=True)
    sys.stdin.read()  # held until the test kills it
"""


def test_a_second_promoter_times_out_naming_the_model_and_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    from components.registry.lock import lock_path, promotion_lock

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)],
        cwd=PROJECT_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
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
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the file stays, its flock dies
        holder.wait()
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.stdout.close()
    path = lock_path(tmp_path, "sqlite:///x.db", "kernelcast")
    assert path.exists()
    with promotion_lock(tmp_path, "sqlite:///x.db", "kernelcast", timeout_s=0) as held:
        assert held == path
