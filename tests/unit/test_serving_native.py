"""Flat numpy trees give what LightGBM gives, on a real model trained on our own H100 measurements."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.models.tabular import TabularPredictor
from components.serving.native import FlatTrees, flatten_folder, load_flat_predictor


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    from tests.integration.registered import profiled_feature_table, train_small_tabular

    table = profiled_feature_table()
    folder = tmp_path_factory.mktemp("model") / "tabular"
    # Small but real: family and dtype enter as categorical features, so categorical splits occur.
    train_small_tabular(folder, table=table)
    return folder, table


def test_flat_trees_equal_lightgbm(trained, tmp_path: Path) -> None:
    import lightgbm as lgb

    folder, table = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    written = flatten_folder(copy)
    assert written and all(p.suffix == ".npz" for p in written)
    reference = TabularPredictor.load(folder)
    flat = load_flat_predictor(copy)
    assert flat is not None and all(isinstance(m, FlatTrees) for m in flat.models.values())
    x = reference.design_matrix(table)
    # NaNs and unseen category codes (-1) on purpose: the missing-value rules must match too.
    noisy = x.copy()
    rng = np.random.default_rng(0)
    noisy[rng.random(noisy.shape) < 0.1] = np.nan
    noisy[:, -1] = np.where(rng.random(len(noisy)) < 0.2, -1, noisy[:, -1])
    for target, booster in reference.models.items():
        assert isinstance(booster, lgb.Booster)
        for matrix in (x, noisy):
            expected = booster.predict(matrix)
            got = (
                flat.models[target].raw(matrix)[:, 0]
                if flat.models[target].n_classes == 1
                else flat.models[target].predict(matrix)
            )
            assert np.allclose(got, expected, rtol=1e-12, atol=1e-12), target
    assert any(flat.models[t].categorical.any() for t in flat.models), "no categorical split was exercised"
    pd.testing.assert_frame_equal(flat.predict(table), reference.predict(table))


def test_a_folder_without_flat_files_is_not_taken_for_flat(trained) -> None:
    folder, _ = trained
    assert load_flat_predictor(folder) is None  # the ordinary loader then reads it with LightGBM


@pytest.mark.parametrize("flat_trees", [False, True])
def test_predict_on_arrays_equals_predict_on_the_frame(trained, tmp_path: Path, flat_trees: bool) -> None:
    """The server's call (``predict_columns`` on the question arrays: categoricals, object labels) ==
    evaluation's (``predict`` on the same rows as a feature DataFrame), column by column."""
    from components.devices import load_catalog
    from components.serving.bench import random_op_batch
    from components.serving.featurise import op_feature_columns, table_of

    folder, _ = trained
    if flat_trees:
        shutil.copytree(folder, tmp_path / "copy")
        flatten_folder(tmp_path / "copy")
        predictor = load_flat_predictor(tmp_path / "copy")
    else:
        predictor = TabularPredictor.load(folder)
    specs = load_catalog().all()
    batch = random_op_batch(600, specs, seed=3)
    # family/op stay categoricals (the bulk form), dtype becomes an object array of str (the server's form)
    batch["dtype"] = np.asarray(batch["dtype"], dtype=object)
    batch["dtype"][:40] = "fp8"  # emulation notes on GPUs without fp8
    cols = op_feature_columns(
        batch["family"], batch["op"], batch["dtype"], batch["dims"], batch["device_index"], specs
    )
    fast = predictor.predict_columns(cols)
    reference = predictor.predict(table_of(cols))
    assert set(fast) == set(reference.columns)
    for column in reference.columns:
        expected = reference[column].to_numpy(dtype=object)
        got = fast[column]
        if column == "pred_note":
            assert [None if pd.isna(e) else e for e in expected] == list(got)
        else:
            assert np.allclose(
                np.asarray(got, dtype="float64"),
                np.asarray(expected, dtype="float64"),
                rtol=1e-12,
                equal_nan=True,
            ), column


def test_categorical_labels_featurise_exactly_as_strings() -> None:
    """The bulk form (labels as pd.Categorical codes) and the server's (object arrays of str) give the same
    feature columns, bit for bit, including families none of the formulas covers."""
    from components.devices import load_catalog
    from components.serving.bench import random_op_batch
    from components.serving.featurise import op_feature_columns

    specs = load_catalog().all()
    batch = random_op_batch(3000, specs, seed=11)
    as_str = {k: np.asarray(batch[k], dtype=object) for k in ("family", "op", "dtype")}
    as_str["family"][:50] = "collective"  # no formula: NaN features, a note code
    categorical = {k: pd.Categorical(v) for k, v in as_str.items()}
    got = op_feature_columns(
        categorical["family"],
        categorical["op"],
        categorical["dtype"],
        batch["dims"],
        batch["device_index"],
        specs,
    )
    expected = op_feature_columns(
        as_str["family"], as_str["op"], as_str["dtype"], batch["dims"], batch["device_index"], specs
    )
    assert set(got) == set(expected)
    for name, values in expected.items():
        if np.asarray(values).dtype.kind == "f":
            np.testing.assert_array_equal(np.asarray(got[name]), values, err_msg=name)
        else:
            assert list(np.asarray(got[name], dtype=object)) == list(np.asarray(values, dtype=object)), name
    assert all(str(note).startswith("collective:") for note in got["_feature_note"][:50])


def test_the_server_answers_through_the_training_path(trained, monkeypatch: pytest.MonkeyPatch) -> None:
    """An op question the champion answers (an fp32 GEMM) goes through the predictor's own
    ``predict_columns`` (what ``predict``, hence evaluation, runs), not a copy of it: one call, and the
    answer's runtime is that call's."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    folder, _ = trained
    predictor = TabularPredictor.load(folder)
    calls: list[dict] = []
    own = TabularPredictor.predict_columns

    def spy(self, features):
        out = own(self, features)
        calls.append(out)
        return out

    monkeypatch.setattr(TabularPredictor, "predict_columns", spy)
    question = {"op": "gemm", "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "fp32", "device": "H100"}
    answers = answer_questions(predictor, parse_questions([question]), model_version="test")
    assert len(calls) == 1
    assert answers[0]["duration_us"] == pytest.approx(float(calls[0]["pred_duration_us"][0]), rel=1e-12)


def test_the_flat_load_names_what_the_folder_carries_as_the_ordinary_load_does(
    trained, tmp_path: Path
) -> None:
    """A registered champion's op engine, runtime corrections and deployment constants
    (``components.registry.carried``) reach the server's flat load too, not only ``load_predictor``."""
    from components.models import load_predictor
    from components.models.calibration import Correction, correction_path
    from components.opmodel.engine import OpEngine
    from components.registry.carried import carry_components

    folder, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    OpEngine().save(copy / "opmodel")
    Correction("global", "h100-sxm", 10, global_log=0.1).save(correction_path(tmp_path / "home", "h100-sxm"))
    carry_components(copy, tmp_path / "home")
    flatten_folder(copy)
    flat, ordinary = load_flat_predictor(copy), load_predictor(copy)
    assert flat is not None
    expected = {
        "opmodel_dir": copy / "opmodel",
        "deployment_constants": copy / "deployments" / "constants.json",
        "corrections_home": copy,
    }
    for attribute, path in expected.items():
        assert getattr(flat, attribute) == getattr(ordinary, attribute) == path, attribute
