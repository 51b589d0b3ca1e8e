"""MLflow Model Registry: log a predictor as a pyfunc model, register it, promote it by alias.

Aliases are the contract with downstream services, which load ``models:/<name>@champion``:

- ``challenger``: the latest version that went through ``promote`` (passed or not);
- ``champion``: set ONLY when a version meets every threshold in ``params.yaml`` (``register:``)
  AND beats the current champion on the primary metric;
- ``previous-champion``: the champion it replaced, so ``rollback`` is one alias move.

Thresholds are data: ``max_<metric>`` is an upper bound (lower is better), ``min_<metric>`` a lower
bound (higher is better), e.g. ``max_runtime_mape: 0.35`` bounds the metric ``runtime_mape``.
The metrics a version was judged on are stored on the version as ``kc.metric.<name>`` tags, so
the next candidate is compared with the champion's own evaluation, not with a search over runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.pyfunc import PyFuncModel

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

    from components.config import get_settings

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

    from components.registry.pyfunc import PREDICTOR_ARTIFACT, KernelcastPyfunc, resolve_loader

    predictor_dir = Path(predictor_dir)
    if not predictor_dir.is_dir():
        raise FileNotFoundError(f"predictor directory not found: {predictor_dir}")
    resolve_loader(loader)  # fail now, not when serving loads the model
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
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=KernelcastPyfunc(),
            artifacts={PREDICTOR_ARTIFACT: str(predictor_dir)},
            model_config={"loader": loader},
            pip_requirements=_pip_requirements(),
        )
    return str(info.model_uri)


def register(model_uri: str, name: str, tracking_uri: str | None = None) -> str:
    """Register ``model_uri`` as a new version of ``name``; return the version number."""
    import mlflow

    if tracking_uri:
        mlflow.set_registry_uri(tracking_uri)
    return str(mlflow.register_model(model_uri, name).version)


# --------------------------------------------------------------------------- thresholds


def _bound(key: str) -> tuple[str, str]:
    """``max_runtime_mape`` -> (``runtime_mape``, ``max``)."""
    kind, _, metric = key.partition("_")
    if kind not in ("max", "min") or not metric:
        raise ValueError(f"threshold {key!r} must start with 'max_' or 'min_'")
    return metric, kind


def higher_is_better_from(thresholds: Mapping[str, float]) -> dict[str, bool]:
    """Direction of every thresholded metric: ``min_`` bounds mean higher is better."""
    return {metric: kind == "min" for metric, kind in map(_bound, thresholds)}


def check_thresholds(metrics: Mapping[str, float], thresholds: Mapping[str, float]) -> list[str]:
    """Human-readable failures; empty when every threshold is met. A missing metric fails."""
    failures: list[str] = []
    for key, limit in thresholds.items():
        metric, kind = _bound(key)
        if metric not in metrics:
            failures.append(f"{metric}: missing (needed for {key}={limit})")
            continue
        value = float(metrics[metric])
        if (kind == "max" and not value <= limit) or (kind == "min" and not value >= limit):
            relation = "<=" if kind == "max" else ">="
            failures.append(f"{metric}={value:.4g} violates {metric} {relation} {limit}")
    return failures


def beats(
    candidate: Mapping[str, float],
    incumbent: Mapping[str, float],
    primary_metric: str,
    higher_is_better: bool,
) -> bool:
    """Strictly better on the primary metric (a tie keeps the incumbent)."""
    if primary_metric not in incumbent:
        return True  # nothing recorded to defend: any passing candidate may take over
    if primary_metric not in candidate:
        return False
    new, old = float(candidate[primary_metric]), float(incumbent[primary_metric])
    return new > old if higher_is_better else new < old


# --------------------------------------------------------------------------- aliases


@dataclass(frozen=True)
class PromotionResult:
    name: str
    version: str
    promoted: bool
    champion: str | None
    previous_champion: str | None
    failures: list[str] = field(default_factory=list)
    reason: str = ""


def alias_version(name: str, alias: str, tracking_uri: str | None = None) -> str | None:
    """Version number behind ``name@alias``, or None when the alias is not set."""
    from mlflow.exceptions import MlflowException

    try:
        return str(_client(tracking_uri).get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def version_metrics(name: str, version: str, tracking_uri: str | None = None) -> dict[str, float]:
    """Metrics a version was judged on: its ``kc.metric.*`` tags, else its source run's metrics."""
    client = _client(tracking_uri)
    model_version = client.get_model_version(name, version)
    tagged = {
        key.removeprefix(METRIC_TAG_PREFIX): float(value)
        for key, value in model_version.tags.items()
        if key.startswith(METRIC_TAG_PREFIX)
    }
    if tagged or not model_version.run_id:
        return tagged
    return {key: float(value) for key, value in client.get_run(model_version.run_id).data.metrics.items()}


