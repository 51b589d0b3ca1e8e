"""A program's GEMMs answered by the op engine (a real engine over a small measured store of known
latencies), every other op by the tabular path; each op row names its tier."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

LINEAR = {"M": 4096.0, "N": 1024.0, "K": 1024.0}


def _program():
    from components.programs.ops import program_ops

    ops = [
        {
            "aten": "addmm",
            "inputs": [
                [[1024], "torch.float16"],
                [[4096, 1024], "torch.float16"],
                [[1024, 1024], "torch.float16"],
            ],
            "outputs": [[[4096, 1024], "torch.float16"]],
        },
        {
            "aten": "relu",
            "inputs": [[[4096, 1024], "torch.float16"]],
            "outputs": [[[4096, 1024], "torch.float16"]],
        },
    ]
    return program_ops(ops)


def _engine(catalog, latency_us: float):
    from components.opmodel.engine import OpEngine

    gemm = pd.DataFrame(
        {
            "device_id": ["h100-sxm"],
            "dtype": ["fp16"],
            **{k: [v] for k, v in LINEAR.items()},
            "latency_us": [latency_us],
            "n_repeats": [3],
            "latency_min_us": [latency_us],
            "latency_max_us": [latency_us],
        }
    )
    return OpEngine.from_frames({"gemm": gemm})


def test_the_engine_answers_the_gemm_and_names_its_tier_the_rest_keeps_the_tabular_answer():
    from components.devices import load_catalog
    from components.programs.program_features import op_times

    catalog = load_catalog()
    program = _program()
    plain = op_times([program], ["h100-sxm"], catalog).frame.set_index("aten")
    with_engine = op_times([program], ["h100-sxm"], catalog, None, _engine(catalog, 250.0)).frame
    with_engine = with_engine.set_index("aten")
    # the measured kernel of this GPU at this very shape answers the GEMM, verbatim
    assert with_engine.loc["addmm", "tier"] == "measured"
    assert with_engine.loc["addmm", "pred_source"] == "op engine"
    assert with_engine.loc["addmm", "pred_us"] == pytest.approx(250.0)
    # the engine does not cover elementwise ops: the tabular path's answer (here the roofline) stays
    assert with_engine.loc["relu", "tier"] == "roofline"
    assert with_engine.loc["relu", "pred_us"] == pytest.approx(plain.loc["relu", "pred_us"])
    assert plain.loc["addmm", "tier"] == "roofline"


def test_an_engine_answer_is_never_below_the_ops_roofline():
    from components.devices import load_catalog
    from components.programs.program_features import op_times

    catalog = load_catalog()
    frame = op_times([_program()], ["h100-sxm"], catalog, None, _engine(catalog, 1e-3)).frame
    assert (frame["pred_us"] >= frame["roof_us"] - 1e-9).all()
    assert np.isfinite(frame["pred_us"]).all()


def test_an_engine_without_data_does_not_overrule_the_tabular_answer():
    from components.devices import load_catalog
    from components.opmodel.engine import OpEngine
    from components.programs.engine_ops import engine_answers
    from components.programs.program_features import op_times

    assert not engine_answers(OpEngine()) and not engine_answers(None)
    frame = op_times([_program()], ["h100-sxm"], load_catalog(), None, OpEngine()).frame
    assert set(frame["tier"]) == {"roofline"}
