"""The MLflow Model Registry on a real sqlite store: log, register, alias, promote, roll back.

The model is tiny but real: a least-squares fit of runtime on FLOPs and bytes, saved as a
predictor directory and served back through the ``kernelcast`` pyfunc wrapper by alias.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.registry import mlflow_registry as reg

LOADER = "tests.integration.test_registry:load_linear_predictor"
THRESHOLDS = {"max_runtime_mape": 0.35, "min_within_10": 0.30}


class LinearRuntimePredictor:
    """duration_us ~ a * gflop + b * mbytes + c: the smallest honest Predictor."""

    family = "tabular"

    def __init__(self, coef: list[float] | None = None) -> None:
        self.coef = coef or []

    @property
    def targets(self) -> tuple[str, ...]:
        return ("duration_us",)

    @property
    def trained_on(self) -> frozenset[str]:
        return frozenset()

    @staticmethod
    def _design(features: pd.DataFrame) -> np.ndarray:
        return np.column_stack([features["gflop"], features["mbytes"], np.ones(len(features))])

    def fit(self, features: pd.DataFrame) -> LinearRuntimePredictor:
        coef, *_ = np.linalg.lstsq(self._design(features), features["duration_us"].to_numpy(), rcond=None)
        self.coef = [float(c) for c in coef]
        return self

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"pred_duration_us": self._design(features) @ np.asarray(self.coef)},
                            index=features.index)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "linear.json").write_text(json.dumps({"coef": self.coef}))


def load_linear_predictor(directory: Path) -> LinearRuntimePredictor:
    return LinearRuntimePredictor(json.loads((Path(directory) / "linear.json").read_text())["coef"])


def _frame() -> pd.DataFrame:
    gflop = np.array([1.0, 2.0, 4.0, 8.0, 0.5])
    mbytes = np.array([10.0, 5.0, 40.0, 20.0, 80.0])
    return pd.DataFrame({"gflop": gflop, "mbytes": mbytes, "duration_us": 3.0 * gflop + 0.5 * mbytes + 2.0})


@pytest.fixture(scope="module")
def tracking_uri(kc_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import mlflow

    store = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    reg.ensure_experiment("kernelcast-test", (store / "artifacts").as_uri(), uri)
    previous = mlflow.get_tracking_uri()
    yield uri
    mlflow.set_tracking_uri(previous)


def _log_and_register(tmp_path: Path, tracking_uri: str, name: str, metrics: dict[str, float]) -> str:
    predictor_dir = tmp_path / f"predictor-{len(list(tmp_path.iterdir()))}"
    LinearRuntimePredictor().fit(_frame()).save(predictor_dir)
    uri = reg.log_predictor(
        predictor_dir, metrics, {"family": "tabular"}, {"split": "unseen_gpu"},
        experiment="kernelcast-test", loader=LOADER, tracking_uri=tracking_uri,
    )
    return reg.register(uri, name, tracking_uri)


@pytest.mark.slow
def test_logged_model_is_served_back_by_alias(tmp_path: Path, tracking_uri: str) -> None:
    from mlflow import MlflowClient

    version = _log_and_register(tmp_path, tracking_uri, "kc-alias", {"runtime_mape": 0.2, "within_10": 0.5})
    MlflowClient(tracking_uri=tracking_uri).set_registered_model_alias("kc-alias", "staging", version)

    model = reg.load_model("kc-alias", "staging", tracking_uri)
    frame = _frame()
    predicted = model.predict(frame[["gflop", "mbytes"]])
    np.testing.assert_allclose(predicted["pred_duration_us"].to_numpy(), frame["duration_us"].to_numpy(), rtol=1e-6)
    # The recorded metrics are the run's, reachable from the version.
    assert reg.version_metrics("kc-alias", version, tracking_uri) == {"runtime_mape": 0.2, "within_10": 0.5}


@pytest.mark.slow
def test_champion_only_on_thresholds_and_improvement_then_rollback(tmp_path: Path, tracking_uri: str) -> None:
    name = "kc-promote"
    good = {"runtime_mape": 0.20, "within_10": 0.50}
    v1 = _log_and_register(tmp_path, tracking_uri, name, good)
    first = reg.promote(name, v1, None, THRESHOLDS, tracking_uri=tracking_uri)  # metrics read from the run
    assert first.promoted and first.champion == v1 and first.previous_champion is None

    # Fails a threshold: becomes challenger, champion unchanged.
    failing = {"runtime_mape": 0.10, "within_10": 0.10}
    v2 = _log_and_register(tmp_path, tracking_uri, name, failing)
    second = reg.promote(name, v2, failing, THRESHOLDS, tracking_uri=tracking_uri)
    assert not second.promoted and second.failures == ["within_10=0.1 violates within_10 >= 0.3"]
    assert reg.alias_version(name, reg.CHAMPION, tracking_uri) == v1
    assert reg.alias_version(name, reg.CHALLENGER, tracking_uri) == v2

    # Passes but is worse than the champion on the primary metric: champion unchanged.
    worse = {"runtime_mape": 0.30, "within_10": 0.60}
    v3 = _log_and_register(tmp_path, tracking_uri, name, worse)
    third = reg.promote(name, v3, worse, THRESHOLDS, tracking_uri=tracking_uri)
    assert not third.promoted and "does not beat" in third.reason
    assert reg.alias_version(name, reg.CHAMPION, tracking_uri) == v1

    # Passes and beats it: new champion, the old one kept as previous-champion.
    better = {"runtime_mape": 0.12, "within_10": 0.70}
    v4 = _log_and_register(tmp_path, tracking_uri, name, better)
    fourth = reg.promote(name, v4, better, THRESHOLDS, tracking_uri=tracking_uri)
    assert fourth.promoted and fourth.previous_champion == v1
    assert reg.alias_version(name, reg.CHAMPION, tracking_uri) == v4
    assert reg.load_champion(name, tracking_uri).metadata.model_uuid is not None

    # Rollback restores the previous champion, once.
    rolled = reg.rollback(name, tracking_uri)
    assert rolled.champion == v1 and reg.alias_version(name, reg.CHAMPION, tracking_uri) == v1
    with pytest.raises(LookupError):
        reg.rollback(name, tracking_uri)


def test_check_thresholds_reads_bounds_from_params_yaml() -> None:  # pure: runs in `make test-fast`
    import yaml

    from kernelcast.settings import PROJECT_ROOT

    thresholds = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())["register"]
    passing = {"runtime_mape": 0.1, "within_10": 0.9}
    assert reg.check_thresholds(passing, thresholds) == []
    failures = reg.check_thresholds({"runtime_mape": 0.9}, thresholds)
    assert len(failures) == 2 and failures[0].startswith("runtime_mape=0.9 violates")
    assert "within_10: missing" in failures[1]


@pytest.mark.slow
def test_promote_command_gates_on_params_yaml_and_rolls_back(tmp_path: Path, kc_home: Path) -> None:
    from typer.testing import CliRunner

    from kernelcast.cli import app
    from kernelcast.settings import Settings

    uri = Settings().tracking_uri()  # the store `kernelcast promote` uses: under KERNELCAST_HOME
    reg.ensure_experiment("kernelcast-test", (kc_home / "mlflow" / "artifacts").as_uri(), uri)
    name, runner = "kc-cli", CliRunner()
    passing = {"runtime_mape": 0.2, "within_10": 0.6}
    v1 = _log_and_register(tmp_path, uri, name, passing)
    v2 = _log_and_register(tmp_path, uri, name, {**passing, "within_10": 0.1})
    v3 = _log_and_register(tmp_path, uri, name, {**passing, "runtime_mape": 0.1})

    def promote(*args: str) -> int:
        return runner.invoke(app, ["promote", "--model-name", name, *args]).exit_code

    assert promote("--version", v1) == 0
    assert promote("--version", v2) == 1  # below min_within_10
    assert reg.alias_version(name, reg.CHAMPION, uri) == v1
    assert promote("--version", v3) == 0
    assert reg.alias_version(name, reg.CHAMPION, uri) == v3
    assert promote("--rollback") == 0
    assert reg.alias_version(name, reg.CHAMPION, uri) == v1
    assert promote("--version", "99") == 2
