"""Fixtures shared by the integration tests of a registered champion."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

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
