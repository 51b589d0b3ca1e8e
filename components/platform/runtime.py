"""Process environment for the embedded services, and the one Ray start-up.

``configure_environment`` switches telemetry off and points every service at the state folder;
``ensure_ray`` connects to the configured Ray cluster or starts a local Ray, once per process, with
the worker settings every caller needs (one OpenMP thread per worker, the Prefect API URL so a
worker never starts its own server, telemetry off). Both are called explicitly by CLI commands,
flows, stage functions and tests -- never at import time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from components.platform.config import Settings

# Every service phones home unless told not to; nothing here may reach for the network.
TELEMETRY_OFF: dict[str, str] = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_TELEMETRY": "false",
    "DVC_NO_ANALYTICS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
}

# OpenMP threads that wait at a barrier sleep instead of spinning. libgomp spins by default, and the pipeline
# always runs a multi-threaded LightGBM fit beside other CPU-bound work on 2 cores (the op engine's spec fits
# beside the tabular fit in train, beside the candidate's splits in evaluate): the same spec fit took 24.1 s
# CPU spinning and 2.9 s passive at load 12, the same booster bit for bit (docs/pipeline-time.md). Read when
# a process loads its OpenMP runtime: set before any heavy import, inherited by children, given to Ray.
# OpenBLAS (numpy's and scipy's BLAS/LAPACK, 2 threads here) has its own pool: after each call its threads
# spin 2**28 cycles (~0.1 s) before they sleep; OPENBLAS_THREAD_TIMEOUT=4 (2**4 cycles, its minimum) lets them
# sleep at once. The same thread count and split of the work, so the same results bit for bit: a 2,773 x 28
# SVD (the program model's least squares) took 88-127 ms CPU spinning at load 30, 11 ms with it.
OPENMP_ENV: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}


def configure_environment(settings: Settings) -> None:
    """Point every embedded service at the state folder, switch telemetry off, keep OpenMP from spinning."""
    for key, value in {**TELEMETRY_OFF, **OPENMP_ENV}.items():
        os.environ.setdefault(key, value)
    for folder in (
        settings.state_dir,
        settings.data_dir,
        settings.mlflow_dir,
        settings.prefect_home,
        settings.ray_tmpdir,
        settings.cache_dir,
        settings.models_dir,
        settings.reports_dir,
    ):
        Path(folder).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(settings.prefect_home))
    # A loaded 2-core box needs longer than Prefect's 20 s default to start its temporary server.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    if settings.prefect_api_url:
        os.environ["PREFECT_API_URL"] = settings.prefect_api_url
    os.environ.setdefault("RAY_TMPDIR", str(settings.ray_tmpdir))
    # Local Ray needs no token; a real cluster configures auth through RAY_AUTH_* itself.
    if not settings.ray_address:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("MLFLOW_TRACKING_URI", settings.tracking_uri())


def current_prefect_api_url() -> str | None:
    """The Prefect API this process talks to: the env var, or -- when Prefect is already loaded --
    its settings (a profile or an enclosing ``prefect_test_harness``). Never imports Prefect."""
    if "prefect.settings" in sys.modules:
        from prefect.settings import PREFECT_API_URL

        value = PREFECT_API_URL.value()
        if value:
            return str(value)
    return os.environ.get("PREFECT_API_URL") or None


def _is_loopback(url: str) -> bool:
    return (urlsplit(url if "://" in url else f"//{url}").hostname or "") in ("127.0.0.1", "localhost", "::1")


def _is_remote(ray_address: str | None) -> bool:
    """A ``ray://host`` on another machine; ``auto`` and local addresses share our loopback."""
    return (
        bool(ray_address) and ray_address != "auto" and not _is_loopback(ray_address.removeprefix("ray://"))
    )


