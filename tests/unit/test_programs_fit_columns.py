"""The program model's least-squares fit reads its rows' columns once (``overheads.FloatColumns``), not
through pandas on every evaluation: the same fit to the bit, and a view that cannot go stale under its fit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from components.programs import overheads
from components.programs.overheads import ConfigModel, FloatColumns, fit_config
from tests.unit.test_programs_ops import _small_programs  # KernelBench-like rows, GEMM time + counts


def _frame(seed: int):
    frame, true = _small_programs(300, seed=seed)
    frame["pred_elementwise"] = frame["pred_gemm"] * 0.2
    frame["n_forwards"] = 1.0
    frame["n_elementwise"] = (frame["n_kernels"] // 3).astype("int64")  # an integer count column
    return frame, true + 2.0 * frame["pred_elementwise"].to_numpy()


def _fields(model: ConfigModel) -> dict:
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.name != "_booster"}


def test_the_fit_through_the_column_arrays_is_the_fit_through_pandas_to_the_bit(monkeypatch):
    frame, true = _frame(seed=3)
    fast = fit_config(frame, true, residual=False, stands=("gemm",))
    monkeypatch.setattr(overheads, "FloatColumns", lambda rows: rows)  # base() reads the frame itself
    slow = fit_config(frame, true, residual=False, stands=("gemm",))
    assert _fields(fast) == _fields(slow)  # every parameter equal as floats, not approximately
    assert fast.log_eff and fast.call_us


def test_base_on_the_column_arrays_equals_base_on_the_frame_and_the_arrays_are_read_only():
    frame, true = _frame(seed=5)
    model = fit_config(frame, true, residual=False)
    columns = FloatColumns(frame)
    assert np.array_equal(model.base(columns, "pred"), model.base(frame, "pred"))
    assert np.array_equal(model.ops(columns, "pred"), model.ops(frame, "pred"))
    with pytest.raises(ValueError):  # no caller can change what a later evaluation reads
        columns["n_kernels"].to_numpy("float64")[0] = 1.0
    with pytest.raises(TypeError):
        columns["n_kernels"].to_numpy("int64")


def test_a_second_fit_on_other_rows_reads_its_own_rows_not_the_first_fits():
    first_frame, first_true = _frame(seed=7)
    second_frame, second_true = _frame(seed=8)
    second_frame["n_kernels"] = second_frame["n_kernels"] * 3.0  # other rows, other launch counts
    first = fit_config(first_frame, first_true, residual=False)
    second = fit_config(second_frame, second_true, residual=False)
    alone = fit_config(second_frame.copy(), second_true.copy(), residual=False)
    assert _fields(second) == _fields(alone)
    assert _fields(second) != _fields(first)
