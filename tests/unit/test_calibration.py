"""The calibration tier on real rows: PipeWeave's FP8 GEMM test file (the same 2,102 shapes on H100,
H200, H20 and H800), read by the real adapter into tmp_path.

The "model" for a GPU is a real, simple one: each kernel's median runtime over the training GPUs
(the GPU-blind answer a spec-free predictor would give), so what the corrections must learn is
the new GPU's real speed relative to the others.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from components.evaluation.calibration import (
    CalibrationParams,
    check_ks,
    choose_methods,
    draw_calibration_rows,
    run_calibration_bench,
    scored_rows,
    suite_mask,
)
from components.models.calibration import CalibrationError, Correction, fit_correction
from kernelcast.settings import DEFAULT_DATASETS_DIR
from tests.conftest import H100_RUN

PIPEWEAVE = DEFAULT_DATASETS_DIR / "pipeweave"
pytestmark = pytest.mark.skipif(not PIPEWEAVE.is_dir(), reason="public datasets bundle not present")
SHARE = 0.2


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    from components.devices import load_catalog
    from components.ingest import pipeweave
    from components.ingest.schema import with_measurement_ids

    root = tmp_path_factory.mktemp("pw") / "pipeweave"
    (root / "dataset").mkdir(parents=True)
    train = (PIPEWEAVE / "dataset" / "gemm_fp8_train.csv").read_text().splitlines()[:9]
    (root / "dataset" / "gemm_fp8_train.csv").write_text("\n".join(train) + "\n")
    shutil.copy(PIPEWEAVE / "dataset" / "gemm_fp8_test.csv", root / "dataset" / "gemm_fp8_test.csv")
    out = pipeweave.ingest(root, load_catalog())
    m = with_measurement_ids(out.measurements)
    m = m[m["upstream_file"] == "dataset/gemm_fp8_test.csv"]
    kernels = out.kernels[["kernel_id", "family", "op", "dtype", "shape_json"]].copy()
    # GPU-independent kernel features, as the feature stage names them (f_*): work, traffic, ratio.
    shape = pd.json_normalize(kernels["shape_json"].map(json.loads).tolist())
    kernels["f_flops"] = 2.0 * shape["M"] * shape["N"] * shape["K"]
    kernels["f_bytes"] = shape["M"] * shape["K"] + shape["K"] * shape["N"] + 2.0 * shape["M"] * shape["N"]
    kernels["f_intensity"] = kernels["f_flops"] / kernels["f_bytes"]
    kernels = kernels.drop(columns=["shape_json"])
    frame = m[["measurement_id", "kernel_id", "device_id", "source", "duration_us"]].merge(
        kernels, on="kernel_id"
    )
    frame = frame.drop_duplicates(["kernel_id", "device_id"]).reset_index(drop=True)
    assert set(frame["device_id"]) == {"h100-sxm", "h200", "h20", "h800"}
    return frame


class KernelMedian:
    """Each kernel's median runtime on the GPUs it was fitted on (a real GPU-blind model)."""

    def __init__(self, train: pd.DataFrame) -> None:
        self.table = train.groupby("kernel_id")["duration_us"].median()

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(
            {"pred_duration_us": frame["kernel_id"].map(self.table).astype("float64")}, index=frame.index
        )


def _mape(measured: pd.Series, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(predicted) / measured.to_numpy() - 1)))


def test_draw_is_deterministic_disjoint_and_the_same_suite_on_every_gpu(rows: pd.DataFrame) -> None:
    h20 = rows[rows["device_id"] == "h20"]
    drawn = draw_calibration_rows(h20, 100, SHARE)
    assert len(drawn) == 100
    assert list(draw_calibration_rows(h20.sample(frac=1.0, random_state=3), 100, SHARE)) == list(drawn)
    assert list(draw_calibration_rows(h20, 120, SHARE)[:100]) == list(drawn)  # K + more extends K
    scored = scored_rows(h20, SHARE)
    assert not set(drawn) & set(scored)
    assert set(h20.loc[drawn, "kernel_id"]).isdisjoint(set(h20.loc[scored, "kernel_id"]))
    assert 0.1 < len(scored) / len(h20) < 0.9
    # The suite is a set of kernels: the same kernels on every GPU.
    suites = [set(part.loc[suite_mask(part, SHARE), "kernel_id"]) for _, part in rows.groupby("device_id")]
    assert all(s == suites[0] for s in suites)
    assert len(draw_calibration_rows(h20, 0, SHARE)) == 0


def test_corrections_learn_a_new_gpu_from_its_calibration_rows(rows: pd.DataFrame) -> None:
    on = rows["device_id"] == "h20"
    model = KernelMedian(rows[~on])
    h20 = rows[on]
    cal = h20.loc[draw_calibration_rows(h20, 100, SHARE)]
    test = h20.loc[scored_rows(h20, SHARE)]
    base = model.predict(test)["pred_duration_us"].to_numpy()
    before = _mape(test["duration_us"], base)
    errors = {}
    for method in ("global", "group", "residual"):
        correction = fit_correction(method, cal, model.predict(cal)["pred_duration_us"], device_id="h20")
        assert correction.n_rows == 100
        errors[method] = _mape(test["duration_us"], correction.apply(test, base))
        again = Correction.from_dict(correction.to_dict())
        np.testing.assert_allclose(again.apply(test, base), correction.apply(test, base))
    # H20 is ~2.7x slower than the other Hopper GPUs on these GEMMs: one factor removes most of it.
    assert before > 0.5 and errors["global"] < before / 2
    assert errors["residual"] < errors["global"]
    assert (
        fit_correction("none", cal, model.predict(cal)["pred_duration_us"]).apply(test, base).tolist()
        == base.tolist()
    )


