"""Every flow's tasks through ``task.fn()``: the stage functions on a small real input, no Prefect server.

The input is our own H100 measurements (``profiled-data/``, 662 rows) and one gpuFLOPBench CUDA
program; each stage's output feeds the next (ingest -> validate -> static -> features -> train ->
evaluate -> promote), on a throw-away KERNELCAST_HOME with a sqlite MLflow store. No Ray: the
tabular fit runs in-process (``use_ray=False``) and the feature table in one chunk. The run through
the real Prefect engine (and Ray) is in ``tests/integration/test_services.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from components.config import PROJECT_ROOT, Settings, load_params

DATASETS = PROJECT_ROOT.parent / "shared" / "datasets"


@dataclass
class Chain:
    settings: Settings
    params: dict
    root: Path

    @property
    def validated(self) -> Path:
        return self.settings.data_dir / "validated"


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    root = tmp_path_factory.mktemp("flows")
    patch = pytest.MonkeyPatch()
    patch.setenv("KERNELCAST_HOME", str(root / "home"))
    patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    patch.setenv("KERNELCAST_DATASETS_DIR", str(DATASETS))
    for var in ("KERNELCAST_RAY_ADDRESS", "KERNELCAST_MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        patch.delenv(var, raising=False)
    try:
        from components.runtime import configure_environment

        settings = Settings()
        configure_environment(settings)
        yield Chain(settings, load_params(settings.params_file), root)
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def ingested(chain: Chain):  # noqa: ANN201
    from flows.ingest_validate import ingest_inputs, ingest_task

    inputs = ingest_inputs(chain.settings, ["kernelcast"])
    return ingest_task.fn(inputs)


@pytest.fixture(scope="module")
def validated(chain: Chain, ingested) -> dict:  # noqa: ANN001
    from flows.validate import validation_job

    return validation_job(
        str(ingested.out_dir),
        str(chain.validated),
        str(chain.settings.params_file),
        str(chain.root / "validation-summary.json"),
        None,
    )


@pytest.fixture(scope="module")
def features(chain: Chain, validated: dict):  # noqa: ANN201
    from flows.features import feature_inputs, features_task

    inputs = feature_inputs(
        chain.validated, chain.settings.data_dir / "canonical", None, chain.root / "features.parquet", 1
    )
    return features_task.fn(inputs, chain.settings)


@pytest.fixture(scope="module")
def trained(chain: Chain, features):  # noqa: ANN001, ANN201
    from components.training.stage import TrainInputs
    from flows.train import train_task

    inputs = TrainInputs(
        features_file=features.out_file,
        family="tabular",
        split="unseen-kernel",
        out_dir=chain.root / "predictor",
        use_ray=False,
    )
    return train_task.fn(inputs, chain.settings, chain.params)


def test_ingest_task_writes_the_canonical_tables(chain: Chain, ingested) -> None:  # noqa: ANN001
    assert ingested.rows_in == {"kernelcast": 662} and ingested.rows == 662
    assert ingested.out_dir == chain.settings.data_dir / "canonical"  # the default under KERNELCAST_HOME
    assert ingested.unknown_devices == []
    measurements = pd.read_parquet(ingested.out_dir / "measurements.parquet")
    assert len(measurements) == 662 and measurements["measurement_id"].is_unique
    assert json.loads((ingested.out_dir / "summary.json").read_text())["by_source"]["kernelcast"]


def test_ingest_task_names_a_missing_source_directory(chain: Chain, tmp_path: Path) -> None:
    from components.ingest.stage import IngestInputs
    from flows.ingest_validate import ingest_task

    inputs = IngestInputs(("neusight",), tmp_path / "out", tmp_path / "no-datasets", tmp_path / "cache")
    with pytest.raises(ValueError, match=r"neusight: source directory not found: .*no-datasets/neusight"):
        ingest_task.fn(inputs)
    assert not (tmp_path / "out").exists()


def test_validation_job_is_the_validate_stage(chain: Chain, validated: dict) -> None:
    assert validated["rows_in"] == 662 == validated["rows_valid"] + validated["rows_quarantined"]
    assert validated["passed"] and validated["expectations_evaluated"] > 10
    assert json.loads((chain.root / "validation-summary.json").read_text())["rows_in"] == 662


def test_static_task_compiles_a_real_cuda_program(tmp_path: Path) -> None:
    from components.features.stage import StaticInputs
    from flows.features import static_task

    kernels = pd.DataFrame(
        {
            "kernel_id": ["k-adam"],
            "source": ["gpuflopbench"],
            "language": ["cuda"],
            "program": ["adam-cuda"],
            "op": ["adam"],
        }
    )
    kernels.to_parquet(tmp_path / "kernels.parquet")
    result = static_task.fn(
        StaticInputs(tmp_path / "kernels.parquet", tmp_path / "static" / "static.parquet", DATASETS, "sm_90")
    )
    table = pd.read_parquet(result.out_file)
    assert result.kernels == 1 and table["kernel_id"].tolist() == ["k-adam"]
    assert result.features == table.shape[1] - 1 > 5
    assert table.filter(like="s_").notna().any(axis=None)


def test_features_task_builds_one_row_per_valid_measurement(features, validated: dict) -> None:  # noqa: ANN001
    table = pd.read_parquet(features.out_file)
    assert features.rows == len(table) == validated["rows_valid"]
    assert features.columns == table.shape[1] and any(c.startswith("f_") for c in table.columns)
    assert int(features.coverage["rows"].sum()) == features.rows


def test_train_task_logs_registers_and_writes_one_registration(chain: Chain, trained) -> None:  # noqa: ANN001
    from components.registry.runs import read_registration
    from flows.train import summary

    assert trained.version is not None and trained.model_uri == f"models:/kernelcast/{trained.version}"
    registration = read_registration(trained.registration_file)
    assert registration.version == trained.version and registration.run_id == trained.run_id
    assert Path(registration.predictor_dir) == chain.root / "predictor" and registration.family == "tabular"
    assert trained.report["n"] > 50 and 0 < trained.metrics["runtime_mape"] < 1
    assert summary(trained)["runtime_mape"] == trained.metrics["runtime_mape"]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=chain.settings.tracking_uri())
    version = client.get_model_version("kernelcast", trained.version)
    assert version.tags["family"] == "tabular" and version.tags["split"] == "unseen-kernel"
    assert client.get_run(trained.run_id).data.metrics["runtime_mape"] == pytest.approx(
        trained.metrics["runtime_mape"]
    )


def test_evaluate_task_scores_the_trained_predictor_like_training_did(chain: Chain, trained) -> None:  # noqa: ANN001
    from components.evaluation.stage import EvaluateInputs
    from flows.evaluate_and_promote import evaluate_task

    out = chain.root / "eval" / "tabular.json"
    result = evaluate_task.fn(
        EvaluateInputs(
            model=str(trained.predictor_dir),
            out_file=out,
            split="unseen-kernel",
            features_file=trained_features(chain),
            log=False,
        ),
        chain.settings,
        chain.params,
    )
    assert result.run_id is None and json.loads(out.read_text()) == result.report
    assert result.report["targets"]["duration_us"]["mape"] == pytest.approx(trained.metrics["runtime_mape"])


def test_evaluate_task_ingests_a_source_through_the_stage_functions(chain: Chain, trained) -> None:  # noqa: ANN001
    from components.evaluation.stage import EvaluateInputs
    from flows.evaluate_and_promote import evaluate_task

    inputs = EvaluateInputs(
        model=str(trained.predictor_dir),
        out_file=chain.root / "eval" / "fresh.json",
        source="profiled",
        from_dir=PROJECT_ROOT / "profiled-data",
        log=False,
    )
    result = evaluate_task.fn(inputs, chain.settings, chain.params)
    assert result.ingested_rows == 662 and result.quarantined == 0
    # Every row it trained on is excluded; the rest are the unseen-kernel test side again.
    assert result.report["split"] == "all" and result.report["excluded_seen"] == len(trained_rows(trained))
    assert result.report["n"] == trained.report["n"]


def test_promote_task_gates_the_registered_version(chain: Chain, trained) -> None:  # noqa: ANN001
    from components.registry.promote import PromoteInputs, gate_thresholds
    from flows.evaluate_and_promote import promote_task

    report = chain.root / "eval" / "promotion.json"
    inputs = PromoteInputs(
        tracking_uri=chain.settings.tracking_uri(), registration=trained.registration_file, report=report
    )
    result = promote_task.fn(inputs, gate_thresholds(chain.params))
    passes = trained.metrics["runtime_mape"] <= 0.35 and trained.metrics["within_10"] >= 0.30
    assert result.version == trained.version and result.promoted == passes
    assert json.loads(report.read_text()) == result.to_json()
    again = promote_task.fn(inputs, gate_thresholds(chain.params))
    assert not again.promoted and again.reason == ("already champion" if passes else "thresholds not met")


def test_promote_stage_refuses_conflicting_or_missing_inputs(chain: Chain, tmp_path: Path) -> None:
    from components.registry.promote import PromoteInputs, gate_thresholds, promote_stage

    uri = chain.settings.tracking_uri()
    with pytest.raises(ValueError, match="exactly one of"):
        promote_stage(PromoteInputs(tracking_uri=uri), {"max_runtime_mape": 0.3})
    with pytest.raises(FileNotFoundError, match="registration file not found"):
        promote_stage(
            PromoteInputs(tracking_uri=uri, registration=tmp_path / "none.json"), {"max_runtime_mape": 0.3}
        )
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        promote_stage(
            PromoteInputs(tracking_uri=uri, registration=tmp_path / "bad.json"), {"max_runtime_mape": 0.3}
        )
    with pytest.raises(ValueError, match="refusing to promote without a gate"):
        gate_thresholds({"train": {}})


def test_io_retry_policy_retries_transient_errors_only() -> None:
    from prefect.states import Completed, Failed

    from flows.retry import transient_only

    assert transient_only(None, None, Failed(data=ConnectionResetError("peer reset")))
    assert transient_only(None, None, Failed(data=TimeoutError("slow disk")))
    assert not transient_only(None, None, Failed(data=FileNotFoundError("no such file")))
    assert not transient_only(None, None, Failed(data=ValueError("unknown source 'x'")))
    assert not transient_only(None, None, Completed(data=1))


def trained_features(chain: Chain) -> Path:
    return chain.root / "features.parquet"


def trained_rows(trained) -> set[str]:  # noqa: ANN001
    from components.models import load_predictor

    return set(load_predictor(trained.predictor_dir).trained_on)


def test_every_deployment_entrypoint_is_a_flow_of_ours() -> None:
    """infra/prefect.yaml names flows that exist (a removed flow must take its deployment with it)."""
    import importlib

    import yaml
    from prefect import Flow

    deployments = yaml.safe_load((PROJECT_ROOT / "infra" / "prefect.yaml").read_text())["deployments"]
    assert len(deployments) >= 5
    for deployment in deployments:
        path, _, name = deployment["entrypoint"].partition(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert isinstance(getattr(module, name), Flow), deployment["entrypoint"]
