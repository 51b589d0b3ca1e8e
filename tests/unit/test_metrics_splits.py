"""Metric functions against hand-computed values; splits against leakage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from components.common import metrics
from components.evaluation.splits import (
    bolet_roofline_split,
    make_split,
    random_split,
    unseen_gpu_split,
    unseen_kernel_split,
)


def test_mape_median_within_by_hand() -> None:
    true = [100.0, 200.0, 50.0, 10.0]
    pred = [110.0, 150.0, 50.0, 30.0]  # errors 0.10, 0.25, 0.0, 2.0
    assert metrics.mape(true, pred) == pytest.approx((0.10 + 0.25 + 0.0 + 2.0) / 4)
    assert metrics.median_ape(true, pred) == pytest.approx((0.10 + 0.25) / 2)
    assert metrics.within(true, pred, 0.10) == pytest.approx(0.5)  # 0.10 counts as within
    report = metrics.regression_report(true, pred)
    assert report["within_20"] == pytest.approx(0.5)
    assert report["n"] == 4


def test_missing_and_zero_truth_are_excluded_not_filled() -> None:
    true = [100.0, 0.0, float("nan"), 10.0]
    pred = [100.0, 5.0, 3.0, 11.0]
    assert metrics.regression_report(true, pred)["n"] == 2
    assert metrics.mape(true, pred) == pytest.approx(0.05)
    assert math.isnan(metrics.mape([float("nan")], [1.0]))


def test_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="shape"):
        metrics.mape([1.0, 2.0], [1.0])


def test_balanced_accuracy_punishes_constant_guess() -> None:
    true = ["bandwidth"] * 9 + ["compute"]
    guess = ["bandwidth"] * 10
    assert metrics.accuracy(true, guess) == pytest.approx(0.9)
    assert metrics.balanced_accuracy(true, guess) == pytest.approx(0.5)
    mixed = ["bandwidth"] * 8 + ["compute", "compute"]  # 8/9 bandwidth right, 1/1 compute right
    assert metrics.balanced_accuracy(true, mixed) == pytest.approx((8 / 9 + 1.0) / 2)
    # a missing answer or a label never true counts as wrong; one true class scores its recall alone
    unanswered = [None] * 3 + ["bandwidth"] * 6 + ["memory"]
    assert metrics.balanced_accuracy(true, unanswered) == pytest.approx((6 / 9 + 0.0) / 2)
    assert metrics.balanced_accuracy([1, 1, 1], [1, 0, 1]) == pytest.approx(2 / 3)
    assert np.isnan(metrics.balanced_accuracy([None], ["compute"]))


def test_mape_is_sklearns_over_the_comparable_rows() -> None:
    from sklearn.metrics import mean_absolute_percentage_error

    true, pred = [2.0, 0.0, np.nan, 4.0, -5.0], [1.0, 3.0, 1.0, 5.0, -4.0]
    kept = [0, 3, 4]  # a zero or missing truth is left out, never filled
    expected = mean_absolute_percentage_error(np.take(true, kept), np.take(pred, kept))
    assert metrics.mape(true, pred) == expected == pytest.approx((0.5 + 0.25 + 0.2) / 3)


def test_interval_coverage() -> None:
    assert metrics.interval_coverage([1, 2, 3, 4], [0, 2.5, 2, 5], [2, 3, 4, 6]) == pytest.approx(0.5)


def _table(n_kernels: int = 60, devices: tuple[str, ...] = ("a100-pcie-40gb", "t4", "v100")) -> pd.DataFrame:
    rows = []
    for k in range(n_kernels):
        for d in devices:
            rows.append(
                {
                    "measurement_id": f"m{k}-{d}",
                    "kernel_id": f"k{k}",
                    "device_id": d,
                    "source": "s",
                    "family": "gemm",
                    "upstream_file": "f.csv",
                    "upstream_row": k,
                }
            )
    return pd.DataFrame(rows)


def test_random_split_is_deterministic_and_disjoint() -> None:
    table = _table()
    (a,), (b,) = random_split(table), random_split(table.sample(frac=1.0, random_state=3))
    assert set(a.test) == set(b.test)
    assert not set(a.train) & set(a.test)
    assert 0.1 < len(a.test) / len(table) < 0.3


def test_unseen_kernel_has_no_kernel_on_both_sides() -> None:
    table = _table()
    (fold,) = unseen_kernel_split(table)
    train_kernels = set(table.loc[fold.train, "kernel_id"])
    test_kernels = set(table.loc[fold.test, "kernel_id"])
    assert test_kernels and not train_kernels & test_kernels


def test_unseen_gpu_leaves_each_device_out_once() -> None:
    table = _table()
    folds = unseen_gpu_split(table)
    assert [f.name for f in folds] == [f"unseen-gpu:{d}" for d in sorted(table["device_id"].unique())]
    for fold in folds:
        held_out = set(table.loc[fold.test, "device_id"])
        assert len(held_out) == 1 and not held_out & set(table.loc[fold.train, "device_id"])


def test_bolet_split_is_balanced_and_program_disjoint() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for p in range(200):
        for k in range(3):
            rows.append(
                {
                    "measurement_id": f"m{p}-{k}",
                    "kernel_id": f"p{p}k{k}",
                    "program": f"prog{p}",
                    "device_id": "rtx3080",
                    "source": "gpuflopbench",
                    "family": "program",
                    "upstream_file": "cuda-profiling/profiling-data.csv",
                    "upstream_row": p * 3 + k,
                    "roofline_class_published": "compute" if rng.random() < 0.35 else "bandwidth",
                }
            )
    table = pd.DataFrame(rows)
    (fold,) = bolet_roofline_split(table, per_class=40)
    labels = table.loc[fold.test, "roofline_class_published"].value_counts()
    assert labels["compute"] == 40 and labels["bandwidth"] == 40
    assert not set(table.loc[fold.train, "program"]) & set(table.loc[fold.test, "program"])


def test_unknown_split_name_lists_choices() -> None:
    with pytest.raises(ValueError, match="unseen-kernel"):
        make_split(_table(), "nope")
