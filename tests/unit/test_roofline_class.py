"""Roofline class from source on a tiny real subset of gpuFLOPBench (ingested by its real adapter):
features from kernel text, launch, arguments and signature; train-side CV selection; persistence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.common.metrics import balanced_accuracy
from components.models import roofline_class as rc
from components.models import roofline_class_features as rcf

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


@pytest.fixture(scope="module")
def kernels() -> pd.DataFrame:
    """One labelled row per kernel (first HEAD launch), canonical columns joined, ~50 programs."""
    root = DATASETS / "gpuflopbench"
    if not root.is_dir():
        pytest.skip(f"dataset not present: {root}")
    from components.devices import device_feature_vector, load_catalog
    from components.ingest.gpuflopbench import ingest

    catalog = load_catalog()
    out = ingest(root, catalog)
    m = out.measurements
    m = m[~m["upstream_file"].str.contains("_history/") & m["roofline_class_published"].notna()]
    m = m.sort_values(["kernel_id", "upstream_row"]).drop_duplicates("kernel_id")
    rows = m.merge(
        out.kernels[["kernel_id", "op", "language", "program", "source_text", "family"]], on="kernel_id"
    )
    programs = sorted(rows["program"].unique())
    chosen = set(programs[::12])  # a fixed ~8% of the programs, both languages
    rows = rows[rows["program"].isin(chosen)].reset_index(drop=True)
    device = device_feature_vector(catalog.resolve("rtx-3080"))
    return rows.assign(**device)


def test_kernel_text_finds_cuda_kernels_and_openmp_regions(kernels: pd.DataFrame) -> None:
    found = [rcf.kernel_text(r.source_text, r.language, r.op) for r in kernels.itertuples()]
    share = pd.Series([t is not None for t in found]).groupby(kernels["language"].to_numpy()).mean()
    assert share["cuda"] > 0.7 and share["openmp"] > 0.7
    omp = next(t for t, lang in zip(found, kernels["language"], strict=True) if lang == "openmp" and t)
    assert "for" in omp  # the offloaded loop follows the pragma at the symbol's line


def test_features_are_source_launch_and_device_only(kernels: pd.DataFrame) -> None:
    frame = rcf.class_feature_frame(kernels)
    assert len(frame) == len(kernels) and frame["l_threads"].notna().all()
    assert frame["t_chars"].notna().mean() > 0.7
    measured = {"duration_us", "dram_bytes", "flops", "arith_intensity", "achieved_gbps", "gflops"}
    assert not measured & set(frame.columns)  # no profiled quantity leaks into the inputs


def test_fit_selects_on_train_side_and_round_trips(kernels: pd.DataFrame, tmp_path: Path) -> None:
    programs = sorted(kernels["program"].unique())
    held = set(programs[::4])
    train = kernels[~kernels["program"].isin(held)]
    test = kernels[kernels["program"].isin(held)]
    model = rc.fit_class_model(train, "roofline_class_published")
    assert len(model.cv["candidates"]) == len(rc.CANDIDATES)
    assert "TRAIN side only" in model.cv["protocol"]
    texts, progs = rc.kernel_texts(train)
    fitted = model.predict(rcf.class_feature_frame(train), texts, progs)
    y = train["roofline_class_published"].astype(str).to_numpy()
    assert balanced_accuracy((y == "compute").astype(int), (fitted.to_numpy() == "compute").astype(int)) > 0.6
    model.save(tmp_path / "m")
    again = rc.RooflineClassModel.load(tmp_path / "m")
    t_texts, t_progs = rc.kernel_texts(test)
    features = rcf.class_feature_frame(test)
    np.testing.assert_allclose(
        model.proba(features, t_texts, t_progs), again.proba(features, t_texts, t_progs)
    )
    assert set(again.predict(features, t_texts, t_progs)) <= {"bandwidth", "compute"}


def test_tabular_hook_answers_program_rows_only(kernels: pd.DataFrame) -> None:
    mixed = pd.concat(
        [
            kernels.assign(measurement_id=kernels["kernel_id"]),
            pd.DataFrame({"family": ["gemm"], "source": ["neusight"], "measurement_id": ["x"]}),
        ],
        ignore_index=True,
    )
    model = rc.fit_for_tabular(mixed, "roofline_class_published")
    assert model is not None
    predicted = rc.predict_for_tabular(model, mixed)
    assert len(predicted) == len(kernels) and mixed.index[-1] not in predicted.index
    assert (
        rc.fit_for_tabular(mixed.head(5), "roofline_class_published") is None
    )  # too few: no model, no guess


def test_numpy_tfidf_matches_scikit_learn_on_kernel_sources(kernels: pd.DataFrame) -> None:
    from components.models.roofline_class_native import NumpyTfidf

    texts, _ = rc.kernel_texts(kernels)
    train, queries = texts[::2], [*texts[1::2], "", "__global__ void k(double* x) { x[0] = 1; }"]
    vectorizer = rc._vectorizer().fit(train)
    native = NumpyTfidf.from_vectorizer(vectorizer, train)
    expected = (vectorizer.transform(queries) @ vectorizer.transform(train).T).toarray()
    got = native.similarities(queries)
    assert got.shape == expected.shape and np.abs(expected).max() > 0.5
    np.testing.assert_array_equal(got, expected)  # the same bits, not only close
    for query in queries[:20]:
        row = vectorizer.transform([query])
        columns, values = native.transform_one(query)
        np.testing.assert_array_equal(columns, row.indices)
        np.testing.assert_allclose(values, row.data, rtol=0, atol=1e-12)


def test_saved_numpy_parts_answer_as_the_fitted_model_and_old_folders_still_load(
    kernels: pd.DataFrame, tmp_path: Path
) -> None:
    from components.models import roofline_class_native as native

    texts, progs = rc.kernel_texts(kernels)
    features = rcf.class_feature_frame(kernels)
    model = rc.RooflineClassModel(params=rc.ClassParams("lgbm", knn=True)).fit(
        features, kernels["roofline_class_published"], texts, progs
    )
    model.save(tmp_path / "m")
    assert (tmp_path / "m" / native.TFIDF_FILE).is_file() and (tmp_path / "m" / native.TREES_FILE).is_file()
    again = rc.RooflineClassModel.load(tmp_path / "m")
    assert again._native_dir == tmp_path / "m"
    questions = [f"<q{i}>" for i in range(len(texts))]  # never the same program: every kernel a neighbour
    reference = model.proba(features, texts, questions)
    np.testing.assert_allclose(again.proba(features, texts, questions), reference, rtol=0, atol=1e-12)
    assert again._vectorizer is None and again.booster is None  # no refit, no LightGBM booster built
    for name in (native.TFIDF_FILE, native.TREES_FILE):  # a folder saved before the numpy parts existed
        (tmp_path / "m" / name).unlink()
    old = rc.RooflineClassModel.load(tmp_path / "m")
    assert old._native_dir is None
    np.testing.assert_allclose(old.proba(features, texts, questions), reference, rtol=0, atol=1e-12)
    assert native.save_native(old, tmp_path / "m") and native.native_complete(old, tmp_path / "m")


def test_feature_rows_without_pandas_are_the_frame_and_answer_alike(kernels: pd.DataFrame) -> None:
    frame = rcf.class_feature_frame(kernels)
    rows = rcf.class_feature_rows(kernels.to_dict("records"))
    again = pd.DataFrame(rows, index=kernels.index, dtype="float64").reindex(columns=frame.columns)
    pd.testing.assert_frame_equal(frame, again)
    texts, progs = rc.kernel_texts(kernels)
    model = rc.RooflineClassModel(params=rc.ClassParams("logreg", knn=True)).fit(
        frame, kernels["roofline_class_published"], texts, progs
    )
    np.testing.assert_array_equal(model.proba(rows, texts, progs), model.proba(frame, texts, progs))


def test_registry_copy_of_an_old_folder_gets_the_numpy_parts(kernels: pd.DataFrame, tmp_path: Path) -> None:
    import json

    from components.models import roofline_class_native as native
    from components.serving.native import flatten_folder

    texts, progs = rc.kernel_texts(kernels)
    model = rc.RooflineClassModel(params=rc.ClassParams("lgbm", knn=True)).fit(
        rcf.class_feature_frame(kernels), kernels["roofline_class_published"], texts, progs
    )
    folder = tmp_path / "predictor"
    model.save(folder / "roofline_class")
    for name in (native.TFIDF_FILE, native.TREES_FILE):  # as saved before this change
        (folder / "roofline_class" / name).unlink()
    # a tabular predictor whose trees are not LightGBM's: only the class model's parts are written
    (folder / "predictor.json").write_text(json.dumps({"family": "tabular", "config": {"model": "ridge"}}))
    written = flatten_folder(folder)
    assert {p.name for p in written} == {native.TFIDF_FILE, native.TREES_FILE}
    assert rc.RooflineClassModel.load(folder / "roofline_class")._native_dir == folder / "roofline_class"
    assert flatten_folder(folder) == []  # complete: nothing rewritten
