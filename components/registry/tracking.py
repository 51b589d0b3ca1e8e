"""The MLflow run tree of a pipeline: one parent run, a nested run per stage and per model component.

How a reader finds the story in the UI: the experiment ``kernelcast`` holds one top-level run per pipeline
(named by what it did, tagged with the git commit, every ``params.yaml`` key as a param); under it one run per
stage (ingest, validate, static, features, train, evaluate, register), each with the params.yaml keys it
reads, the datasets it read as ``mlflow.data`` inputs whose digest is DVC's (from ``dvc.lock``), the
digests of what it wrote, and its metrics files; under ``train`` one run per model component (tabular,
op engine, deployment engine constants, program model).

Stages run as separate processes (``dvc repro`` runs each stage's ``kernelcast`` command). The pipeline flow
opens each stage's run (``open_stage_run``) and hands its id to the stage's process in ``STAGE_ENV``; a stage
that logs more than DVC knows (train: the model and its components, evaluate: the gate's plots) resumes that
run from inside (``stage_run``) while it works, so the training run is open while training runs. Outside a
pipeline, ``train`` and ``evaluate`` log a top-level run of their own, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PARENT_ENV = "KERNELCAST_MLFLOW_PARENT_RUN_ID"  # the pipeline's run (set in the flow's process)
STAGE_ENV = "KERNELCAST_MLFLOW_STAGE_RUN_ID"  # the run the flow opened for this stage (a stage process's env)
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
    """The run a new run of this process nests under: its stage's run in a pipeline, else the pipeline's."""
    return os.environ.get(STAGE_ENV) or os.environ.get(PARENT_ENV) or None


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
) -> Iterator[Any]:
    """The MLflow run of one stage, active while the stage works: the run the pipeline opened for it
    (``STAGE_ENV``, resumed from this process), else a new one nested under the pipeline's parent run when
    there is one, else a top-level run."""
    import mlflow
    from components.platform.config import PROJECT_ROOT

    experiment = _experiment(settings)
    all_tags = {STAGE_TAG: stage, "git_commit": git_commit(PROJECT_ROOT), **dict(tags or {})}
    resumed = os.environ.get(STAGE_ENV) or None
    if resumed is not None:
        context = mlflow.start_run(run_id=resumed)
        if run_name:
            all_tags["mlflow.runName"] = run_name
    else:
        context = mlflow.start_run(
            experiment_id=experiment, run_name=run_name or stage, parent_run_id=parent_run_id(), tags=all_tags
        )
    with context as run:
        if resumed is not None:
            mlflow.set_tags(all_tags)
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
    import mlflow

    schema, rows = None, None
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        from mlflow.types.utils import _infer_schema

        metadata = pq.read_metadata(path)
        rows = metadata.num_rows
        schema = _infer_schema(metadata.schema.to_arrow_schema().empty_table().to_pandas())
    name = name or (path.parent.name if path.suffix == ".parquet" else path.name)
    dataset = _meta_dataset(path, name, digest or dataset_digest(path), schema)
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


# ---------------------------------------------------------------------------------------------------------
# Stage runs the pipeline flow opens around each DVC stage


def open_stage_run(settings: Any, parent: str, stage: str) -> str:
    """A run for ``stage`` under the pipeline's ``parent`` (created from the flow's process, not active in
    it); its id goes to the stage's process in ``STAGE_ENV``."""
    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(settings.tracking_uri())
    experiment = client.get_run(parent).info.experiment_id
    run = client.create_run(experiment, run_name=stage, tags={"mlflow.parentRunId": parent, STAGE_TAG: stage})
    return run.info.run_id


def _lock_entry(project_root: Path, stage: str) -> dict[str, Any]:
    import yaml

    path = Path(project_root) / "dvc.lock"
    if not path.is_file():
        return {}
    document = yaml.safe_load(path.read_text()) or {}
    return (document.get("stages") or {}).get(stage) or {}


def _is_data(path: str, project_root: Path) -> bool:
    """A dependency that is data, not code: anything but a Python package of the project or its config."""
    top = Path(path).parts[0] if Path(path).parts else ""
    if top in ("params.yaml", "dvc.yaml", "pyproject.toml") or path.endswith(".py"):
        return False
    return not (Path(project_root) / top / "__init__.py").is_file()


def close_stage_run(
    settings: Any, run_id: str, stage: str, project_root: Path, *, ran: bool, ok: bool
) -> None:
    """What DVC knows of a finished stage, on its run: the data it read (``mlflow.data`` inputs, digest = the
    DVC hash in dvc.lock), the params it read, the digests of its outputs, its metrics files' numbers and the
    files themselves; then FINISHED (FAILED when the stage failed)."""
    import json

    from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag

    from components.registry.mlflow_registry import mlflow_client

    client = mlflow_client(settings.tracking_uri())
    entry = _lock_entry(project_root, stage) if ok else {}
    root = Path(project_root)
    inputs = []
    for dep in entry.get("deps") or []:
        path, digest = str(dep.get("path", "")), str(dep.get("md5") or dep.get("hash") or "")
        if path and digest and _is_data(path, root):
            dataset = _meta_dataset(root / path, Path(path).name if "/" in path else path, digest)
            tags = [InputTag("mlflow.data.context", stage), InputTag("path", path)]
            inputs.append(DatasetInput(dataset._to_mlflow_entity(), tags))
    if inputs:
        client.log_inputs(run_id, datasets=inputs)
    params = [
        Param(k, str(v))
        for values in (entry.get("params") or {}).values()
        for k, v in flat_params(values).items()
    ]
    tags = [RunTag("kc.action", "ran" if ran else "skipped")] + [
        RunTag(f"kc.out.{out['path']}", str(out.get("md5", "")))
        for out in entry.get("outs") or []
        if out.get("path")
    ]
    metrics: list[Metric] = []
    for out in entry.get("outs") or []:
        path = root / str(out.get("path", ""))
        if path.suffix == ".json" and path.is_file() and path.stat().st_size < 2_000_000:
            flat: dict[str, float] = {}
            _numbers(json.loads(path.read_text()), "", flat)
            metrics += [Metric(k[:250], v, 0, 0) for k, v in flat.items()]
            client.log_artifact(run_id, str(path), "dvc")
    for start in range(0, max(len(params), len(metrics), len(tags)), 100):
        client.log_batch(
            run_id,
            metrics=metrics[start : start + 100],
            params=params[start : start + 100],
            tags=tags[start : start + 100],
        )
    client.set_terminated(run_id, "FINISHED" if ok else "FAILED")


def _meta_dataset(path: Path, name: str, digest: str, schema: Any = None) -> Any:
    """An ``mlflow.data`` dataset by reference: where the data is, its name and digest (no rows read)."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():  # "file" and "" both name the local source: MLflow warns, then picks it
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(Path(path).resolve().as_uri())
    return MetaDataset(source=source, name=name, digest=digest[:36], schema=schema)


def _numbers(value: Any, head: str, out: dict[str, float], depth: int = 0) -> None:
    """Finite numbers of a JSON document, keys joined with ``/`` (lists and deep nesting left out)."""
    import math

    if isinstance(value, Mapping) and depth < 4:
        for key, item in value.items():
            _numbers(
                item,
                f"{head}{key}/" if not isinstance(item, (int, float)) else f"{head}{key}",
                out,
                depth + 1,
            )
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and head:
        out[head.replace(" ", "_")] = float(value)
