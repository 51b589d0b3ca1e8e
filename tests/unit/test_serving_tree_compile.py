"""Bulk batches of flat trees go to lleaves' compiled copy (or LightGBM until it is there) and answer what
LightGBM answers; the compile is cached per model text."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from components.serving import tree_compile
from components.serving.native import BULK_ROWS, FlatTrees


def _model(tmp_path: Path, objective: str, extra: dict) -> tuple[Path, np.ndarray]:
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 6))
    x[:, 5] = rng.integers(0, 5, len(x))  # a categorical feature: bitset splits
    y = {
        "regression": x[:, 0] + np.sin(x[:, 1]) + x[:, 5],
        "binary": (x[:, 0] + x[:, 5] > 2).astype(float),
        "multiclass": (x[:, 5] % 3).astype(float),
    }[objective]
    params = {"objective": objective, "num_leaves": 15, "verbose": -1, "num_threads": 1, **extra}
    booster = lgb.train(params, lgb.Dataset(x, y, categorical_feature=[5]), num_boost_round=20)
    text = tmp_path / f"model_{objective}.txt"
    booster.save_model(str(text))
    FlatTrees.from_dump(booster.dump_model()).save(text.with_suffix(".npz"))
    rows = rng.normal(size=(BULK_ROWS + 100, 6))
    rows[:, 5] = rng.integers(-1, 7, len(rows))
    rows[rng.random(rows.shape) < 0.05] = np.nan  # missing values take LightGBM's default sides
    return text, rows


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))  # a cache folder of this test's own
    return tmp_path


@pytest.mark.parametrize(
    ("objective", "extra"),
    [("regression", {}), ("binary", {}), ("multiclass", {"num_class": 3})],
)
def test_compiled_trees_answer_as_lightgbm(
    state: Path, objective: str, extra: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightgbm as lgb

    text, rows = _model(state, objective, extra)
    flat = FlatTrees.load(text.with_suffix(".npz"))
    expected = lgb.Booster(model_file=str(text)).predict(rows)
    small = rows[:5]  # a few rows, nothing compiled: the numpy walk
    assert np.allclose(flat.predict(small), expected[:5], rtol=1e-12, atol=1e-12)
    assert flat.engine() == "LightGBM"  # what bulk batches get before the compile
    assert tree_compile.compile_now(text) == tree_compile.cache_file(text)
    assert flat.engine() == "lleaves"
    got = flat.predict(rows)
    assert got.shape == expected.shape
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
    # Loaded (as a server does): small batches run compiled too, the numpy walk is not called.
    monkeypatch.setattr(flat, "raw", None)
    assert np.allclose(flat.predict(small), expected[:5], rtol=1e-12, atol=1e-12)


def test_the_compile_is_cached_per_model_text(state: Path) -> None:
    text, _ = _model(state, "regression", {})
    cached = tree_compile.compile_now(text)
    assert cached is not None and cached.is_file()
    stamp = cached.stat().st_mtime_ns
    assert tree_compile.compile_now(text) == cached and cached.stat().st_mtime_ns == stamp
    other = state / "other.txt"
    other.write_text(text.read_text().replace("num_leaves=15", "num_leaves=15 "))
    assert tree_compile.cache_file(other) != cached  # another text, another cache file


def test_a_background_compile_is_picked_up(state: Path) -> None:
    from components.models.tabular import TabularPredictor
    from components.serving.native import load_compiled

    text, rows = _model(state, "regression", {})
    flat = FlatTrees.load(text.with_suffix(".npz"))
    predictor = TabularPredictor(models={"duration_us": flat})
    assert tree_compile.start_background_compile(text)
    assert not tree_compile.start_background_compile(text)  # one compile per model at a time
    deadline = time.time() + 120
    while not load_compiled(predictor) and time.time() < deadline:  # what the server's poll does
        time.sleep(0.5)
    assert flat.engine() == "lleaves" and flat._compiled is not None
    assert np.isfinite(flat.predict(rows)).all()


def test_without_lleaves_bulk_batches_go_to_lightgbm(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lightgbm as lgb

    text, rows = _model(state, "regression", {})
    monkeypatch.setattr(tree_compile, "_version", lambda: None)  # as if lleaves were not installed
    flat = FlatTrees.load(text.with_suffix(".npz"))
    assert tree_compile.compile_now(text) is None and flat.engine() == "LightGBM"
    assert np.array_equal(flat.predict(rows), lgb.Booster(model_file=str(text)).predict(rows))


def test_an_unreadable_cache_file_falls_back_to_lightgbm_and_says_why(state: Path) -> None:
    """LLVM aborts the process on a file that is not an object file: it must be refused before loading."""
    import lightgbm as lgb

    text, rows = _model(state, "regression", {})
    cached = tree_compile.cache_file(text)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"not an object file")
    flat = FlatTrees.load(text.with_suffix(".npz"))
    assert flat.engine().startswith("LightGBM (lleaves failed: ValueError")
    assert np.array_equal(flat.predict(rows), lgb.Booster(model_file=str(text)).predict(rows))