def test_bad_correction_input_is_a_clear_error(rows: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="unknown calibration method 'median'"):
        fit_correction("median", rows.head(5), np.ones(5))
    (tmp_path / "c.json").write_text('{"method": "nope"}')
    with pytest.raises(CalibrationError, match="not a calibration correction"):
        Correction.load(tmp_path / "c.json")
    with pytest.raises(ValueError, match=">= 0, got -1"):
        check_ks([0, -1])
    assert check_ks([400, 0, 25, 25]) == (0, 25, 400)


def test_choice_is_made_on_training_gpus_only(rows: pd.DataFrame) -> None:
    """The held-out GPU's own rows never choose: scaling its measurements leaves the choice as it was."""
    params = CalibrationParams(methods=("none", "global", "group", "refit"), inner_gpus=2, refit_weight=3)
    fit = KernelMedian
    first = run_calibration_bench(rows, ["h20"], (0, 25, 100), fit, params)
    shaken = rows.copy()
    on = shaken["device_id"] == "h20"
    shaken.loc[on, "duration_us"] = shaken.loc[on, "duration_us"] * np.where(
        np.arange(on.sum()) % 2, 0.25, 4.0
    )  # the held-out GPU's rows made nonsense
    second = run_calibration_bench(shaken, ["h20"], (0, 25, 100), fit, params)
    assert first.chosen == second.chosen
    assert first.chosen["h20"][0] == "none" and first.chosen["h20"][100] != "none"
    curve = {r["scope"]: r["ours"] for r in first.rows if r["metric"] == "mape"}
    assert curve["median GPU,calibration=100"] < curve["median GPU,calibration=0"] / 2
    assert first.timings[0]["inner"] and "h20" not in first.timings[0]["inner"]


def test_choose_methods_prefers_the_simpler_on_a_tie() -> None:
    measured = np.array([1.0, 2.0])
    curves = [
        {
            "measured": measured,
            "pred": {(5, "global"): measured * 1.1, (5, "group"): measured * 1.1, (5, "none"): measured * 2},
        }
    ]
    assert choose_methods(curves, [5], ["none", "group", "global"]) == {5: "global"}


def test_cli_rejects_a_negative_k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    done = CliRunner().invoke(app, ["bench", "accuracy", "--split", "unseen-gpu", "--calibration-rows", "-1"])
    assert (
        done.exit_code == 2 and "error: --calibration-rows must be whole numbers >= 0, got -1" in done.output
    )
    done = CliRunner().invoke(app, ["bench", "accuracy", "--split", "neusight", "--calibration-rows", "25"])
    assert done.exit_code == 2 and "--split unseen-gpu" in done.output


@pytest.mark.slow
def test_calibrate_stores_a_correction_the_predictor_side_applies(tmp_path: Path) -> None:
    """`kernelcast calibrate`'s stage on the committed H100 run, against the training-free roofline."""
    from components.evaluation.calibrate_stage import calibrate_stage
    from components.evaluation.source_rows import features_from_source
    from components.models.calibration import apply_corrections, load_corrections
    from components.models.roofline import RooflinePredictor
    from components.platform.config import load_params
    from kernelcast.settings import PROJECT_ROOT

    params = load_params(PROJECT_ROOT / "params.yaml")
    run = H100_RUN
    result = calibrate_stage(
        "NVIDIA H100 80GB HBM3", run, RooflinePredictor(), tmp_path, params, method="group"
    )
    assert result.device_id == "h100-sxm" and result.n_rows > 500 and result.path.is_file()
    # The roofline is a lower bound: the H100's kernels run slower, the correction says so.
    assert result.median_ape_after < result.median_ape_before
    stored = load_corrections(tmp_path)
    assert list(stored) == ["h100-sxm"] and stored["h100-sxm"].global_log > 0
    table, _ = features_from_source("kernelcast", run, params)
    rows = table.head(20)
    predictions = RooflinePredictor().predict(rows)
    corrected = apply_corrections(rows, predictions, stored)
    ratio = corrected["pred_duration_us"] / predictions["pred_duration_us"]
    assert (ratio > 1).all()
    if "pred_gflops" in predictions.columns:
        np.testing.assert_allclose(corrected["pred_gflops"] * ratio, predictions["pred_gflops"])
    with pytest.raises(ValueError, match="no measured rows of a100-sxm4-80gb"):
        calibrate_stage("A100 SXM4 80GB", run, RooflinePredictor(), tmp_path, params)
    with pytest.raises(ValueError, match="a stored correction is one of"):
        calibrate_stage("H100 SXM", run, RooflinePredictor(), tmp_path, params, method="refit")


def test_calibrate_cli_names_a_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    done = CliRunner().invoke(
        app, ["calibrate", "--device", "H100 SXM", "--from", str(tmp_path / "nope"), "--model", "roofline"]
    )
    assert done.exit_code == 2 and f"error: --from {tmp_path / 'nope'}: not a directory" in done.output
