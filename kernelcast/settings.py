"""Typed settings for every embedded service, all rooted under one state folder.

Everything a run writes lives under ``KERNELCAST_HOME`` (default ``<project root>/.kernelcast``),
so a second home is a fully separate installation. Each embedded default (Prefect ephemeral API,
local Ray, MLflow sqlite store, DVC local remote) is replaced by configuration alone.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT: Path = Path(__file__).resolve().parent.parent
DEFAULT_DATASETS_DIR: Path = PROJECT_ROOT.parent / "shared" / "datasets"


class Settings(BaseSettings):
    """Configuration read from ``KERNELCAST_*`` environment variables (and a ``.env`` file)."""

    model_config = SettingsConfigDict(env_prefix="KERNELCAST_", env_file=None, extra="ignore")

    home: Path = Field(default=PROJECT_ROOT / ".kernelcast", description="state folder for every run")
    datasets_dir: Path = Field(default=DEFAULT_DATASETS_DIR, description="public datasets, read in place")
    params_file: Path = Field(default=PROJECT_ROOT / "params.yaml", description="thresholds and hyper-parameters")
    ray_address: str | None = Field(default=None, description="Ray cluster address; None starts a local Ray")
    ray_num_cpus: int | None = Field(default=None, description="CPUs for a local Ray; None = all cores")
    prefect_api_url: str | None = Field(default=None, description="Prefect server; None = embedded server")
    mlflow_tracking_uri: str | None = Field(
        default=None, description="MLflow server URI; None = sqlite store under home (MLFLOW_TRACKING_URI wins)"
    )
    dvc_remote_url: str | None = Field(default=None, description="DVC remote (s3://, gs://, dir); None = home/dvc-remote")
    registered_model: str = Field(default="kernelcast", description="MLflow registered model name")
    llm_endpoint: str | None = Field(default=None, description="OpenAI-compatible endpoint for LLM prompting")

    @cached_property
    def state_dir(self) -> Path:
        return self.home.resolve()

    @property
    def data_dir(self) -> Path:
        """Canonical and derived datasets (DVC outputs)."""
        return self.state_dir / "data"

    @property
    def mlflow_dir(self) -> Path:
        return self.state_dir / "mlflow"

    @property
    def prefect_home(self) -> Path:
        return self.state_dir / "prefect"

    @property
    def ray_tmpdir(self) -> Path:
        # Ray's socket paths must stay short (AF_UNIX limit of 107 bytes), so keep it shallow.
        return self.state_dir / "ray"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"

    @property
    def models_dir(self) -> Path:
        return self.state_dir / "models"

    @property
    def reports_dir(self) -> Path:
        return self.state_dir / "reports"

    @property
    def dvc_remote(self) -> str:
        return self.dvc_remote_url or str(self.state_dir / "dvc-remote")

    def tracking_uri(self) -> str:
        """MLflow tracking URI: explicit env var, then setting, then the embedded sqlite store."""
        import os

        return (
            os.environ.get("MLFLOW_TRACKING_URI")
            or self.mlflow_tracking_uri
            or f"sqlite:///{self.mlflow_dir / 'mlflow.db'}"
        )

    def artifact_root(self) -> str:
        return (self.mlflow_dir / "artifacts").as_uri()


def get_settings() -> Settings:
    """Fresh settings from the current environment (no module-level singleton: tests change env)."""
    return Settings()
