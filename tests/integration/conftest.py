"""Fixtures shared by the integration tests of a registered champion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kernelcast.settings import Settings

if TYPE_CHECKING:
    from tests.integration.registered import CarryingChampion


@pytest.fixture(scope="session")
def carrying_champion(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CarryingChampion]:
    """A champion carrying its op engine, calibrations and deployment constants
    (``registered.register_carrying_champion``), built once per session: its consumers only read it."""
    from tests.integration.registered import CarryingChampion, register_carrying_champion

    root = tmp_path_factory.mktemp("carrying-champion")
    champion = CarryingChampion("kernelcast-standalone-test", f"sqlite:///{root / 'mlflow.db'}", root)
    patch = pytest.MonkeyPatch()  # the training side's state folder and store, for the build only
    try:
        patch.setenv("KERNELCAST_HOME", str(root / "home"))
        patch.setenv("MLFLOW_TRACKING_URI", champion.uri)
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        register_carrying_champion(root, champion.uri, champion.name)
    finally:
        patch.undo()
    yield champion


# One real AIConfigurator table (H100 GEMMs under vLLM, ~107k rows): the op engine's small real subset for
# the tests that run ``kernelcast train``. The train stage always fits the op engine beside the predictor, on
# the measured store it builds from the datasets folder; on the whole bundle that is the pipeline's fit (the
# full store, every GPU's transfer and achievable-peak choices: minutes and GBs), which these tests do not
# test -- they test training, registering and evaluating the predictor, and that an engine is fitted.
OP_ENGINE_TABLE = "aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"


@pytest.fixture(scope="session")
def op_engine_datasets(kc_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets folder holding ``OP_ENGINE_TABLE`` of the session's datasets folder (symlinked)."""
    root = tmp_path_factory.mktemp("op-engine-datasets")
    table = Path(kc_settings.datasets_dir) / "aiconfigurator" / OP_ENGINE_TABLE
    link = root / "aiconfigurator" / OP_ENGINE_TABLE
    link.parent.mkdir(parents=True)
    if table.is_file():
        link.symlink_to(table)
    return root


@pytest.fixture
def small_op_engine(op_engine_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``kernelcast train`` in this test fits its op engine on ``op_engine_datasets``."""
    monkeypatch.setenv("KERNELCAST_DATASETS_DIR", str(op_engine_datasets))
    return op_engine_datasets
