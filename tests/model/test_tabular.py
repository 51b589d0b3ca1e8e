"""The tabular predictor on a real excerpt: our own H100 measurements in ``profiled-data/``.

662 rows (GEMM/BMM/elementwise/softmax/layernorm in fp32/fp16/bf16, CUDA-event and Nsight
Compute), split by kernel so every test kernel is unseen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.common.metrics import interval_coverage, mape
from components.evaluation.splits import make_split
from components.models.roofline import RooflinePredictor
from components.models.tabular import TabularPredictor, select_feature_columns, subsample_rows
from components.models.tabular_config import TabularConfig
from kernelcast.settings import PROJECT_ROOT
from tests.conftest import H100_RUN

SMALL = dict(n_estimators=150, num_leaves=15, min_child_samples=10)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.ingest.profiled import ingest
    from components.ingest.schema import with_measurement_ids

    catalog = load_catalog()
    output = ingest(H100_RUN, catalog)
    measurements = output.measurements
    if measurements["measurement_id"].isna().any():  # older profiled adapter left the ids empty
        measurements = with_measurement_ids(measurements)
    return build_feature_table(measurements, output.kernels, catalog)


@pytest.fixture(scope="module")
def sides(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    fold = make_split(table, "unseen-kernel")[0]
    return table.loc[fold.train], table.loc[fold.test]


@pytest.fixture(scope="module")
def fitted(sides: tuple[pd.DataFrame, pd.DataFrame]) -> TabularPredictor:
    return TabularPredictor(TabularConfig(**SMALL)).fit(sides[0])


def test_beats_the_roofline_on_unseen_kernels(fitted: TabularPredictor, sides) -> None:
    _, test = sides
    ours = fitted.predict(test)["pred_duration_us"]
    baseline = RooflinePredictor(use_measured_counters=False).predict(test)["pred_duration_us"]
    both = baseline.notna() & ours.notna()
    assert both.sum() > 50
    ours_mape = mape(test.loc[both, "duration_us"], ours[both])
    roofline_mape = mape(test.loc[both, "duration_us"], baseline[both])
    assert ours_mape < 0.75 * roofline_mape, (ours_mape, roofline_mape)


def test_targets_and_ranges(fitted: TabularPredictor, sides) -> None:
    predictions = fitted.predict(sides[1])
    assert {"duration_us", "achieved_gbps", "l2_hit_rate"} <= set(fitted.targets)
    for rate in ("l1_hit_rate", "l2_hit_rate"):
        if f"pred_{rate}" in predictions:
            assert predictions[f"pred_{rate}"].between(0, 1).all()
    assert (predictions["pred_duration_us"] > 0).all()
    assert (predictions["pred_duration_us_lo"] <= predictions["pred_duration_us"]).all()
    assert (predictions["pred_duration_us"] <= predictions["pred_duration_us_hi"]).all()


def test_never_uses_identity_columns(fitted: TabularPredictor, sides) -> None:
    """Device and kernel ids are not inputs: renaming them changes nothing (unseen GPUs work)."""
    assert not any(c in fitted.feature_columns for c in ("device_id", "kernel_id", "measurement_id"))
    assert all(c.startswith(("f_", "dev_", "s_", "t_")) for c in fitted.feature_columns)
    test = sides[1]
    renamed = test.assign(device_id="some-new-gpu", kernel_id="k-unknown")
    pd.testing.assert_frame_equal(fitted.predict(test), fitted.predict(renamed))


def test_measured_counters_only_when_allowed(sides) -> None:
    assert not any(c.startswith("m_") for c in select_feature_columns(sides[0], use_measured=False))


def test_conformal_coverage_near_nominal(fitted: TabularPredictor, sides) -> None:
    _, test = sides
    predictions = fitted.predict(test)
    coverage = interval_coverage(
        test["duration_us"], predictions["pred_duration_us_lo"], predictions["pred_duration_us_hi"]
    )
    assert fitted.conformal["n_cal"] >= 50
    # Nominal 90%; ~130 unseen kernels give a binomial s.d. of ~2.6 points.
    assert 0.80 <= coverage <= 0.99, coverage


@pytest.mark.parametrize("model", ["lgbm", "mlp"])
def test_save_load_gives_identical_predictions(tmp_path: Path, sides, model: str) -> None:
    from components.models import load_predictor, register_loader

    train, test = sides
    config = TabularConfig(model=model, mlp_hidden=(32,), mlp_max_iter=40, **SMALL)
    predictor = TabularPredictor(config).fit(train)
    predictor.save(tmp_path / "p")
    register_loader("tabular", "components.models.tabular:TabularPredictor")
    restored = load_predictor(tmp_path / "p")
    assert isinstance(restored, TabularPredictor)
    assert restored.trained_on == predictor.trained_on and len(restored.trained_on) == len(train)
    assert restored.feature_columns == predictor.feature_columns
    pd.testing.assert_frame_equal(restored.predict(test), predictor.predict(test))


def test_classifier_learns_a_label(sides) -> None:
    """The roofline-class path, on the analytical bound as label (the excerpt has no measured class)."""
    train, test = sides
    config = TabularConfig(class_label="f_bound", **SMALL)
    predictor = TabularPredictor(config).fit(train.assign(duration_us=np.nan))
    # Without a runtime the transfer model derives no rates (they follow from the runtime).
    assert predictor.targets == ("l1_hit_rate", "l2_hit_rate", "roofline_class")
    predicted = predictor.predict(test)["pred_roofline_class"]
    assert (predicted == test["f_bound"].astype("string")).mean() > 0.9


def test_subsample_is_deterministic_and_order_free(table: pd.DataFrame) -> None:
    first = subsample_rows(table, 100)
    shuffled = subsample_rows(table.sample(frac=1.0, random_state=3), 100)
    assert len(first) == 100
    assert set(first["measurement_id"]) == set(shuffled["measurement_id"])


def test_bad_model_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="lgbm"):
        TabularConfig(model="xgb")


def test_from_params_refuses_an_unknown_train_tabular_key() -> None:
    with pytest.raises(
        ValueError, match=r"params.yaml train.tabular: unknown key 'n_estimator' \(known: .*n_estimators"
    ):
        TabularConfig.from_params({"train": {"tabular": {"model": "lgbm", "n_estimator": 3}}})
    with pytest.raises(ValueError, match=r"train\.tabular: must be a mapping, got list"):
        TabularConfig.from_params({"train": {"tabular": [1, 2]}})


def test_from_params_merges_train_with_tabular_and_skips_other_readers_keys() -> None:
    import yaml

    params = {
        "train": {
            "seed": 3,
            "families": ["tabular"],
            "bench_max_train_rows": 10,
            "bench_min_gpu_rows": 5,
            "tabular": {"n_estimators": 7, "seed": 4},
        }
    }
    config = TabularConfig.from_params(params, max_train_rows=99, model=None)
    assert (config.seed, config.n_estimators, config.max_train_rows, config.model) == (4, 7, 99, "lgbm")
    assert (
        TabularConfig.from_params({"train": {"seed": 5}}).seed == 5
    )  # train: alone still reaches the config
    project = TabularConfig.from_params(yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text()))
    assert project.n_estimators == 400 and project.seed == 17


def test_out_of_scope_families_are_not_trained_on_nor_guessed(fitted: TabularPredictor, sides) -> None:
    _, test = sides
    relabelled = test.head(20).copy()
    relabelled.loc[relabelled.index[:5], "family"] = "collective"
    relabelled.loc[relabelled.index[5:10], "family"] = "program"
    predictions = fitted.predict(relabelled)
    assert predictions.loc[relabelled.index[:10], "pred_duration_us"].isna().all()
    assert predictions.loc[relabelled.index[10:], "pred_duration_us"].notna().all()
    assert not fitted.trained_on & set(relabelled.loc[relabelled.index[:10], "measurement_id"])
