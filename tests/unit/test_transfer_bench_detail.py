"""The transfer bench's per-row detail: every held-out row with each answer, and the same errors the bench
sums (real spec and transfer fits on synthetic rows following known physics)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_tier_choice import GPUS, _store


@pytest.fixture(scope="module")
def catalog():
    from components.devices.catalog import load_catalog

    return load_catalog()


def test_row_detail_holds_each_answer_and_sums_to_the_bench_errors(catalog) -> None:
    from components.evaluation.transfer_bench import held_gpu_scores
    from components.opmodel import spec as spec_tier

    store = _store(catalog)
    others = {"gemm": store["gemm"][store["gemm"]["device_id"] != "h200"]}
    specs = {d: catalog.get(d) for d in GPUS if d != "h200"}
    spec_model = spec_tier.fit(spec_tier.training_rows(others, None, 500), specs, rounds=5)
    detail: list = []
    scored, _ = held_gpu_scores(store, "h200", spec_model, 30, 30, detail=detail)
    (group,) = scored
    (rows,) = detail
    assert len(rows) == group["n"] == 30 and set(rows["device"]) == {"h200"}
    assert {"engine", "spec", "sibling", "transfer", "tier", "bound", "latency_us", "M"} <= set(rows.columns)
    for column, total in (("engine", "sum_ape"), ("spec", "sum_spec")):
        ape = np.abs(rows[column] - rows["latency_us"]) / rows["latency_us"]
        assert ape.sum() == pytest.approx(group[total])
    # H100 is of H200's generation: every answer rests on it (blended with the other relatives)
    assert (rows["tier"] == "transfer").all() and rows["support"].str.contains("h100-sxm").all()
