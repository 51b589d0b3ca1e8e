"""The MLflow run tree of a pipeline, on a real sqlite store: the parent run, a run per stage opened by the
flow's functions and used by the stage's own process (its id in the environment, as ``dvc repro`` passes it),
component runs under ``train``, and the datasets each stage read as ``mlflow.data`` inputs with DVC digests.

Small on purpose: a 3-row timings CSV through ``kernelcast ingest`` in a subprocess, and the train stage in
this process on the session's H100 feature table (no Ray; an empty datasets folder, so no measured store).
DVC itself does not run: the stage's ``dvc.lock`` entry (DVC's schema 2.0, the digests computed here as DVC
does) is written into a scratch project root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from kernelcast.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.slow
CLI = (sys.executable, "-m", "kernelcast.cli")
CSV = """op,shape,dtype,device,duration_us
gemm,"M=4096,N=4096,K=4096",bf16,H100,190.5
gemm,"M=2048,N=2048,K=2048",bf16,H100,30.1
gemm,"M=64,N=64",bf16,H100,5
"""


def test_pipeline_parent_with_stage_and_component_runs(
    kc_settings: Settings, features_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from components.platform.config import load_params
    from components.registry.lineage import dvc_dir_hash, file_md5
    from components.registry.tracking import (
        PARENT_ENV,
        STAGE_ENV,
        close_stage_run,
        dataset_digest,
        end_pipeline_run,
        open_stage_run,
        start_pipeline_run,
    )
    from components.training.stage import TrainInputs, train_stage
    from mlflow import MlflowClient

    monkeypatch.delenv(PARENT_ENV, raising=False)
    monkeypatch.delenv(STAGE_ENV, raising=False)
    params = load_params(PROJECT_ROOT / "params.yaml")
    parent = start_pipeline_run(kc_settings, "pipeline (running)", params, {"kc.stages": "ingest,train"})
    assert os.environ[PARENT_ENV] == parent

    # ingest: the flow opens the run, the stage's process works under it, the flow closes it from dvc.lock.
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    team = project / "data" / "team.csv"
    team.write_text(CSV)
    out = project / "canonical"
    ingest_run = open_stage_run(kc_settings, parent, "ingest")
    done = subprocess.run(
        [*CLI, "ingest", "--source", "csv", "--from", str(team), "--out", str(out)],
        cwd=PROJECT_ROOT,
        env={**os.environ, STAGE_ENV: ingest_run},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lock = {
        "schema": "2.0",
        "stages": {
            "ingest": {
                "cmd": "kernelcast ingest --source csv --from data/team.csv --out canonical",
                "deps": [
                    {
                        "path": "components/ingest",
                        "hash": "md5",
                        "md5": "0" * 32 + ".dir",
                    },  # code: not a dataset
                    {"path": "data/team.csv", "hash": "md5", "md5": file_md5(team)},
                ],
                "params": {"params.yaml": {"ingest.sources": ["csv"]}},
                "outs": [{"path": "canonical", "hash": "md5", "md5": dvc_dir_hash(out)}],
            }
        },
    }
    (project / "components").mkdir()
    (project / "components" / "__init__.py").write_text("")  # a Python package: code, not data
    (project / "dvc.lock").write_text(yaml.safe_dump(lock))
    close_stage_run(kc_settings, ingest_run, "ingest", project, ran=True, ok=True)

    # train: the stage's own run (resumed from STAGE_ENV) is open while the models fit.
    train_run = open_stage_run(kc_settings, parent, "train")
    monkeypatch.setenv(STAGE_ENV, train_run)
    empty = tmp_path / "no-datasets"
    empty.mkdir()
    result = train_stage(
        replace(TrainInputs(features_file=features_file), use_ray=False, out_dir=tmp_path / "predictor"),
        Settings(datasets_dir=empty),
        params,
    )
    monkeypatch.delenv(STAGE_ENV)
    close_stage_run(kc_settings, train_run, "train", project, ran=True, ok=True)  # no dvc.lock entry: no-op
    end_pipeline_run(kc_settings, parent, ok=True, name="pipeline: ran ingest, train", tags={})
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
    assert set(by_stage) == {"ingest", "train"} and len(children) == 2

    ingest = by_stage["ingest"]
    assert ingest.info.run_id == ingest_run and ingest.info.status == "FINISHED"
    (read,) = ingest.inputs.dataset_inputs  # the CSV; the code dependency is not a dataset
    assert read.dataset.name == "team.csv" and read.dataset.digest == file_md5(team)
    assert ingest.data.params["ingest.sources"] == "['csv']" and ingest.data.tags["kc.action"] == "ran"
    assert ingest.data.tags["kc.out.canonical"] == dvc_dir_hash(out)

    train = by_stage["train"]
    assert train.info.run_id == train_run == result.run_id  # the stage's run holds the registered model
    assert train.info.run_name == "train-tabular-unseen-kernel"
    assert client.get_model_version("kernelcast", result.version).run_id == train_run
    (features,) = train.inputs.dataset_inputs
    assert (
        features.dataset.name == "features" and features.dataset.digest == dataset_digest(features_file)[:36]
    )
    assert {t.key: t.value for t in features.tags}["mlflow.data.context"] == "training"
    evaluation = {a.path for a in client.list_artifacts(train_run, "evaluation")}
    assert {
        "evaluation/pred_vs_measured_duration_us.png",
        "evaluation/error_by_gpu_duration_us.csv",
    } <= evaluation

    parts = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{train_run}'")
    by_part = {r.data.tags["kc.component"]: r for r in parts}
    assert set(by_part) == {"tabular", "program-model", "op-engine", "deployment-engine"}
    tabular = by_part["tabular"]
    assert tabular.data.metrics["n_train"] > 100 and tabular.data.params["model"] == "lgbm"
    # Open while training: the fit's run starts and ends inside the train stage's run.
    assert train.info.start_time <= tabular.info.start_time <= tabular.info.end_time <= train.info.end_time
    deployment = by_part["deployment-engine"]
    assert deployment.data.params["framework_set"] == "roofline"  # no engine without a store
    assert set(deployment.data.params) >= {"vllm.request_us", "sglang.request_us", "trtllm.request_us"}
    assert deployment.data.metrics["framework.prefill"] > 0 and deployment.data.metrics["vllm.lopo_ttft"] > 0
    assert "no measured store" in by_part["op-engine"].data.tags["kc.note"]
    local = client.download_artifacts(deployment.info.run_id, "deployments/constants.json", str(tmp_path))
    saved = json.loads(Path(local).read_text())
    logged = {k: v for k, v in deployment.data.metrics.items() if k.startswith("framework.")}
    expected = saved["framework"]["roofline"]["train_mape"]
    assert logged == {f"framework.{k}": v for k, v in expected.items()} and len(logged) == 4


DVC_YAML = """stages:
  copy:
    cmd: python copy_rows.py
    deps: [copy_rows.py, data/in.csv]
    outs: [out]
  count:
    cmd: python count_rows.py
    deps: [count_rows.py, out]
    params: [count.min_rows]
    metrics:
      - summary.json: {cache: false}
