"""train -> MLflow run + registered version -> evaluate models:/kernelcast/<version>, on real services.

Local Ray (fits as Ray tasks) and a local sqlite MLflow under a throw-away KERNELCAST_HOME; the
data are our own H100 measurements in ``profiled-data/`` turned into a feature table, and the op engine
fits on one real AIConfigurator table (``small_op_engine``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.settings import Settings
from tests.conftest import H100_RUN
from tests.integration.cli import train_and_register

pytestmark = pytest.mark.slow


def test_train_register_then_evaluate_by_registry_uri(
    kc_settings: Settings, features_file: Path, small_op_engine: Path, tmp_path: Path
) -> None:
    from kernelcast.cli import app
    from mlflow import MlflowClient

    runner = CliRunner()
    _, version = train_and_register(
        runner, ["--family", "tabular", "--split", "unseen-kernel"], tmp_path / "predictor"
    )

    # the op engine fitted beside the predictor (on the small real subset) and saved with it
    assert (tmp_path / "predictor" / "opmodel").is_dir()

    client = MlflowClient(tracking_uri=kc_settings.tracking_uri())
    model_version = client.get_model_version("kernelcast", version)
    assert model_version.tags["family"] == "tabular"
    run = client.get_run(model_version.run_id)
    assert run.data.metrics["runtime_mape"] < 0.5
    assert run.data.tags["dataset_md5"] and run.data.tags["git_commit"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "evaluation")}
    assert "evaluation/pred_vs_measured_duration_us.png" in artifacts

    out = tmp_path / "eval.json"
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            f"models:/kernelcast/{version}",
            "--split",
            "unseen-kernel",
            "--out",
            str(out),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(out.read_text())
    assert report["split"] == "unseen-kernel" and report["excluded_seen"] == 0 and report["n"] > 50
    assert report["targets"]["duration_us"]["mape"] == pytest.approx(run.data.metrics["runtime_mape"])
    assert len(report["per_device"]) == 1  # one H100 in profiled-data

    # The random split's test side overlaps the unseen-kernel train side: those rows are excluded.
    leaky = tmp_path / "random.json"
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            str(tmp_path / "predictor"),
            "--split",
            "random",
            "--out",
            str(leaky),
            "--no-log",
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(leaky.read_text())["excluded_seen"] > 0

    # On-the-fly ingestion of a source directory through adapter + validation + features.
    fresh = tmp_path / "fresh.json"
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            f"models:/kernelcast/{version}",
            "--source",
            "kernelcast",
            "--from",
            str(H100_RUN),
            "--out",
            str(fresh),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(fresh.read_text())
    assert report["split"] == "all" and report["n"] > 50 and report["excluded_seen"] > 300
    assert report["targets"]["duration_us"]["n"] == report["n"]
