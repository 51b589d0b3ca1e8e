"""Services a flow run needs: one Prefect API server and a Ray task runner pointed at it.

Prefect always talks to an API. With none configured, every process that touches Prefect --
including each Ray worker running a task -- would start its own temporary server (~17 s each on a
loaded 2-core box). So a pipeline run starts ONE server on loopback and hands its URL to the Ray
workers through ``runtime_env``. A configured server (``KERNELCAST_PREFECT_API_URL`` or
``PREFECT_API_URL``) or Ray cluster (``KERNELCAST_RAY_ADDRESS``) replaces the embedded default.
Ray itself is started by ``components.platform.runtime.ensure_ray``; only what is Prefect's lives here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from components.platform.config import Settings
from components.platform.runtime import TELEMETRY_OFF, configure_environment, die_with_parent, ray_init_kwargs

if TYPE_CHECKING:
    from prefect_ray.task_runners import RayTaskRunner

# Cold start measured at ~10-20 s on 2 busy cores (import + sqlite migrations); leave headroom.
DEFAULT_STARTUP_TIMEOUT_S = 180.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_is_healthy(api_url: str, timeout_s: float = 2.0) -> bool:
    """True when ``<api_url>/health`` answers 200 (Prefect's liveness endpoint)."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _server_env(settings: Settings) -> dict[str, str]:
    """Environment of the server process: its own home + sqlite, no UI, nothing phoning home."""
    env = {**os.environ, **TELEMETRY_OFF}
    env.pop("PREFECT_API_URL", None)  # the server must not think it is a client of another server
    env.update(
        PREFECT_HOME=str(settings.prefect_home),
        PREFECT_SERVER_UI_ENABLED="false",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # Nothing is scheduled by a pipeline run; the scheduler loop only costs CPU.
        PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
    )
    return env


def _wait_healthy(process: subprocess.Popen[bytes], api_url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"Prefect server exited with code {process.returncode} during start-up; log: {log_path}"
            )
        if server_is_healthy(api_url):
            return
        time.sleep(0.5)
    raise TimeoutError(f"Prefect server not healthy at {api_url} after {timeout_s:.0f} s; log: {log_path}")


def _stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """Stop the server we started (its own session, so its process group is ours alone)."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass


@contextmanager
def _client_settings(api_url: str) -> Iterator[None]:
    """Point this process's Prefect client at ``api_url``.

    The env var reaches subprocesses; Prefect's settings context was read at import time, so the
    running process needs ``temporary_settings`` as well.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api_url
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            yield
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


@contextmanager
def prefect_server(settings: Settings, startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Yield the Prefect API URL to use, starting a loopback server only if none is configured.

    The started server keeps its sqlite database under ``settings.prefect_home`` and is stopped
    (by its PID) on exit, also when the body raises.
    """
    from prefect.settings import PREFECT_API_URL

    # Prefect's own setting covers the env var, a profile, and an enclosing test harness.
    configured = settings.prefect_api_url or PREFECT_API_URL.value()
    if configured:
        with _client_settings(configured):
            yield configured
        return

    configure_environment(settings)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log_path = settings.prefect_home / f"server-{port}.log"
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            env=_server_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        _wait_healthy(process, api_url, startup_timeout_s, log_path)
        with _client_settings(api_url):
            yield api_url
    finally:
        _stop_process_group(process)


def ray_task_runner(settings: Settings, prefect_api_url: str | None = None) -> RayTaskRunner:
    """A prefect-ray task runner for ``settings.ray_address`` or a local Ray it starts itself."""
    from prefect_ray.task_runners import RayTaskRunner

    configure_environment(settings)
    return RayTaskRunner(address=settings.ray_address, init_kwargs=ray_init_kwargs(settings, prefect_api_url))