"""
SCRIPTS = {
    "copy_rows.py": "import os, shutil\nos.makedirs('out', exist_ok=True)\n"
    "shutil.copy('data/in.csv', 'out/in.csv')\n",
    "count_rows.py": "import json\nrows = len(open('out/in.csv').read().splitlines()) - 1\n"
    "json.dump({'rows': rows}, open('summary.json', 'w'))\n",
}


def test_the_pipeline_flow_records_each_dvc_stage(
    kc_settings: Settings, prefect_harness: str, tmp_path: Path
) -> None:
    """The real flow on a two-stage DVC project: a parent run named by what it did, one run per stage with the
    data it read (digest = dvc.lock's), its params and its metrics file."""
    from components.registry.tracking import PARENT_ENV
    from flows.pipeline import pipeline_flow
    from mlflow import MlflowClient

    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "in.csv").write_text("a,b\n1,2\n3,4\n")
    (project / "dvc.yaml").write_text(DVC_YAML)
    for name, text in SCRIPTS.items():
        (project / name).write_text(text)
    (project / "params.yaml").write_text("count:\n  min_rows: 1\n")
    dvc = Path(sys.executable).with_name("dvc")
    subprocess.run([str(dvc), "init", "--no-scm", "-q"], cwd=project, check=True, timeout=120)

    reports = pipeline_flow(project_root=str(project), push=False, lock=False)
    assert [r["action"] for r in reports] == ["ran", "ran"] and PARENT_ENV not in os.environ

    client = MlflowClient(tracking_uri=kc_settings.tracking_uri())
    (top,) = client.search_runs(
        [client.get_experiment_by_name("kernelcast").experiment_id],
        "tags.`kc.stages` = 'copy,count'",
    )
    assert top.info.run_name == "pipeline: ran copy, count" and top.info.status == "FINISHED"
    children = client.search_runs([top.info.experiment_id], f"tags.mlflow.parentRunId = '{top.info.run_id}'")
    by_stage = {r.data.tags["kc.stage"]: r for r in children}
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    digest = {(stage, d["path"]): d["md5"] for stage in lock for d in lock[stage]["deps"]}
    (copied,) = by_stage["copy"].inputs.dataset_inputs  # the script is code: not a dataset
    assert copied.dataset.name == "in.csv" and copied.dataset.digest == digest["copy", "data/in.csv"]
    (counted,) = by_stage["count"].inputs.dataset_inputs
    assert counted.dataset.digest == digest["count", "out"][:36]  # the folder's <md5>.dir
    assert (
        by_stage["count"].data.metrics["rows"] == 2 and by_stage["count"].data.params["count.min_rows"] == "1"
    )
    assert by_stage["copy"].data.tags["kc.out.out"] == lock["copy"]["outs"][0]["md5"]
