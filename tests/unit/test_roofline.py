"""The training-free roofline predictor: predictions from f_* columns, save/load round trip."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from components.models import load_predictor
from components.models.base import Predictor
from components.models.roofline import RooflinePredictor


def features() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "measurement_id": ["a", "b", "c"],
            "f_roofline_time_us": [100.0, 10.0, np.nan],
            "f_pipes_time_us": [120.0, 12.0, np.nan],
            "f_flops": [1e9, 1e6, np.nan],
            "f_dram_bytes_min": [1e6, 1e7, np.nan],
            "f_bound": pd.Series(["compute", "bandwidth", None], dtype="string"),
            "m_roofline_time_us": [np.nan, np.nan, 5.0],
            "m_flops": [np.nan, np.nan, 2e6],
            "m_dram_bytes": [np.nan, np.nan, 1e6],
            "m_bound": pd.Series([None, None, "bandwidth"], dtype="string"),
        }
    )


def test_predictions_follow_the_roofline() -> None:
    pred = RooflinePredictor().fit(features()).predict(features())
    assert pred["pred_duration_us"].tolist() == [100.0, 10.0, 5.0]
    assert pred["pred_gflops"].iloc[0] == pytest.approx(1e9 / 100e-6 / 1e9)
    assert pred["pred_achieved_gbps"].iloc[1] == pytest.approx(1e7 / 10e-6 / 1e9)
    assert pred["pred_arith_intensity"].iloc[0] == pytest.approx(1000.0)
    assert pred["pred_roofline_class"].tolist() == ["compute", "bandwidth", "bandwidth"]
    assert isinstance(RooflinePredictor(), Predictor)


def test_from_source_mode_ignores_measured_counters() -> None:
    pred = RooflinePredictor(mode="pipes", use_measured_counters=False).predict(features())
    assert pred["pred_duration_us"].iloc[0] == 120.0
    assert pd.isna(pred["pred_duration_us"].iloc[2]) and pd.isna(pred["pred_roofline_class"].iloc[2])


def test_save_load_round_trip(tmp_path) -> None:
    model = RooflinePredictor(mode="pipes", use_measured_counters=False)
    model.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "predictor.json").read_text())["family"] == "roofline"
    restored = load_predictor(tmp_path / "m")
    assert isinstance(restored, RooflinePredictor)
    assert (restored.mode, restored.use_measured_counters) == ("pipes", False)
    pd.testing.assert_frame_equal(restored.predict(features()), model.predict(features()))
    assert restored.trained_on == frozenset()


def test_unknown_family_and_mode_are_refused(tmp_path) -> None:
    (tmp_path / "predictor.json").write_text('{"family": "oracle"}')
    with pytest.raises(ValueError, match="oracle"):
        load_predictor(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_predictor(tmp_path / "nothing")
    with pytest.raises(ValueError):
        RooflinePredictor(mode="magic")


def test_whole_programs_get_the_static_estimate_or_a_stated_reason() -> None:
    """A whole-program row has no op formula: the roofline answers it from its SASS (the tabular family's
    static estimate, from source, so measured counters stay unread) or names why it cannot -- the bolet
    split's 340 rows were all 'no reason given' before."""
    from components.models.cuda_runtime import (
        REASON_NO_STATIC,
        REASON_NO_STATIC_TABLE,
        REASON_OPENMP,
        unpredicted_reasons,
    )

    launch = {"grid_x": 256, "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1}
    programs = pd.DataFrame(
        {
            "measurement_id": ["p", "q", "r"],
            "device_id": "rtx-3080",
            "source": "gpuflopbench",
            "family": "program",
            "language": ["cuda", "openmp", "cuda"],
            "op": "k",
            "duration_us": [50.0, 60.0, 70.0],
            "f_roofline_time_us": np.nan,
            "s_total": [1000.0, np.nan, np.nan],
            "s_fp32": [400.0, np.nan, np.nan],
            "s_global_ld": [100.0, np.nan, np.nan],
            **launch,
        }
    )
    pred = RooflinePredictor(mode="classic", use_measured_counters=False).predict(programs)
    assert np.isfinite(pred["pred_duration_us"].iloc[0]) and pred["pred_duration_us"].iloc[0] > 0
    assert pred["pred_note"].iloc[0].startswith("static SASS roofline estimate")
    assert pred["pred_note"].iloc[1:].tolist() == [REASON_OPENMP, REASON_NO_STATIC]
    scored = programs.join(pred[["pred_duration_us", "pred_note"]])
    assert "no reason given" not in unpredicted_reasons(scored)
    # a table built without the static stage says so, rather than blaming the kernel's source
    bare = RooflinePredictor(use_measured_counters=False).predict(programs.drop(columns=["s_total"]))
    assert bare["pred_note"].iloc[2] == REASON_NO_STATIC_TABLE
    assert "pred_note" not in RooflinePredictor().predict(features()).columns  # op rows: nothing to say
