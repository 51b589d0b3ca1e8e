"""MLflow Model Registry: log a predictor as a pyfunc model, register it, read its aliases.

Aliases are the contract with downstream services, which load ``models:/<name>@champion``:

- ``challenger``: the latest version that went through ``promote`` (passed or not);
- ``champion``: set ONLY through the gate of ``components.registry.promote`` (params.yaml
  ``register:``: thresholds per split and target, no guarded metric worse than the champion's);
- ``previous-champion``: the champion it replaced, so ``rollback`` is one alias move.

The metrics a version was judged on are stored on the version as ``kc.metric.<split>/<metric>``
tags, so the next candidate is compared with the champion's own evaluation, not with a search
over runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient

CHAMPION = "champion"
CHALLENGER = "challenger"
PREVIOUS_CHAMPION = "previous-champion"
DEFAULT_LOADER = "components.models:load_predictor"
METRIC_TAG_PREFIX = "kc.metric."
DEFAULT_EXPERIMENT = "kernelcast"


# --------------------------------------------------------------------------- logging + registering


def mlflow_client(tracking_uri: str | None) -> MlflowClient:
    """The project's one ``MlflowClient`` factory: tracking and registry on the same store."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


_client = mlflow_client


def ensure_experiment(name: str, artifact_location: str | None, tracking_uri: str | None = None) -> str:
    """Experiment id for ``name``, created with an explicit artifact root.

    Without one, a sqlite store puts artifacts under ``./mlruns`` of whatever directory the
    process happens to run in.
    """
    client = _client(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    return str(client.create_experiment(name, artifact_location=artifact_location))


def _default_artifact_location(experiment: str, tracking_uri: str | None) -> str | None:
    """Local stores keep artifacts under KERNELCAST_HOME; a tracking server picks its own."""
    import mlflow
    from components.platform.config import get_settings

    uri = tracking_uri or mlflow.get_tracking_uri()
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        return f"{get_settings().artifact_root()}/{experiment}"
    return None


def _pip_requirements() -> list[str]:
    """Pinned requirements of the wrapper itself; passing them skips MLflow's ~5 s inference."""
    from importlib.metadata import version

    return [f"{pkg}=={version(pkg)}" for pkg in ("mlflow", "pandas", "numpy")]


def log_predictor(
    predictor_dir: Path,
    metrics: Mapping[str, float],
    params: Mapping[str, Any],
    tags: Mapping[str, str],
    *,
    experiment: str = DEFAULT_EXPERIMENT,
    artifact_location: str | None = None,
    loader: str = DEFAULT_LOADER,
    run_name: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """Log a saved predictor directory as a pyfunc model in a run; return its model URI.

    Logs into the active run if there is one (a training flow's run), else starts one in
    ``experiment``. The loader path is stored in the model config, so the artifact says how to
    rebuild the predictor.
    """
    import mlflow
    from components.registry.pyfunc import (
        ANSWERER,
        PREDICTOR_ARTIFACT,
        KernelcastPyfunc,
        input_example,
        resolve_loader,
        signature,
    )

    predictor_dir = Path(predictor_dir)
    if not predictor_dir.is_dir():
        raise FileNotFoundError(f"predictor directory not found: {predictor_dir}")
    resolve_loader(loader)  # fail now, not when serving loads the model
    from components.platform.config import get_settings
    from components.registry.carried import carry_components

    # the engines' constants and calibrations go in the artifact: it answers without a state folder
    carry_components(predictor_dir, get_settings().state_dir)
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)

    if mlflow.active_run() is not None:
        run_context: Any = nullcontext()  # the caller's run; it ends it
    else:
        location = artifact_location or _default_artifact_location(experiment, tracking_uri)
        experiment_id = ensure_experiment(experiment, location, tracking_uri)
        run_context = mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
    with run_context:
        mlflow.log_params(dict(params))
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()})
        mlflow.set_tags(dict(tags))
        run_id = mlflow.active_run().info.run_id
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=KernelcastPyfunc(),
            artifacts={PREDICTOR_ARTIFACT: str(predictor_dir)},
            model_config={"loader": loader, "answerer": ANSWERER, "model_version": f"runs:/{run_id}/model"},
            signature=signature(),
            input_example=input_example(),
            pip_requirements=_pip_requirements(),
        )
    return str(info.model_uri)


def register(model_uri: str, name: str, tracking_uri: str | None = None) -> str:
    """Register ``model_uri`` as a new version of ``name``; return the version number."""
    import mlflow

    if tracking_uri:
        mlflow.set_registry_uri(tracking_uri)
    return str(mlflow.register_model(model_uri, name).version)


# --------------------------------------------------------------------------- aliases


class RegistryUnreachable(LookupError):
    """The tracking/registry store cannot be reached; the message names its URI."""


def check_reachable(tracking_uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, in one line naming the URI, when the registry cannot be reached.

    Why: MLflow's HTTP client retries with back-off for minutes before it gives up, and a sqlite
    URI whose folder does not exist fails deep inside SQLAlchemy.
    """
    from urllib.error import URLError
    from urllib.request import urlopen

    if tracking_uri.startswith(("http://", "https://")):
        try:
            with urlopen(f"{tracking_uri.rstrip('/')}/health", timeout=timeout_s) as response:
                if response.status != 200:
                    raise RegistryUnreachable(
                        f"MLflow registry at {tracking_uri} is not healthy (GET /health -> {response.status})"
                    )
        except (URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryUnreachable(
                f"MLflow registry at {tracking_uri} cannot be reached ({reason})"
            ) from None
    elif tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise RegistryUnreachable(
                f"MLflow registry at {tracking_uri} cannot be reached (folder {folder} does not exist)"
            )


def alias_version(name: str, alias: str, tracking_uri: str | None = None) -> str | None:
    """Version number behind ``name@alias``, or None when the alias (or the model) is not set."""
    from mlflow.exceptions import MlflowException

    try:
        return str(_client(tracking_uri).get_model_version_by_alias(name, alias).version)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise


def version_metrics(name: str, version: str, tracking_uri: str | None = None) -> dict[str, float]:
    """Metrics a version was judged on: its ``kc.metric.*`` tags (``split/metric`` names)."""
    model_version = _client(tracking_uri).get_model_version(name, version)
    return {
        key.removeprefix(METRIC_TAG_PREFIX): float(value)
        for key, value in model_version.tags.items()
        if key.startswith(METRIC_TAG_PREFIX)
    }


def load_registered_predictor(uri: str, tracking_uri: str | None = None) -> Any:
    """The kernelcast predictor inside the pyfunc model at ``models:/...`` or ``runs:/...``.

    Raises ``LookupError`` (one line naming the URI and the store) when MLflow cannot load it, and
    ``TypeError`` when the model is not a kernelcast pyfunc wrapper.
    """
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    import mlflow

    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    try:
        wrapper = mlflow.pyfunc.load_model(uri)
    except (MlflowException, OSError) as exc:
        message = getattr(exc, "message", str(exc)) or type(exc).__name__
        raise LookupError(
            f"cannot load {uri} from {tracking_uri or mlflow.get_tracking_uri()}: "
            f"{str(message).splitlines()[0]}"
        ) from exc
    predictor = getattr(wrapper.unwrap_python_model(), "predictor", None)
    if predictor is None:
        raise TypeError(f"{uri} is not a kernelcast model (no predictor inside its pyfunc wrapper)")
    return predictor
