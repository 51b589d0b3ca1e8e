"""Shared fixtures for tests on real local services.

Nothing here is autouse: unit tests stay fast and touch no service. Integration tests request
``kc_home`` (a throw-away KERNELCAST_HOME with the environment pointed at it), ``prefect_harness``
(ONE Prefect test server per session) and ``local_ray`` (ONE local Ray per session, its workers
pointed at that Prefect server) -- each costs seconds to start, so a session pays it once.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast.settings import PROJECT_ROOT, Settings

# The small real subset the tests train on: our first H100 run (662 rows). profiled-data/ grows with every
# lent GPU; pinning the tests to this run keeps their figures and their time the same as it does.
H100_RUN = PROJECT_ROOT / "profiled-data" / "h100-sxm-2026-11-22"

# Prefect's test server needs ~10-20 s on a loaded 2-core box; its default (30 s) is too tight.
PREFECT_STARTUP_TIMEOUT_S = 180

# Variables that would point a test at a real, shared service instead of the throw-away one.
_SERVICE_VARS = (
    "PREFECT_API_URL",
    "PREFECT_API_KEY",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_REGISTRY_URI",
    "KERNELCAST_PREFECT_API_URL",
    "KERNELCAST_RAY_ADDRESS",
    "KERNELCAST_MLFLOW_TRACKING_URI",
    "KERNELCAST_DVC_REMOTE_URL",
    "RAY_ADDRESS",
)


@pytest.fixture(scope="session")
def kc_home() -> Iterator[Path]:
    """A fresh KERNELCAST_HOME for the session, with every service's state and telemetry set.

    Lives directly under /tmp, not pytest's deep tmp path: Ray's AF_UNIX socket paths under
    ``<home>/ray/session_<timestamp>_<pid>/sockets/`` must stay below 107 bytes.
    """
    from components.platform.runtime import TELEMETRY_OFF, configure_environment

    home = Path(tempfile.mkdtemp(prefix="kc-", dir="/tmp"))
    patch = pytest.MonkeyPatch()
    try:
        for var in _SERVICE_VARS:
            patch.delenv(var, raising=False)
        for key, value in TELEMETRY_OFF.items():
            patch.setenv(key, value)
        patch.setenv("KERNELCAST_HOME", str(home))
        patch.setenv("KERNELCAST_RAY_NUM_CPUS", "2")
        settings = Settings()
        # Forced, not setdefault: a developer's own PREFECT_HOME / RAY_TMPDIR must not leak in.
        patch.setenv("PREFECT_HOME", str(settings.prefect_home))
        patch.setenv("RAY_TMPDIR", str(settings.ray_tmpdir))
        patch.setenv("MLFLOW_TRACKING_URI", settings.tracking_uri())
        patch.setenv("RAY_AUTH_MODE", "disabled")
        configure_environment(settings)
        yield home
    finally:
        patch.undo()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def kc_settings(kc_home: Path) -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def prefect_harness(kc_home: Path) -> Iterator[str]:
    """One temporary Prefect API (sqlite) for the whole session; yields its URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=PREFECT_STARTUP_TIMEOUT_S):
        api_url = PREFECT_API_URL.value()
        assert api_url, "prefect_test_harness did not set PREFECT_API_URL"
        yield str(api_url)


@pytest.fixture(scope="session")
def local_ray(kc_settings: Settings, prefect_harness: str) -> Iterator[None]:
    """One local Ray for the session; its workers talk to the session's Prefect server.

    ``RayTaskRunner`` reuses an initialised Ray, so every flow test shares these workers. Shut
    down with ``ray.shutdown()`` from this driver -- never ``ray stop``, which kills every Ray
    process on the machine.
    """
    import ray

    from components.platform.runtime import ensure_ray

    if ray.is_initialized():
        pytest.fail("Ray was already initialised before the local_ray fixture; it would ignore its settings")
    ensure_ray(kc_settings, prefect_harness)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def features_file(kc_settings: Settings) -> Path:
    """Our own H100 measurements (``H100_RUN``) as canonical tables + a feature table in the session
    home."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table, write_features
    from components.ingest.profiled import ingest
    from components.ingest.schema import with_measurement_ids

    catalog = load_catalog()
    output = ingest(H100_RUN, catalog)
    measurements = output.measurements
    if measurements["measurement_id"].isna().any():
        measurements = with_measurement_ids(measurements)
    canonical = kc_settings.data_dir / "canonical"
    canonical.mkdir(parents=True, exist_ok=True)
    measurements.to_parquet(canonical / "measurements.parquet")
    output.kernels.to_parquet(canonical / "kernels.parquet")
    table = build_feature_table(measurements, output.kernels, catalog)
    return write_features(table, kc_settings.data_dir / "features" / "features.parquet")


@pytest.fixture(scope="session")
def llm_settings(kc_settings: Settings) -> Settings:
    """The session home with the embedded model de-quantized once (linked from the project's own
    cache when a developer already has one; de-quantizing costs ~30-50 s on 2 cores)."""
    from components.models.llm.loader import EMBEDDED_NAME, ensure_embedded_cache

    cached = PROJECT_ROOT / ".kernelcast" / "cache" / "llm" / EMBEDDED_NAME
    target = kc_settings.cache_dir / "llm" / EMBEDDED_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    if (cached / "config.json").is_file() and not target.exists():
        target.symlink_to(cached, target_is_directory=True)
    ensure_embedded_cache(kc_settings.cache_dir / "llm")
    return kc_settings
