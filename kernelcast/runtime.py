"""Process environment for the embedded services: telemetry off, state under KERNELCAST_HOME.

Called explicitly by CLI commands, flows and tests -- never at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelcast.settings import Settings

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


def configure_environment(settings: Settings) -> None:
    """Point every embedded service at the state folder and switch telemetry off."""
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    for folder in (settings.state_dir, settings.data_dir, settings.mlflow_dir, settings.prefect_home,
                   settings.ray_tmpdir, settings.cache_dir, settings.models_dir, settings.reports_dir):
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


def init_ray(settings: Settings) -> None:
    """Connect to the configured Ray cluster, or start a local one with this machine's cores."""
    import ray

    if ray.is_initialized():
        return
    configure_environment(settings)
    if settings.ray_address:
        ray.init(address=settings.ray_address, log_to_driver=True)
    else:
        ray.init(
            num_cpus=settings.ray_num_cpus or os.cpu_count(),
            include_dashboard=False,
            _temp_dir=str(settings.ray_tmpdir),
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", **TELEMETRY_OFF}},
            log_to_driver=False,
        )
