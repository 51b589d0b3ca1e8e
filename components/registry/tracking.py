"""The MLflow run tree of a pipeline: one parent run, a nested run per stage and per model component.

How a reader finds the story in the UI: the experiment ``kernelcast`` holds one top-level run per pipeline
(named by what it did, tagged with the git commit, every ``params.yaml`` key as a param); under it one run per
stage that ran (ingest, validate, static, features, train, evaluate, register), each with its params, metrics,
artifacts and the datasets it read (``mlflow.data`` inputs whose digest is the DVC hash); under ``train`` one
run per model component (tabular, op engine, deployment engine constants, program model).

Stages run as separate processes (``dvc repro`` runs each stage's ``kernelcast`` command), so the parent's id
travels in the environment: ``PARENT_ENV``, set by the pipeline flow and inherited by every stage command. A
stage's process opens its run with ``parent_run_id`` from there. Outside a pipeline, ``train``, ``evaluate``
and ``promote`` still log a top-level run of their own; the data stages (ingest, validate, static, features)
log only under a pipeline (a hand-run ``kernelcast ingest`` should not need a tracking store).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PARENT_ENV = "KERNELCAST_MLFLOW_PARENT_RUN_ID"
EXPERIMENT = "kernelcast"
STAGE_TAG = "kc.stage"
COMPONENT_TAG = "kc.component"
# MLflow caps a param value at 6,000 characters; longer values are cut with a marker, never dropped.
PARAM_LIMIT = 6000


def git_commit(root: Path) -> str:
    """HEAD of the project checkout, or "unknown" outside a git work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params (params.yaml) as ``a.b.c -> value`` strings MLflow accepts."""
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        else:
            text = str(value)
            out[name] = text if len(text) <= PARAM_LIMIT else text[: PARAM_LIMIT - 12] + " ...(cut)"
    return out


def _active() -> bool:
    """Whether this process has an active MLflow run (never imports mlflow: a process that has not imported
    it has no run, and a fast CLI command must not pay the import to find that out)."""
    return "mlflow" in sys.modules and sys.modules["mlflow"].active_run() is not None


def parent_run_id() -> str | None:
    """The pipeline's parent run, when this process runs a stage of one."""
    return os.environ.get(PARENT_ENV) or None


def _experiment(settings: Any) -> str:
    import mlflow
    from components.registry.runs import experiment_id

    uri = settings.tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return experiment_id(EXPERIMENT, uri, settings.artifact_root())


def start_pipeline_run(settings: Any, name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
    """Create the parent run (not left active in this process: stages attach to it by id) and export its id
    in ``PARENT_ENV`` for every stage command started after this."""
    from components.platform.config import PROJECT_ROOT
    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(settings.tracking_uri())
    run = client.create_run(
        _experiment(settings),
        run_name=name,
        tags={"kc.kind": "pipeline", "git_commit": git_commit(PROJECT_ROOT), **dict(tags)},
    )
    run_id = run.info.run_id
    flat = flat_params(params)
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in flat.items()]
    for start in range(0, len(items), 100):  # the store takes at most 100 params per batch
        client.log_batch(run_id, params=items[start : start + 100])
    os.environ[PARENT_ENV] = run_id
    return run_id


def end_pipeline_run(
    settings: Any, run_id: str, *, ok: bool, name: str | None, tags: Mapping[str, str]
) -> None:
    """Close the parent run: its final name (what the pipeline did), outcome tags, FINISHED or FAILED."""
    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(settings.tracking_uri())
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    if name:
        client.set_tag(run_id, "mlflow.runName", name)
    client.set_terminated(run_id, "FINISHED" if ok else "FAILED")
    if os.environ.get(PARENT_ENV) == run_id:
        del os.environ[PARENT_ENV]


@contextmanager
def stage_run(
    stage: str,
    settings: Any,
    *,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    run_name: str | None = None,
    only_in_pipeline: bool = False,
) -> Iterator[Any]:
    """The MLflow run of one stage, active while the stage works (so it is open while training runs):
    nested under the pipeline's parent run when there is one, top-level otherwise. With
    ``only_in_pipeline`` and no parent, no run at all (yields None)."""
    parent = parent_run_id()
    if parent is None and only_in_pipeline:
        yield None
        return
    import mlflow
    from components.platform.config import PROJECT_ROOT

    experiment = _experiment(settings)
    with mlflow.start_run(
        experiment_id=experiment,
        run_name=run_name or stage,
        parent_run_id=parent,
        tags={STAGE_TAG: stage, "git_commit": git_commit(PROJECT_ROOT), **dict(tags or {})},
    ) as run:
        if params:
            mlflow.log_params(flat_params(params))
        yield run


