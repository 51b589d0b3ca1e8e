"""Helpers shared by the integration tests that need a real registered model: a small tabular predictor
trained on our own H100 measurements (profiled-data/), and a saved predictor folder logged, registered and
aliased ``champion`` in a real MLflow store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tests.conftest import H100_RUN


def profiled_feature_table() -> pd.DataFrame:
    """The feature table of profiled-data/ (our own H100 measurements), built by the real stages."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.ingest.profiled import ingest
    from components.ingest.schema import with_measurement_ids

    catalog = load_catalog()
    output = ingest(H100_RUN, catalog)
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


# A champion that carries every component it answers with (components.registry.carried): the op engine
# over a one-row measured store of a known GEMM time (so the measured tier's answer is known), an op-engine
# calibration and a runtime correction ``kernelcast calibrate`` would have stored in the training state
# folder, and the serving engines' constants.
CARRYING_GEMM = {"M": 4096, "N": 1024, "K": 1024}
CARRYING_MEASURED_US = 250.0  # the store's one GEMM time (above the roofline time of this GEMM on an H100)
CARRYING_CALIBRATION = {"*": {"log_shift": -0.25, "rows": 12}}  # an op-engine calibration's GPU-wide level
CARRYING_CORRECTION = 1.5  # a stored runtime correction of the H100: every classic-op runtime x 1.5


@dataclass(frozen=True)
class CarryingChampion:
    """``models:/<name>@champion`` in the sqlite store ``uri``; its model folder is ``root/model``."""

    name: str
    uri: str
    root: Path


def _one_row_op_engine(folder: Path, store: Path) -> None:
    """A real op engine over a one-row measured store, saved where a trained predictor keeps it."""
    from components.opmodel.engine import OpEngine
    from components.opmodel.store import save_store

    gemm = pd.DataFrame(
        {
            "device_id": ["h100-sxm"],
            "dtype": ["fp16"],
            **{k: [float(v)] for k, v in CARRYING_GEMM.items()},
            "latency_us": [CARRYING_MEASURED_US],
            "n_repeats": [3],
            "latency_min_us": [CARRYING_MEASURED_US],
            "latency_max_us": [CARRYING_MEASURED_US],
        }
    )
    save_store({"gemm": gemm}, store)
    OpEngine.from_store(store).save(folder)


def register_carrying_champion(root: Path, uri: str, name: str) -> None:
    """Train, carry, log, register and alias ``name@champion`` with the training state folder ``root/home``
    (the caller points KERNELCAST_HOME and MLFLOW_TRACKING_URI there); the model folder is ``root/model``."""
    import math

    from components.models.calibration import Correction, correction_path
    from components.opmodel.calibrated import save_calibration

    train_small_tabular(root / "model", n_estimators=40)
    _one_row_op_engine(root / "model" / "opmodel", root / "store")
    # calibrated in the training state folder before the model is logged: the artifact must carry both
    save_calibration(root / "home", "a100-sxm4", CARRYING_CALIBRATION)
    correction = Correction("global", "h100-sxm", 10, global_log=math.log(CARRYING_CORRECTION))
    correction.save(correction_path(root / "home", "h100-sxm"))
    register_champion(root / "model", uri, name, "standalone", root / "artifacts")
