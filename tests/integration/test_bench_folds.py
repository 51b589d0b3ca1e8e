"""Leave-one-GPU-out folds as real Ray tasks give the same rows as the same folds run one by one."""

from __future__ import annotations

import pandas as pd
import pytest

from components.evaluation.bench import run_accuracy_bench
from components.evaluation.folds import ray_fold_executor
from tests.unit.test_bench import DeviceErrorPredictor, feature_table

pytestmark = pytest.mark.slow

ERROR = {"a100-pcie-40gb": 0.05, "h100-sxm5": 0.4, "rtx-3080": 0.15, "h100-pcie": 0.3}


def _factory(family: str, train: pd.DataFrame, split: str):
    return DeviceErrorPredictor(train, ERROR, missing=frozenset({"rtx-3080"})), 0.0


def test_folds_as_ray_tasks_match_serial_folds(local_ray: None) -> None:
    import ray

    table = feature_table()
    serial = run_accuracy_bench(table, ["tabular"], ["unseen-gpu"], _factory, [], min_gpu_rows=1000)
    lines: list[str] = []
    parallel = run_accuracy_bench(
        table,
        ["tabular"],
        ["unseen-gpu"],
        _factory,
        [],
        min_gpu_rows=1000,
        fold_executor=ray_fold_executor(_factory, lambda: None),
        log=lines.append,
    )
    assert ray.is_initialized()
    assert parallel.rows == serial.rows
    assert any("4 folds as Ray tasks" in line for line in lines)
    assert sorted(t["fold"] for t in parallel.timings) == sorted(t["fold"] for t in serial.timings)
    assert any(
        n.startswith("unseen-gpu tabular: 4 folds") and n.endswith("as parallel Ray tasks")
        for n in parallel.notes
    )
    by_target = {(r["target"], r["metric"]): r for r in parallel.rows}
    assert by_target[("duration_us[device=rtx-3080]", "mape")]["coverage"] == 0.0
    assert by_target[("duration_us[median GPU]", "mape")]["ours"] == pytest.approx(0.3)