@contextmanager
def component_run(component: str, *, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A run nested under the active one (a stage's) for one model component; a no-op run context when no
    run is active (yields None)."""
    if not _active():
        yield None
        return
    import mlflow

    stage = mlflow.active_run()
    with mlflow.start_run(
        experiment_id=stage.info.experiment_id,  # else MLflow puts a nested run in the default experiment
        run_name=component,
        nested=True,
        tags={COMPONENT_TAG: component},
    ) as run:
        if params:
            mlflow.log_params(flat_params(params))
        yield run


def dataset_digest(path: Path) -> str:
    """The DVC hash of ``path``: its output folder's ``<md5>.dir`` where dvc.yaml declares the folder, else
    the file's md5 (what ``dvc add`` would record), else ``<md5>.dir`` of a plain folder."""
    from components.platform.config import PROJECT_ROOT
    from components.registry.lineage import dataset_version, dvc_dir_hash

    path = Path(path)
    if path.is_dir():
        return dvc_dir_hash(path)
    version = dataset_version(path, PROJECT_ROOT)
    return version.removeprefix("md5:")


def log_dataset(path: Path, context: str, *, name: str | None = None, digest: str | None = None) -> None:
    """Log ``path`` (a parquet table, a CSV, a source folder) as an ``mlflow.data`` input of the active run:
    its schema (parquet: read from the footer, no rows loaded), row count and DVC digest. No-op without an
    active run or when the path does not exist."""
    path = Path(path)
    if not _active() or not path.exists():
        return
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    import mlflow

    schema, rows = None, None
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        from mlflow.types.utils import _infer_schema

        metadata = pq.read_metadata(path)
        rows = metadata.num_rows
        schema = _infer_schema(metadata.schema.to_arrow_schema().empty_table().to_pandas())
    with warnings.catch_warnings():  # "file" and "" both name the local source: MLflow warns, then picks it
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(path.resolve().as_uri())
    dataset = MetaDataset(
        source=source,
        name=name or (path.parent.name if path.suffix == ".parquet" else path.name),
        digest=(digest or dataset_digest(path))[:36],
        schema=schema,
    )
    tags = {"path": str(path)} | ({"rows": str(rows)} if rows is not None else {})
    mlflow.log_input(dataset, context=context, tags=tags)


def log_files(paths: list[Path], artifact_path: str) -> None:
    """Log each existing file (or folder) of ``paths`` under ``artifact_path`` of the active run."""
    if not _active():
        return
    import mlflow

    for path in map(Path, paths):
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=f"{artifact_path}/{path.name}")
        elif path.is_file():
            mlflow.log_artifact(str(path), artifact_path=artifact_path)


def log_numbers(values: Mapping[str, Any], prefix: str = "") -> None:
    """Every finite number of ``values`` (nested mappings flattened with ``/``) as a metric of the active
    run."""
    import math

    if not _active():
        return
    import mlflow

    flat: dict[str, float] = {}

    def walk(mapping: Mapping[str, Any], head: str) -> None:
        for key, value in mapping.items():
            name = f"{head}{key}"
            if isinstance(value, Mapping):
                walk(value, f"{name}/")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                flat[name.replace(" ", "_")] = float(value)

    walk(values, prefix)
    if flat:
        mlflow.log_metrics(flat)


@contextmanager
def pipeline_stage_run(
    stage: str,
    settings: Any,
    *,
    inputs: Sequence[tuple[Path, str]] = (),
    params: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A stage's run only under a pipeline's parent run (ingest, validate, static, features, register: a
    hand-run command logs nothing), the tables it reads logged as datasets (``(path, name)``) first."""
    with stage_run(stage, settings, params=params, only_in_pipeline=True) as run:
        for path, name in inputs:
            log_dataset(path, stage, name=name)
        yield run
