"""Typed settings for every embedded service, and the one reader of ``params.yaml``.

Everything a run writes lives under ``KERNELCAST_HOME`` (default ``<project root>/.kernelcast``),
so a second home is a fully separate installation. Each embedded default (Prefect ephemeral API,
local Ray, MLflow sqlite store, DVC local remote) is replaced by configuration alone.

``params.yaml`` is read by ``load_params`` only. Sections with a typed reader here (``ingest``,
``validate``, ``features``, ``train``, ``register``) reject unknown keys with an error naming the
key, so a typo never silently falls back to a default. ``train.tabular`` and ``train.llm`` are
checked by their own readers (``TabularConfig.from_params``, ``components.training.llm.llm_params``):
this module sits at the bottom of the import graph and imports nothing from models, training,
evaluation or registry, so a stage's code deps stay what its command really runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT: Path = Path(__file__).resolve().parents[2]  # components/platform/
DEFAULT_DATASETS_DIR: Path = PROJECT_ROOT.parent / "shared" / "datasets"
DEFAULT_PARAMS_FILE: Path = PROJECT_ROOT / "params.yaml"


# What Ray appends below its temp folder for its longest socket, and the AF_UNIX path limit.
_RAY_SOCKET_TAIL = len("/session_2026-11-26_16-28-00_440441_1234567/sockets/plasma_store")
_AF_UNIX_MAX = 107


class Settings(BaseSettings):
    """Configuration read from ``KERNELCAST_*`` environment variables (and a ``.env`` file)."""

    model_config = SettingsConfigDict(env_prefix="KERNELCAST_", env_file=None, extra="ignore")

    home: Path = Field(default=PROJECT_ROOT / ".kernelcast", description="state folder for every run")
    datasets_dir: Path = Field(default=DEFAULT_DATASETS_DIR, description="public datasets, read in place")
    params_file: Path = Field(default=DEFAULT_PARAMS_FILE, description="thresholds and hyper-parameters")
    ray_address: str | None = Field(default=None, description="Ray cluster address; None starts a local Ray")
    ray_num_cpus: int | None = Field(default=None, description="CPUs for a local Ray; None = all cores")
    prefect_api_url: str | None = Field(default=None, description="Prefect server; None = embedded server")
    mlflow_tracking_uri: str | None = Field(
        default=None,
        description="MLflow server URI; None = sqlite store under home (MLFLOW_TRACKING_URI wins)",
    )
    dvc_remote_url: str | None = Field(
        default=None, description="DVC remote (s3://, gs://, dir); None = home/dvc-remote"
    )
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
        """Ray's temp folder: ``<state>/ray``, unless a socket below it would pass the AF_UNIX limit of 107
        bytes (a deep checkout); then a short folder in the system temp dir, named by the state folder."""
        local = self.state_dir / "ray"
        if len(str(local)) + _RAY_SOCKET_TAIL <= _AF_UNIX_MAX:
            return local
        import hashlib
        import tempfile

        digest = hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"kc-ray-{digest}"

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


_SETTINGS_BY_ENV: dict[tuple[tuple[str, str], ...], Settings] = {}


def state_key(path: Path) -> str:
    """A cache key naming ``path``: ``$KERNELCAST_HOME/<relative path>`` inside the state folder, so a
    state copied or moved elsewhere keeps its caches (the champion's local copy, the store's split, the
    envelope's lattices); the resolved absolute path outside it."""
    resolved = Path(path).resolve()
    home = get_settings().state_dir
    if resolved.is_relative_to(home):
        return f"$KERNELCAST_HOME/{resolved.relative_to(home).as_posix()}"
    return str(resolved)


def get_settings() -> Settings:
    """Settings from the current environment: a fresh copy each call (callers may change it), built once per
    distinct set of ``KERNELCAST_*`` variables -- the server asks per question, and pydantic-settings reading
    the environment cost ~1.3 ms of a ~2.9 ms answer. A changed variable (tests do that) builds anew."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("KERNELCAST_")))
    cached = _SETTINGS_BY_ENV.get(key)
    if cached is None:
        if len(_SETTINGS_BY_ENV) > 64:
            _SETTINGS_BY_ENV.clear()
        cached = _SETTINGS_BY_ENV[key] = Settings()
    return cached.model_copy(deep=True)


# --------------------------------------------------------------------------- params.yaml


class ParamsError(ValueError):
    """params.yaml is missing, unreadable, or has a key or value its reader does not accept."""


# Keys each typed section may hold. ``train`` nests ``tabular`` and ``llm``, whose keys their own
# readers check (``components.models.tabular_config.TabularConfig.from_params``;
# ``components.training.llm.llm_params``): importing them here would make every command -- and
# every DVC stage -- depend on the model code.
SECTION_KEYS: dict[str, frozenset[str]] = {
    "ingest": frozenset({"sources", "aiconfigurator_max_kernels"}),
    "validate": frozenset(
        {
            "bandwidth_tolerance",
            "flops_tolerance",
            "arith_intensity_rel_tol",
            "max_failure_share",
            "drift_threshold",
        }
    ),
    "features": frozenset({"roofline_efficiency"}),
    "train": frozenset({"seed", "families", "tabular", "llm", "bench_max_train_rows", "bench_min_gpu_rows"}),
}


def load_params(path: Path | str | None = None) -> dict[str, Any]:
    """``params.yaml`` (default: ``get_settings().params_file``) as a dict, checked.

    Raises ``ParamsError`` naming the file when it is missing, not YAML, not a mapping, or when a
    section with a typed reader holds a key that reader does not know.
    """
    import yaml

    path = Path(path) if path is not None else get_settings().params_file
    if not path.is_file():
        raise ParamsError(f"params file not found: {path}")
    try:
        params = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(params, dict):
        raise ParamsError(f"{path}: expected a mapping of sections, got {type(params).__name__}")
    check_params(params, source=str(path))
    return params


def check_params(params: Mapping[str, Any], source: str = "params.yaml") -> None:
    """Reject unknown keys in every section that has a typed reader (error names the key).

    ``train.tabular`` / ``train.llm`` are only checked to be mappings here; their keys are checked
    by their readers when a stage reads them."""
    for name, allowed in SECTION_KEYS.items():
        section(params, name, source=source, allowed=allowed)
    train = section(params, "train", source=source)
    for nested in ("tabular", "llm"):
        section(train, nested, source=source, allowed=None, label=f"train.{nested}")
    ingest_sources(params, source=source)
    ingest_max_kernels(params, "aiconfigurator", source=source)
    register_thresholds(params, source=source)


def section(
    params: Mapping[str, Any],
    name: str,
    *,
    source: str = "params.yaml",
    allowed: frozenset[str] | set[str] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """``params[name]`` as a dict ({} when absent); ``allowed`` (default: ``SECTION_KEYS``) bounds
    its keys. ``label`` names the section in errors (default ``name``; e.g. ``train.llm``)."""
    label = label or name
    raw = params.get(name)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{source}: '{label}:' must be a mapping, got {type(raw).__name__}")
    allowed = SECTION_KEYS.get(name) if allowed is None else allowed
    if allowed is not None:
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise ParamsError(
                f"{source}: unknown key {label}.{unknown[0]}"
                + (f" (and {', '.join(unknown[1:])})" if unknown[1:] else "")
                + f"; known: {', '.join(sorted(allowed))}"
            )
    return dict(raw)


T = TypeVar("T")


def typed_section(params: Mapping[str, Any], name: str, cls: type[T], *, source: str = "params.yaml") -> T:
    """A dataclass built from ``params[name]``: unknown keys and missing required keys are errors."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = section(params, name, source=source, allowed=frozenset(fields))
    missing = [
        key
        for key, f in fields.items()
        if key not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ParamsError(f"{source}: '{name}:' is missing {', '.join(missing)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ParamsError(f"{source}: '{name}:' {exc}") from None


@dataclass(frozen=True)
class ValidateParams:
    """``validate:``: plausibility tolerances and the quarantine gate."""

    bandwidth_tolerance: float
    flops_tolerance: float
    arith_intensity_rel_tol: float
    max_failure_share: float
    drift_threshold: float = 0.25


def validate_params(params: Mapping[str, Any], source: str = "params.yaml") -> ValidateParams:
    return typed_section(params, "validate", ValidateParams, source=source)


def ingest_sources(params: Mapping[str, Any], source: str = "params.yaml") -> list[str] | None:
    """``ingest.sources`` (None when absent); a list of source names or an error."""
    sources = section(params, "ingest", source=source).get("sources")
    if sources is None:
        return None
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ParamsError(f"{source}: ingest.sources must be a list of source names")
    return sources


def ingest_max_kernels(
    params: Mapping[str, Any], source_name: str, source: str = "params.yaml"
) -> int | None:
    """``ingest.<source_name>_max_kernels``: the sample cap of a source too large to ingest whole (None:
    absent)."""
    value = section(params, "ingest", source=source).get(f"{source_name}_max_kernels")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParamsError(
            f"{source}: ingest.{source_name}_max_kernels must be a positive integer, got {value!r}"
        )
    return value


REGISTER_KEYS: frozenset[str] = frozenset({"tolerance", "guarded", "splits", "evaluation"})
# The evaluation splits by name (built in components.evaluation.splits): params.yaml names them
# (register.splits, train), and the registry's gate checks those names below the evaluation.
SPLITS: tuple[str, ...] = (
    "random",
    "unseen-kernel",
    "unseen-gpu",
    "neusight",
    "pipeweave-fp8",
    "bolet-roofline",
    "amd-source",
)
# The op engine's splits (components.evaluation.opmodel_bench): scored on AIConfigurator's tables, not the
# feature table.
OPMODEL_SPLITS: tuple[str, ...] = (
    "aiconfigurator-unseen-gpu",
    "aiconfigurator-unseen-shape",
    "aiter-unseen-gpu",
)
# LLM deployments scored on measured serving runs (components.deployments.bench): the datasets in place.
SERVING_SPLITS: tuple[str, ...] = ("llm-serving-pipeweave", "llm-serving-silicon")


def register_thresholds(
    params: Mapping[str, Any], source: str = "params.yaml"
) -> dict[str, dict[str, float]]:
    """``register.splits:`` as ``{split: {max_<metric>|min_<metric>: bound}}``; {} when absent. The
    whole gate (guarded metrics, tolerance, evaluation caps) is read by
    ``components.registry.gate.read_policy``."""
    raw = section(params, "register", source=source, allowed=REGISTER_KEYS)
    splits = section(raw, "splits", source=source, allowed=None, label="register.splits")
    out: dict[str, dict[str, float]] = {}
    for split in splits:
        for key, value in section(
            splits, split, source=source, allowed=None, label=f"register.splits.{split}"
        ).items():
            if not str(key).startswith(("max_", "min_")):
                raise ParamsError(
                    f"{source}: unknown key register.splits.{split}.{key}; "
                    "thresholds are max_<metric> or min_<metric>"
                )
            try:
                out.setdefault(str(split), {})[str(key)] = float(value)
            except (TypeError, ValueError):
                raise ParamsError(
                    f"{source}: register.splits.{split}.{key} must be a number, got {value!r}"
                ) from None
    return out


__all__ = [
    "DEFAULT_DATASETS_DIR",
    "DEFAULT_PARAMS_FILE",
    "PROJECT_ROOT",
    "SECTION_KEYS",
    "ParamsError",
    "Settings",
    "ValidateParams",
    "check_params",
    "get_settings",
    "ingest_sources",
    "load_params",
    "register_thresholds",
    "section",
    "typed_section",
    "validate_params",
]
