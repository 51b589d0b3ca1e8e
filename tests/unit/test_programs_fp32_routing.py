"""A module's FP32 GEMMs take the one routing an op question takes (``components.opmodel.routing``): on a GPU
whose own FP32 kernels are near the shape the measured tier answers, with the very runtime ``predict``
gives the op alone; elsewhere the routing's fallback (``engine_ops.FP32_FALLBACK``) answers, never below the
op's roofline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

# FP32 GEMM kernels of the T4 on a grid, each at 40% of its roofline speed (one op path's test data)
from tests.unit import test_one_op_path
from tests.unit.test_one_op_path import MEASURED_GPU

engine = test_one_op_path.engine  # the one op path's fixture: an engine of those kernels answers


class _Champion:
    """A tabular predictor's serving contract: twice the analytical roofline time."""

    family = "tabular"

    def predict_columns(self, cols: dict) -> dict[str, np.ndarray]:
        return {"pred_duration_us": 2.0 * np.asarray(cols["f_roofline_time_us"], dtype="float64")}

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:  # the feature-table contract a program uses
        roof = pd.to_numeric(table["f_roofline_time_us"], errors="coerce").to_numpy("float64")
        return pd.DataFrame({"pred_duration_us": 2.0 * roof})


def _addmm(m: int, n: int, k: int):
    """A traced module of one FP32 ``addmm`` (bias + [m, k] @ [k, n])."""
    from components.programs.ops import program_ops

    f32 = "torch.float32"
    op = {
        "aten": "addmm",
        "inputs": [[[n], f32], [[m, k], f32], [[k, n], f32]],
        "outputs": [[[m, n], f32]],
    }
    return program_ops([op])


def _single_op(m: int, n: int, k: int, device: str) -> dict:
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    shape = {"M": m, "N": n, "K": k}
    questions = parse_questions([{"op": "linear", "shape": shape, "dtype": "fp32", "device": device}])
    return answer_questions(_Champion(), questions, model_version="test")[0]


@pytest.mark.parametrize("shape", [(512, 2048, 2048), (768, 1536, 3072)], ids=["exact", "interpolated"])
def test_a_modules_fp32_linear_names_the_measured_tier_and_equals_the_single_op_answer(engine, shape):
    from components.devices import load_catalog
    from components.programs.program_features import op_times

    row = op_times([_addmm(*shape)], [MEASURED_GPU], load_catalog(), None, engine).frame.iloc[0]
    alone = _single_op(*shape, "T4")
    assert row["family"] == "linear" and row["dtype"] == "fp32"
    assert alone["tier"] == "measured"
    assert row["tier"] == "measured" and row["pred_source"] == "op engine"
    assert row["pred_us"] == pytest.approx(alone["duration_us"], rel=1e-9)
    assert row["pred_us"] >= row["roof_us"]


def test_without_the_gpus_own_kernels_the_module_does_not_name_the_measured_tier(engine):
    from components.devices import load_catalog
    from components.programs.program_features import op_times

    frame = op_times([_addmm(512, 2048, 2048)], ["h100-sxm"], load_catalog(), None, engine).frame
    row = frame.iloc[0]
    assert _single_op(512, 2048, 2048, "H100")["tier"] == "learned"
    assert row["tier"] != "measured"
    assert np.isfinite(row["pred_us"]) and row["pred_us"] >= row["roof_us"]


def test_with_the_learned_fallback_the_module_takes_the_champions_answer_as_predict_does(engine, monkeypatch):
    from components.devices import load_catalog
    from components.programs import engine_ops
    from components.programs.program_features import op_times

    monkeypatch.setattr(engine_ops, "FP32_FALLBACK", "learned")
    programs = [_addmm(512, 2048, 2048), _addmm(64, 64, 64)]
    catalog = load_catalog()
    frame = op_times(
        programs, ["h100-sxm", MEASURED_GPU], catalog, _Champion(), engine, learned_only=True
    ).frame
    for row in frame.itertuples():
        m, n, k = (512, 2048, 2048) if row.program == 0 else (64, 64, 64)
        alone = _single_op(m, n, k, "H100" if row.device_id == "h100-sxm" else "T4")
        assert row.tier == alone["tier"], (row.program, row.device_id)
        assert row.pred_us == pytest.approx(alone["duration_us"], rel=1e-9)
    assert set(frame["tier"]) == {"measured", "learned"}
