"""Helpers shared by the integration tests that need a real registered model: a small tabular predictor
trained on our own H100 measurements (profiled-data/), and a saved predictor folder logged, registered and
aliased ``champion`` in a real MLflow store."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from components.platform.config import PROJECT_ROOT


def profiled_feature_table() -> pd.DataFrame:
    """The feature table of profiled-data/ (our own H100 measurements), built by the real stages."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.ingest.profiled import ingest
    from components.ingest.schema import with_measurement_ids

    catalog = load_catalog()
    output = ingest(PROJECT_ROOT / "profiled-data", catalog)
    measurements = output.measurements
    if measurements["measurement_id"].isna().any():
        measurements = with_measurement_ids(measurements)
    return build_feature_table(measurements, output.kernels, catalog)


def train_small_tabular(out: Path, n_estimators: int = 60, table: pd.DataFrame | None = None) -> Path:
    """A small tabular predictor fitted on ``table`` (default profiled-data/'s; seconds), saved in ``out``."""
    from components.models.tabular import TabularPredictor
    from components.models.tabular_config import TabularConfig

    table = profiled_feature_table() if table is None else table
    config = TabularConfig(n_estimators=n_estimators, num_leaves=15, min_child_samples=5, min_rows=10)
    TabularPredictor(config).fit(table).save(out)
    return out


def register_champion(folder: Path, uri: str, name: str, experiment: str, artifacts: Path) -> str:
    """Log ``folder`` as a pyfunc model in ``experiment`` (artifacts under ``artifacts``), register it as
    a version of ``name`` and alias it ``champion``; returns the logged model's URI."""
    from components.registry import mlflow_registry as reg

    reg.ensure_experiment(experiment, artifacts.as_uri(), uri)
    model_uri = reg.log_predictor(
        folder, {}, {"family": "tabular"}, {"family": "tabular"}, experiment=experiment, tracking_uri=uri
    )
    version = reg.register(model_uri, name, uri)
    reg.mlflow_client(uri).set_registered_model_alias(name, "champion", version)
    return model_uri
