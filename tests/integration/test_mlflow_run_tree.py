"""The MLflow run tree of a pipeline, on a real sqlite store: a parent run, nested stage runs opened by
separate stage processes (the parent id in the environment, as ``dvc repro`` passes it), component runs
under ``train``, and the datasets each stage read as ``mlflow.data`` inputs with their DVC digests.

Small on purpose: a 3-row timings CSV through ``kernelcast ingest`` in a subprocess, and the train stage in
this process on the session's H100 feature table (no Ray; an empty datasets folder, so no measured store).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kernelcast.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.slow
CLI = (sys.executable, "-m", "kernelcast.cli")

CSV = """op,shape,dtype,device,duration_us
gemm,"M=4096,N=4096,K=4096",bf16,H100,190.5
gemm,"M=2048,N=2048,K=2048",bf16,H100,30.1
gemm,"M=64,N=64",bf16,H100,5
"""


def test_pipeline_parent_with_nested_stage_and_component_runs(
    kc_settings: Settings, features_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.platform.config import load_params
    from components.registry.lineage import file_md5
    from components.registry.tracking import PARENT_ENV, dataset_digest, end_pipeline_run, start_pipeline_run
    from components.training.stage import TrainInputs, train_stage
    from mlflow import MlflowClient

    monkeypatch.delenv(PARENT_ENV, raising=False)
    params = load_params(PROJECT_ROOT / "params.yaml")
    parent = start_pipeline_run(kc_settings, "pipeline (running)", params, {"kc.stages": "ingest,train"})
    assert os.environ[PARENT_ENV] == parent

    team = tmp_path / "team.csv"
    team.write_text(CSV)
    done = subprocess.run(
        [*CLI, "ingest", "--source", "csv", "--from", str(team), "--out", str(tmp_path / "canonical")],
        cwd=PROJECT_ROOT,
        env=dict(os.environ),  # the stage process inherits the parent id, as under `dvc repro`
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr

    empty = tmp_path / "no-datasets"
    empty.mkdir()
    settings = Settings(datasets_dir=empty)
    result = train_stage(
        replace(TrainInputs(features_file=features_file), use_ray=False, out_dir=tmp_path / "predictor"),
        settings,
        params,
    )
    end_pipeline_run(
        kc_settings, parent, ok=True, name="pipeline: ran ingest, train", tags={"kc.ran": "ingest,train"}
    )
    assert PARENT_ENV not in os.environ

    client = MlflowClient(tracking_uri=kc_settings.tracking_uri())
    top = client.get_run(parent)
    assert top.info.status == "FINISHED" and top.info.run_name == "pipeline: ran ingest, train"
    assert len(top.data.tags["git_commit"]) == 40
    assert top.data.params["register.splits.unseen-gpu.max_runtime_mape"] == str(
        params["register"]["splits"]["unseen-gpu"]["max_runtime_mape"]
    )
    experiment = top.info.experiment_id
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'")
    by_stage = {r.data.tags.get("kc.stage"): r for r in children}
    assert set(by_stage) == {"ingest", "train"}

    ingest = by_stage["ingest"]
    assert ingest.data.metrics["rows_in/csv"] == 3 and ingest.data.metrics["rows"] == 2
    (read,) = ingest.inputs.dataset_inputs
    assert read.dataset.name == "csv" and read.dataset.digest == file_md5(team)[:36]

    train = by_stage["train"]
    assert train.info.run_id == result.run_id  # the registered model lives on the stage's run
    assert client.get_model_version("kernelcast", result.version).run_id == train.info.run_id
    (features,) = train.inputs.dataset_inputs
    assert (
        features.dataset.name == "features" and features.dataset.digest == dataset_digest(features_file)[:36]
    )
    assert {t.key: t.value for t in features.tags}["mlflow.data.context"] == "training"
    evaluation = {a.path for a in client.list_artifacts(train.info.run_id, "evaluation")}
    assert {
        "evaluation/pred_vs_measured_duration_us.png",
        "evaluation/error_by_gpu_duration_us.csv",
    } <= evaluation

    parts = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{train.info.run_id}'")
    by_part = {r.data.tags["kc.component"]: r for r in parts}
    assert set(by_part) == {"tabular", "program-model", "op-engine", "deployment-engine"}
    tabular = by_part["tabular"]
    assert tabular.data.metrics["n_train"] > 100 and tabular.data.params["model"] == "lgbm"
    # Open while training: the fit's run starts and ends inside the train stage's run.
    assert train.info.start_time <= tabular.info.start_time <= tabular.info.end_time <= train.info.end_time
    deployment = by_part["deployment-engine"]
    assert deployment.data.params["set"] == "PRODUCTION_FRAMEWORK_ROOFLINE"  # no engine without a store
    assert deployment.data.metrics["train_mape/prefill"] > 0
    assert "no measured store" in by_part["op-engine"].data.tags["kc.note"]
