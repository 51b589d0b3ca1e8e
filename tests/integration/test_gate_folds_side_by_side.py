"""`kernelcast evaluate --gate` refits the held-out GPUs of unseen-gpu as real Ray tasks side by side (each a
single-threaded fit), with the same scored rows as the folds run one after the other."""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from components.evaluation.folds import FoldJob, serial_fold_executor
from components.evaluation.report import gpu_folds
from components.registry.gate import EvaluationCaps
from kernelcast.settings import Settings
from tests.unit.test_bench import DeviceErrorPredictor, feature_table

pytestmark = pytest.mark.slow

ERROR = {"a100-pcie-40gb": 0.05, "h100-sxm5": 0.4, "rtx-3080": 0.15, "h100-pcie": 0.3}
FIT_S = 3.0  # each fit holds its process this long: one after the other, two folds cannot overlap


def _timed_factory(folder: str, family: str, train: pd.DataFrame, split: str):
    """A fit that records its process and interval (a file per fold), then answers with a known error."""
    started = time.time()
    time.sleep(FIT_S)
    held = sorted(set(ERROR) - set(train["device_id"].astype(str)))
    Path(folder, f"{'-'.join(held)}.txt").write_text(f"{os.getpid()} {started} {time.time()}")
    return DeviceErrorPredictor(train, ERROR), FIT_S


def test_gate_folds_run_as_ray_tasks_side_by_side(
    kc_settings: Settings, local_ray: None, tmp_path: Path
) -> None:
    from kernelcast.commands.evaluate import _gate_folds

    table = feature_table()
    caps = EvaluationCaps(max_train_rows=None, max_test_rows=200, max_gpu_folds=2, min_gpu_rows=1000)
    folds = gpu_folds(table, caps)
    assert len(folds) == 2
    jobs = [FoldJob("unseen-gpu", "tabular", fold, caps.max_test_rows, None) for fold in folds]
    assert _gate_folds(kc_settings, gate=False) is None  # not the gate: nothing starts Ray

    (tmp_path / "ray").mkdir()
    (tmp_path / "serial").mkdir()
    executor = _gate_folds(kc_settings, gate=True)(partial(_timed_factory, str(tmp_path / "ray")))
    parallel = executor(table, jobs, lambda _outcome: None)
    serial = serial_fold_executor(partial(_timed_factory, str(tmp_path / "serial")))(
        table, jobs, lambda _o: None
    )

    runs = [(path.read_text().split()) for path in sorted((tmp_path / "ray").iterdir())]
    assert len(runs) == 2
    (pid_a, start_a, end_a), (pid_b, start_b, end_b) = ((int(p), float(s), float(e)) for p, s, e in runs)
    assert pid_a != pid_b != os.getpid(), "each fold in a Ray worker process of its own"
    assert start_a < end_b and start_b < end_a, "the two folds ran one after the other"
    for ray_outcome, serial_outcome in zip(parallel, serial, strict=True):  # job order, same rows
        pd.testing.assert_frame_equal(ray_outcome.frame, serial_outcome.frame)
        assert ray_outcome.targets == serial_outcome.targets
        assert ray_outcome.timing["fold"] == serial_outcome.timing["fold"]
