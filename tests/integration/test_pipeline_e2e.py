"""`kernelcast pipeline` end to end on a small real subset (our 662 H100 rows), as a user runs it.

One run of the real command in a copy of the project (its own git + DVC repo, throw-away state):
- a crash injected right after the ``features`` stage (``KERNELCAST_FAULT_AFTER_STAGE``: the run
  SIGKILLs itself) -- and while it runs, a second pipeline on the same state folder is refused;
- the crashed run leaves no Prefect server behind;
- the rerun redoes only the unfinished stages (train, evaluate, register), shows progress lines
  with rows and ends with the promotion verdict and where to look;
- SIGTERM during a stage stops everything the run started (the stage's process tree with its local
  Ray, the Prefect server) and exits 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_services import _project_copy, _sh, short_tmp  # noqa: F401 -- fixture

pytestmark = pytest.mark.slow


def _env(repo: Path, root: Path, **extra: str) -> dict[str, str]:
    home = repo / ".kernelcast"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(repo),
        "KERNELCAST_HOME": str(home),
        "RAY_TMPDIR": str(home / "ray"),
        "KERNELCAST_DATASETS_DIR": str(root / "shared" / "datasets"),
        "KERNELCAST_RAY_NUM_CPUS": "2",
        "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow' / 'mlflow.db'}",
        "PREFECT_HOME": str(home / "prefect"),
        **extra,
    }
    for var in ("PREFECT_API_URL", "KERNELCAST_PREFECT_API_URL", "KERNELCAST_RAY_ADDRESS", "RAY_ADDRESS"):
        env.pop(var, None)
    return env


def _prefect_servers_under(home: Path) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if (
                "server" in cmdline
                and "prefect" in " ".join(cmdline)
                and proc.environ().get("PREFECT_HOME", "").startswith(str(home))
            ):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _ours(repo: Path) -> list[str]:
    """Processes still running from this project copy (cwd, command line or PREFECT_HOME under it)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            if proc.pid == os.getpid():
                continue
            text = " ".join(proc.info["cmdline"] or [])
            if (
                str(repo) in text
                or str(proc.info["cwd"] or "").startswith(str(repo))
                or proc.environ().get("PREFECT_HOME", "").startswith(str(repo))
            ):
                found.append(f"{proc.pid} {text[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _settled(value, timeout_s: float = 120.0):
    """Poll ``value()`` until it is empty (the event itself: processes gone), not a fixed sleep that a
    busy machine can outrun; after ``timeout_s`` return what is still there, for the assertion to name."""
    deadline = time.monotonic() + timeout_s
    found = value()
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found = value()
    return found


def test_pipeline_crash_resume_lock_and_verdict(short_tmp: Path) -> None:  # noqa: F811
    root = short_tmp
    repo = _project_copy(root)
    dvc = str(Path(sys.executable).with_name("dvc"))
    env = _env(repo, root)
    _sh(["git", "init", "-q", "-b", "main"], repo, env)
    _sh([dvc, "init", "-q"], repo, env)
    (repo / ".gitignore").write_text("__pycache__/\n/.kernelcast/\n")
    kernelcast = str(Path(sys.executable).with_name("kernelcast"))

    started = time.monotonic()
    # The crash waits for the release file: the second run below meets a live holder however fast the
    # first run's stages are or however busy the machine (an explicit event, not a race with its stages).
    release = root / "crash.release"
    crashing = subprocess.Popen(
        [kernelcast, "pipeline", "--no-push"],
        cwd=repo,
        text=True,
        env=_env(
            repo,
            root,
            KERNELCAST_FAULT_AFTER_STAGE="features",
            KERNELCAST_TEST_ONLY_HOLD_CRASH_UNTIL=str(release),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lock = repo / ".kernelcast" / "pipeline.lock"
    try:
        while not lock.exists() and crashing.poll() is None:
            time.sleep(0.2)
        second = subprocess.run(
            [kernelcast, "pipeline", "--no-push"],
            cwd=repo,
            env=env,
            text=True,
            capture_output=True,
            timeout=300,
        )
    finally:
        release.touch()  # whatever happened: the first run is never left waiting
    first_out, _ = crashing.communicate(timeout=900)
    crash_s = time.monotonic() - started

    assert second.returncode == 2, second.stdout + second.stderr
    assert "another pipeline run holds this state folder" in second.stderr
    assert f"pid {crashing.pid}" in second.stderr  # the refusal names the holder
    assert crashing.returncode == -9, first_out  # the injected crash (SIGKILL), right after features
    assert "[4/7] features  ran" in first_out and "train" not in first_out.split("simulate a crash")[-1], (
        first_out
    )
    # PDEATHSIG is delivered asynchronously: wait for the server to be gone, not for 2 s.
    assert (
        _settled(lambda: _prefect_servers_under(repo / ".kernelcast")) == []
    )  # the crashed run took its server
    assert lock.exists()  # left behind by the crash; the flock died with its holder

    started = time.monotonic()
    resumed = subprocess.run(
        [kernelcast, "pipeline", "--no-push"], cwd=repo, env=env, text=True, capture_output=True, timeout=900
    )
    resume_s = time.monotonic() - started
    out = resumed.stdout
    assert resumed.returncode == 0, out + resumed.stderr
    for stage in ("ingest", "validate", "static", "features"):
        assert f"{stage:<9} skipped" in out, out  # finished before the crash: not redone
    for stage in ("train", "evaluate", "register"):
        assert f"{stage:<9} ran" in out, out
    assert "      662 rows" in out  # progress shows rows (the canonical table's)
    assert "verdict: kernelcast v1 " in out and "MLflow UI: http://127.0.0.1:5000" in out, out
    assert "promotion.json" in out.splitlines()[-1]
    assert not lock.exists()  # released on a clean exit
    print(f"crash run {crash_s:.0f} s, resume {resume_s:.0f} s\n{out}")

    # SIGTERM while the train stage runs (its own process tree, with a local Ray): all of it stops.
    stopped = subprocess.Popen(
        [kernelcast, "pipeline", "--no-push", "--force", "--only", "train"],
        cwd=repo,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any("ray" in p and "raylet" in p for p in _ours(repo)):
        time.sleep(0.5)  # until the stage's local Ray is up: the deepest tree there is to stop
    assert any("raylet" in p for p in _ours(repo)), "the train stage never started its Ray"
    stopped.send_signal(signal.SIGTERM)
    term_out, _ = stopped.communicate(timeout=120)
    assert stopped.returncode == 130, term_out
    assert "pipeline interrupted" in term_out, term_out
    left = _settled(lambda: _ours(repo))  # every process of the tree exits, however busy the machine
    assert left == [], left
    assert not lock.exists()
