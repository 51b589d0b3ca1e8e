"""Relative answers remembered per row (``opmodel.row_memo``): a batch that shares rows with an earlier one
computes only its new rows, and every answer is the one a fresh tier gives the batch whole; the engine's
answers of GPUs asked in overlapping batches (a whole-catalog rank's tensor-parallel sizes) are unchanged."""

from __future__ import annotations

import numpy as np

from tests.unit.test_opmodel_transfer import SIZES, _model, catalog, synthetic_gemm  # noqa: F401


def _engine(catalog):  # noqa: F811
    from components.opmodel.engine import OpEngine

    gemm = synthetic_gemm(catalog)
    return OpEngine.from_frames({"gemm": gemm[gemm["device_id"] == "h100-sxm"]}, None, _model())


def _batch(n_values: tuple[float, ...]) -> dict[str, np.ndarray]:
    m, n = np.meshgrid(SIZES * 3.0, np.asarray(n_values), indexing="ij")  # off the measured M sweep
    return {"M": m.ravel(), "N": n.ravel(), "K": np.full(m.size, 3000.0)}


def test_only_new_rows_are_computed_and_answers_are_the_whole_batchs(catalog) -> None:  # noqa: F811
    engine, fresh = _engine(catalog), _engine(catalog)
    tier = engine.transfer
    computed: list[int] = []
    inner = tier._relative_answer

    def counting(question, shape, roof_us):
        computed.append(len(roof_us))
        return inner(question, shape, roof_us)

    tier._relative_answer = counting
    from components.physics import roofline as physics

    h100 = catalog.get("h100-sxm")
    small, large = _batch((1000.0, 3000.0)), _batch((1000.0, 3000.0, 7000.0))
    for shape in (small, large):
        roof = physics.roofline("gemm", "bf16", shape, h100)
        got = tier.relative_answer("gemm", "h100-sxm", "bf16", shape, roof, None)
        want = fresh.transfer.relative_answer("gemm", "h100-sxm", "bf16", shape, roof, None)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    # the second batch shares two thirds of its rows with the first: only the third N was computed
    assert computed == [len(small["M"]), len(large["M"]) - len(small["M"])]
    assert np.isfinite(got[0]).all() and got[2].any()  # answered, some held past the table's reach


def test_engine_answers_of_overlapping_batches_equal_fresh_answers(catalog) -> None:  # noqa: F811
    engine = _engine(catalog)
    l40s, a100 = catalog.get("l40s"), catalog.get("a100-sxm4-80gb")
    engine.predict("gemm", "bf16", _batch((1000.0, 3000.0)), l40s)  # fills the relative's rows
    shape = _batch((1000.0, 3000.0, 7000.0))
    again = engine.predict("gemm", "bf16", shape, a100)
    fresh = _engine(catalog).predict("gemm", "bf16", shape, a100)
    assert (again.tier == "transfer").all()
    np.testing.assert_array_equal(again.duration_us, fresh.duration_us)
    assert list(again.support) == list(fresh.support)


def test_a_batch_with_a_label_column_is_not_remembered_by_row() -> None:
    from components.opmodel.row_memo import RowMemo

    memo = RowMemo()
    labels = {"T": np.arange(3.0), "distribution": np.array(["balanced"] * 3, dtype=object)}
    assert memo.answer(("moe",), labels, 3, lambda part, rows: (part["T"],)) is None
    calls: list[np.ndarray] = []

    def double(part: dict[str, np.ndarray], rows: np.ndarray) -> tuple[np.ndarray]:
        calls.append(rows)
        return (part["T"] * 2.0,)

    (first,) = memo.answer(("x",), {"T": np.array([1.0, 2.0, 2.0])}, 3, double)
    (second,) = memo.answer(("x",), {"T": np.array([2.0, 5.0, 1.0])}, 3, double)
    assert first.tolist() == [2.0, 4.0, 4.0] and second.tolist() == [4.0, 10.0, 2.0]
    assert [r.tolist() for r in calls] == [[0, 1], [1]]  # repeated and known rows computed once
    (other,) = memo.answer(("y",), {"T": np.array([1.0])}, 1, double)  # another question: its own rows
    assert other.tolist() == [2.0] and len(calls) == 3