def ray_init_kwargs(settings: Settings, prefect_api_url: str | None = None) -> dict[str, Any]:
    """``ray.init`` keyword arguments (without ``address``) for the configured cluster or a local Ray.

    Workers get the Prefect API URL (so they never start their own server), one OpenMP thread
    each (or two cores thrash), and telemetry off. A local Ray gets this machine's cores (or
    ``ray_num_cpus``), no dashboard, its temp dir under the state folder, and workers at the
    driver's priority: Ray nices them to 15 by default, and on a busy machine (a build beside the
    pipeline, CI sharing its cores) nice-15 workers got ~3% of a core, so a 2-minute LoRA fit ran
    for an hour. On a cluster the cluster's own setting stands.
    """
    api_url = prefect_api_url or current_prefect_api_url()
    if api_url and _is_loopback(api_url) and _is_remote(settings.ray_address):
        raise ValueError(
            f"Ray workers at {settings.ray_address} cannot reach the loopback Prefect API {api_url}; "
            "set KERNELCAST_PREFECT_API_URL to a server they can reach"
        )
    env_vars = {
        **TELEMETRY_OFF,
        **OPENMP_ENV,
        "OMP_NUM_THREADS": "1",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
    }
    if api_url:
        env_vars["PREFECT_API_URL"] = api_url
    kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env_vars}}
    if settings.ray_address:
        return kwargs  # the cluster owns its resources, temp dir and dashboard
    kwargs.update(
        num_cpus=settings.ray_num_cpus or os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(settings.ray_tmpdir),
        _system_config={"worker_niceness": 0},
    )
    return kwargs


def ensure_ray(settings: Settings, prefect_api_url: str | None = None) -> None:
    """Connect to ``settings.ray_address`` or start a local Ray -- once; later calls do nothing.

    Prefect's ``RayTaskRunner`` reuses an initialised Ray, so a caller running several flows (a
    test session, a pipeline) pays Ray's ~5 s start-up once, with these worker settings.
    """
    import ray

    if ray.is_initialized():
        return
    configure_environment(settings)
    kwargs = ray_init_kwargs(settings, prefect_api_url)
    if settings.ray_address:
        ray.init(address=settings.ray_address, **kwargs)
    else:
        ray.init(**kwargs)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``finally`` (servers, Ray, child processes) runs."""


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM into ``Terminated`` (SIGINT already raises ``KeyboardInterrupt``) for the body.

    Without it SIGTERM ends Python at once and the Prefect server, Ray and stage processes this
    run started would outlive it. Only the main thread can install handlers; elsewhere a no-op.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, _frame: object) -> None:
        raise Terminated(f"stopped by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent() -> None:
    """``preexec_fn`` for a service we start: the kernel SIGTERMs it when its parent dies, even by
    SIGKILL, so a crashed run leaves no server behind (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _tree(pid: int) -> list[Any]:
    import psutil  # a Ray dependency

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_process_tree(process: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """Stop a child started with ``start_new_session=True``: its process group, and any
    descendant that left the group (a local Ray driver makes itself a group leader), TERM then KILL."""
    import psutil

    if process.poll() is not None:
        return
    members = _tree(process.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        for member in members:
            with suppress(psutil.NoSuchProcess):
                member.send_signal(sig)
        _, alive = psutil.wait_procs(members, timeout=grace_s)
        if not alive:
            break
        members = alive
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)


def run_stopping_with_us(
    command: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with output captured, in a session of its own that is stopped (whole
    tree) when the caller is interrupted, times out or raises -- a stage never outlives its run."""
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except BaseException:  # interrupted, timed out (TimeoutExpired) or failed: nothing of it may linger
        stop_process_tree(process)
        raise
    return subprocess.CompletedProcess(list(command), process.returncode, output, "")


__all__ = [
    "OPENMP_ENV",
    "TELEMETRY_OFF",
    "Terminated",
    "configure_environment",
    "current_prefect_api_url",
    "die_with_parent",
    "ensure_ray",
    "ray_init_kwargs",
    "run_stopping_with_us",
    "stop_on_signals",
    "stop_process_tree",
]
