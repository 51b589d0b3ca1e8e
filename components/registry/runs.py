"""Training runs in MLflow: log a run (or finish one Ray Train started), register and tag its version,
and the ``registration.json`` hand-off file the register stage reads.

Every stage that logs, registers or tags goes through here (or ``mlflow_registry``); nothing else
in the project writes ``registration.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_write

REGISTRATION_FILE = "registration.json"
# Run tags copied onto the registered version, so the registry alone tells what a version is
# (with ``family`` and ``training_run``: the lineage of ``components.registry.lineage``).
VERSION_TAGS: tuple[str, ...] = ("split", "dataset_md5", "dataset_version", "git_commit")


def _client(tracking_uri: str) -> Any:
    from components.registry import mlflow_registry

    return mlflow_registry._client(tracking_uri)


def experiment_id(name: str, tracking_uri: str, artifact_root: str) -> str:
    """The experiment's id, created with its artifacts under ``artifact_root`` for a local store."""
    from components.registry.mlflow_registry import ensure_experiment

    local = tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri
    return ensure_experiment(name, f"{artifact_root}/{name}" if local else None, tracking_uri)


@dataclass(frozen=True)
class TrainingRun:
    run_id: str
    model_uri: str | None
    version: str | None
    metrics: dict[str, float]


def tag_version(name: str, version: str, tags: Mapping[str, str], tracking_uri: str) -> None:
    """Set ``tags`` on version ``version`` of registered model ``name``."""
    client = _client(tracking_uri)
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, value)


def log_training_run(
    predictor_dir: Path,
    *,
    tracking_uri: str,
    experiment: str,
    registered_model: str,
    params: dict[str, Any],
    metrics: dict[str, float],
    tags: dict[str, str],
    artifacts: list[Path],
    register: bool,
    family: str,
) -> TrainingRun:
    """One MLflow run (the caller's active one, e.g. the train stage's, else a new one): params, metrics,
    tags, plots; the predictor as a pyfunc model; a registry version
    tagged with its family and the run's split, dataset and commit. ``experiment`` is an experiment id
    (``experiment_id``)."""
    from contextlib import nullcontext

    import mlflow
    from components.registry import mlflow_registry as reg
    from components.registry.carried import version_tags

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    active = mlflow.active_run()  # the train stage's run, open while it trained: log into it
    context: Any = (
        nullcontext(active)
        if active is not None
        else mlflow.start_run(experiment_id=experiment, run_name=f"train-{family}-{tags.get('split', '')}")
    )
    with context as run:
        for path in artifacts:
            mlflow.log_artifact(str(path), artifact_path="evaluation")
        model_uri = reg.log_predictor(
            predictor_dir, metrics, params, {**tags, "family": family, "kind": "train"}
        )
        version = None
        if register:
            version = reg.register(model_uri, registered_model, tracking_uri=tracking_uri)
            tag_version(
                registered_model,
                version,
                {
                    "family": family,
                    "training_run": run.info.run_id,
                    **{k: tags[k] for k in VERSION_TAGS if k in tags},
                    **version_tags(predictor_dir),  # what the version carries besides its predictor
                },
                tracking_uri,
            )
        return TrainingRun(run.info.run_id, model_uri, version, metrics)


def complete_training_run(
    run_id: str,
    *,
    tracking_uri: str,
    registered_model: str | None,
    metrics: Mapping[str, float],
    tags: Mapping[str, str],
    artifacts: list[Path],
) -> str | None:
    """Add test-side scores, tags and plots to a run another component opened (Ray Train's), and tag
    the version registered from it. Returns that version (None when none was registered)."""
    client = _client(tracking_uri)
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    for path in artifacts:
        client.log_artifact(run_id, str(path), "evaluation")
    if not registered_model:
        return None
    versions = client.search_model_versions(f"run_id='{run_id}'")
    version = str(versions[0].version) if versions else None
    if version is not None:
        tag_version(
            registered_model,
            version,
            {"training_run": run_id, **{k: tags[k] for k in VERSION_TAGS if k in tags}},
            tracking_uri,
        )
    return version


def version_exists(name: str, version: str | int, tracking_uri: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        _client(tracking_uri).get_model_version(name, str(version))
    except MlflowException:
        return False
    return True


# --------------------------------------------------------------------------- registration.json


@dataclass(frozen=True)
class Registration:
    """What the register stage needs, written beside the predictor by the train stage."""

    model_name: str
    version: str | None
    run_id: str
    predictor_dir: str
    split: str
    family: str


def write_registration(registration: Registration, directory: Path) -> Path:
    """``<directory>/registration.json``, replaced atomically."""
    path = Path(directory) / REGISTRATION_FILE
    text = json.dumps(asdict(registration), indent=2, sort_keys=True)
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return path


def read_registration(path: Path) -> Registration:
    """A registration file, or a ValueError naming the file and what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: registration file not found (run `kernelcast train` first)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    missing = [key for key in ("model_name", "version", "run_id") if key not in raw]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    version = raw.get("version")
    return Registration(
        model_name=str(raw["model_name"]),
        version=None if version is None else str(version),
        run_id=str(raw["run_id"]),
        predictor_dir=str(raw.get("predictor_dir", "")),
        split=str(raw.get("split", "")),
        family=str(raw.get("family", "")),
    )