def promote(
    name: str,
    version: str | int,
    metrics: Mapping[str, float] | None,
    thresholds: Mapping[str, float],
    *,
    primary_metric: str | None = None,
    higher_is_better: Mapping[str, bool] | None = None,
    tracking_uri: str | None = None,
) -> PromotionResult:
    """Make ``version`` the challenger; make it champion only if it passes and beats the champion.

    ``metrics`` None reads the version's recorded metrics (its run's). ``primary_metric`` defaults
    to the first thresholded metric (``runtime_mape`` in ``params.yaml``); its direction comes
    from the threshold's ``max_``/``min_`` prefix unless ``higher_is_better`` says otherwise.
    """
    client = _client(tracking_uri)
    version = str(version)
    metrics = dict(metrics) if metrics is not None else version_metrics(name, version, tracking_uri)
    directions = {**higher_is_better_from(thresholds), **(higher_is_better or {})}
    if primary_metric is None:
        if not thresholds:
            raise ValueError("promotion needs at least one threshold or an explicit primary_metric")
        primary_metric = _bound(next(iter(thresholds)))[0]

    for key, value in metrics.items():
        client.set_model_version_tag(name, version, f"{METRIC_TAG_PREFIX}{key}", str(float(value)))
    client.set_model_version_tag(name, version, "kc.thresholds", json.dumps(dict(thresholds), sort_keys=True))
    client.set_registered_model_alias(name, CHALLENGER, version)

    champion = alias_version(name, CHAMPION, tracking_uri)
    previous = alias_version(name, PREVIOUS_CHAMPION, tracking_uri)
    failures = check_thresholds(metrics, thresholds)
    if failures:
        client.set_model_version_tag(name, version, "kc.promotion", "rejected: thresholds")
        return PromotionResult(name, version, False, champion, previous, failures, "thresholds not met")
    if champion == version:
        return PromotionResult(name, version, False, champion, previous, [], "already champion")
    if champion is not None:
        incumbent = version_metrics(name, champion, tracking_uri)
        if not beats(metrics, incumbent, primary_metric, directions.get(primary_metric, False)):
            client.set_model_version_tag(name, version, "kc.promotion", f"rejected: does not beat v{champion}")
            reason = (f"{primary_metric}={metrics.get(primary_metric)} does not beat champion "
                      f"v{champion} ({incumbent.get(primary_metric)})")
            return PromotionResult(name, version, False, champion, previous, [], reason)
        client.set_registered_model_alias(name, PREVIOUS_CHAMPION, champion)
        previous = champion
    client.set_registered_model_alias(name, CHAMPION, version)
    client.set_model_version_tag(name, version, "kc.promotion", "champion")
    return PromotionResult(name, version, True, version, previous, [], "passed thresholds and beat champion"
                           if previous else "passed thresholds; first champion")


def rollback(name: str, tracking_uri: str | None = None) -> PromotionResult:
    """Point ``champion`` back at ``previous-champion``; the demoted version is tagged.

    ``previous-champion`` is cleared so a second rollback fails loudly instead of flip-flopping.
    """
    client = _client(tracking_uri)
    previous = alias_version(name, PREVIOUS_CHAMPION, tracking_uri)
    if previous is None:
        raise LookupError(f"model {name!r} has no {PREVIOUS_CHAMPION!r} alias to roll back to")
    demoted = alias_version(name, CHAMPION, tracking_uri)
    client.set_registered_model_alias(name, CHAMPION, previous)
    client.delete_registered_model_alias(name, PREVIOUS_CHAMPION)
    if demoted is not None:
        client.set_model_version_tag(name, demoted, "kc.promotion", f"rolled back to v{previous}")
    return PromotionResult(name, previous, True, previous, None, [], f"rolled back from v{demoted}")


def load_model(name: str, alias: str = CHAMPION, tracking_uri: str | None = None) -> PyFuncModel:
    """The pyfunc model behind ``models:/<name>@<alias>``."""
    import mlflow.pyfunc

    if tracking_uri:
        mlflow.set_registry_uri(tracking_uri)
        mlflow.set_tracking_uri(tracking_uri)
    return mlflow.pyfunc.load_model(f"models:/{name}@{alias}")


def load_champion(name: str, tracking_uri: str | None = None) -> PyFuncModel:
    """What downstream services serve: ``models:/<name>@champion``."""
    return load_model(name, CHAMPION, tracking_uri)


def load_registered_predictor(uri: str, tracking_uri: str | None = None) -> Any:
    """The kernelcast predictor inside the pyfunc model at ``models:/...`` or ``runs:/...``.

    Raises ``LookupError`` (one line naming the URI and the store) when MLflow cannot load it, and
    ``TypeError`` when the model is not a kernelcast pyfunc wrapper.
    """
    import mlflow
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    try:
        wrapper = mlflow.pyfunc.load_model(uri)
    except (MlflowException, OSError) as exc:
        message = getattr(exc, "message", str(exc)) or type(exc).__name__
        raise LookupError(f"cannot load {uri} from {tracking_uri or mlflow.get_tracking_uri()}: "
                          f"{str(message).splitlines()[0]}") from exc
    predictor = getattr(wrapper.unwrap_python_model(), "predictor", None)
    if predictor is None:
        raise TypeError(f"{uri} is not a kernelcast model (no predictor inside its pyfunc wrapper)")
    return predictor
