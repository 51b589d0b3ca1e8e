"""The model-selection protocol on real NeuSight rows: whole GPUs held out of the train side only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from components.models.selection import Candidate, holdout_devices, select
from components.models.tabular_config import TabularConfig
from components.platform.config import DEFAULT_DATASETS_DIR

COLLECT = Path("scripts/asplos/data/dataset/train/collect")
GPUS = ("Tesla P4", "Tesla T4", "Tesla V100-PCIE-32GB", "NVIDIA A100-PCIE-40GB")
OPS = ("relu", "add")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """Four GPUs' relu and add rows, copied in NeuSight's upstream layout and featurised."""
    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.ingest.neusight import ingest

    source = DEFAULT_DATASETS_DIR / "neusight"
    root = tmp_path_factory.mktemp("neusight")
    for op in OPS:
        for gpu in GPUS:
            relative = COLLECT / op / "p2.1.0" / f"{gpu}.csv"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / relative, root / relative)
    # The adapter insists on the whole upstream layout: the test files, cut to their first rows.
    for path in sorted((source / "scripts/asplos/data/dataset/test").glob("*.csv")):
        target = root / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        with path.open() as handle:
            target.write_text("".join(line for _, line in zip(range(6), handle, strict=False)))
    catalog = load_catalog()
    from components.ingest.schema import with_measurement_ids

    output = ingest(root, catalog)
    return build_feature_table(with_measurement_ids(output.measurements), output.kernels, catalog)


def test_holdouts_include_the_fastest_and_the_highest_bandwidth_gpu(table: pd.DataFrame) -> None:
    held = holdout_devices(table, extra=1)
    assert held[0] == "a100-pcie-40gb"  # fastest compute and bandwidth of the four
    assert len(held) == len(set(held)) == 3  # the highest-bandwidth one is the same GPU: the next instead
    assert set(held) <= set(table["device_id"])


def test_select_scores_every_candidate_per_held_out_gpu_and_picks_the_lowest_median(
    table: pd.DataFrame,
) -> None:
    small = TabularConfig(n_estimators=60, num_leaves=15, min_child_samples=20)
    candidates = (
        Candidate("transfer", {"feature_set": "transfer"}),
        Candidate("no-floor", {"feature_set": "transfer", "launch_floor": False}),
    )
    report = select(
        table, small, candidates, devices=["a100-pcie-40gb", "t4"], max_train_rows=3000, max_test_rows=500
    )
    assert set(report.scores) == {"transfer", "no-floor"}
    for score in report.scores.values():
        assert set(score["per_gpu"]) == {"a100-pcie-40gb", "t4"}
        assert all(0 < v < 10 for v in score["per_gpu"].values())
    medians = {name: score["median"] for name, score in report.scores.items()}
    assert report.chosen == min(medians, key=medians.get)


def test_a_train_side_without_enough_rows_per_gpu_is_a_clear_error(table: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="enough rows"):
        select(table.head(100), TabularConfig(), (Candidate("t", {}),))
