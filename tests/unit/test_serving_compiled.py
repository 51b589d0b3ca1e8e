"""Compiled trees (C via the system compiler) give exactly what LightGBM's Booster.predict gives."""

from __future__ import annotations

import numpy as np
import pytest

from components.serving.compiled import CompiledTrees, compile_trees, compiler
from components.serving.native import FlatTrees

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler on this machine")


def _booster(objective: str, seed: int, **extra):
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    n = 4000
    x = rng.normal(size=(n, 6))
    x[:, 4] = rng.integers(0, 12, n)  # categorical codes
    x[:, 5] = rng.integers(0, 40, n)
    x[rng.random(x.shape) < 0.08] = np.nan  # NaNs in every column: the missing-value rules matter
    x[rng.random(n) < 0.05, 2] = 0.0  # exact zeros (missing type Zero when zero_as_missing)
    signal = (
        np.nan_to_num(x[:, 0]) * 3 + np.sin(np.nan_to_num(x[:, 1])) + (np.nan_to_num(x[:, 4]) % 3 == 0) * 2
    )
    signal += (np.nan_to_num(x[:, 5]) % 7 == 1) * 1.5 + np.isnan(x[:, 3]) * 0.7
    if objective == "binary":
        y = (signal > np.median(signal)).astype(float)
    elif objective == "multiclass":
        y = np.digitize(signal, np.quantile(signal, [0.33, 0.66])).astype(float)
        extra = {"num_class": 3, **extra}
    else:
        y = signal + rng.normal(scale=0.1, size=n)
    params = {
        "objective": objective,
        "num_leaves": 31,
        "min_data_in_leaf": 5,
        "verbose": -1,
        "seed": seed,
        "cat_smooth": 1,
        "min_data_per_group": 5,
        "max_cat_to_onehot": 4,
        **extra,
    }
    data = lgb.Dataset(x, y, categorical_feature=[4, 5], free_raw_data=False)
    return lgb.train(params, data, num_boost_round=40), x


def _grid(x: np.ndarray, seed: int) -> np.ndarray:
    """A large random grid around the training rows: NaNs, zeros, unseen/negative/huge/fractional
    categories."""
    rng = np.random.default_rng(seed)
    n = 50_000
    grid = rng.normal(scale=2.0, size=(n, x.shape[1]))
    grid[:, 4] = rng.choice([-3.0, -0.5, 0.0, 1.0, 2.7, 5.0, 11.0, 12.0, 63.0, 64.0, 70.0, 1e12], n)
    grid[:, 5] = rng.integers(-2, 80, n).astype(float)
    grid[rng.random(grid.shape) < 0.1] = np.nan
    grid[rng.random(grid.shape) < 0.05] = 0.0
    grid[rng.random(grid.shape) < 0.01] = 1e-36  # inside LightGBM's zero threshold
    return np.vstack([x, grid])


@pytest.mark.parametrize(
    "objective,extra",
    [
        ("regression", {}),
        ("regression", {"zero_as_missing": True}),
        ("binary", {}),
        ("multiclass", {}),
        # small trees: the branch-free (SIMD) form, NaN/zero rules
        # included
        ("regression", {"num_leaves": 4}),
        ("regression", {"num_leaves": 5, "zero_as_missing": True}),
        ("multiclass", {"num_leaves": 3}),
    ],
)
def test_compiled_trees_equal_lightgbm(objective: str, extra: dict, tmp_path) -> None:
    booster, x = _booster(objective, seed=len(objective) + len(extra), **extra)
    flat = FlatTrees.from_dump(booster.dump_model())
    assert flat.categorical.any(), "no categorical split was exercised"
    compiled = compile_trees(flat, tmp_path)
    assert isinstance(compiled, CompiledTrees)
    small = {"num_leaves": 31, **extra}["num_leaves"] <= 5
    if small:  # every tree takes the branch-free form, and categorical splits are among its conditions
        from components.serving.compiled import BRANCHLESS_MAX_SPLITS, _tree_nodes

        assert all(len(_tree_nodes(flat, int(r))) <= BRANCHLESS_MAX_SPLITS for r in flat.roots if r >= 0)
    grid = _grid(x, seed=7)
    raw = booster.predict(grid, raw_score=True)
    got = compiled.raw(grid)
    np.testing.assert_array_equal(got.reshape(raw.shape), raw)  # bit for bit: same decisions, same sum order
    flat.compiled = compiled
    # The link (sigmoid/softmax) is numpy's exp against C++'s std::exp: equal to an ulp or two.
    for rows in (grid, grid[:1]):
        np.testing.assert_allclose(flat.predict(rows), booster.predict(rows), rtol=1e-14, atol=1e-300)


def test_compiled_library_is_cached_by_model_hash(tmp_path) -> None:
    booster, _ = _booster("regression", seed=3)
    flat = FlatTrees.from_dump(booster.dump_model())
    first = compile_trees(flat, tmp_path)
    assert first is not None and first.library.parent == tmp_path
    assert len(list(tmp_path.glob("*.so"))) == 1
    # Another process (no in-memory copy) finds the cached library without compiling.
    from components.serving import compiled as module

    module._LOADED.clear()
    again = compile_trees(flat, tmp_path, build=False)
    assert again is not None and again.library == first.library
    other = FlatTrees.from_dump(_booster("regression", seed=4)[0].dump_model())
    assert compile_trees(other, tmp_path, build=False) is None  # a different model is not in the cache


def test_no_compiler_falls_back_to_numpy_with_a_note(tmp_path, monkeypatch) -> None:
    booster, x = _booster("regression", seed=5)
    flat = FlatTrees.from_dump(booster.dump_model())
    monkeypatch.setenv("CC", "")
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc/gcc/clang to be found
    flat.attach_compiled(tmp_path)
    assert flat.compiled is None and "no C compiler" in (flat.compiled_note or "")
    grid = _grid(x, seed=1)[:5000]
    assert np.allclose(flat.predict(grid), booster.predict(grid), rtol=1e-12, atol=1e-12)


def test_a_load_compiles_in_the_background_and_picks_the_library_up(tmp_path, monkeypatch) -> None:
    import time

    booster, x = _booster("regression", seed=6)
    npz = tmp_path / "model_duration_us.npz"
    FlatTrees.from_dump(booster.dump_model()).save(npz)
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    flat = FlatTrees.load(npz)  # never waits for the compiler
    assert flat.compiled is None and flat._pending is not None and "background" in (flat.compiled_note or "")
    grid = _grid(x, seed=2)[:3000]
    assert np.allclose(
        flat.predict(grid), booster.predict(grid), rtol=1e-12, atol=1e-12
    )  # numpy walk meanwhile
    deadline = time.monotonic() + 300
    marker = flat._pending.with_name(flat._pending.name + ".building")
    while (not flat._pending.is_file() or marker.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    np.testing.assert_array_equal(flat.predict(grid), booster.predict(grid, raw_score=True))
    assert (
        flat.compiled is not None
        and flat.compiled.library.parent == tmp_path / "home" / "cache" / "compiled-trees"
    )
    assert not list(flat.compiled.library.parent.glob("*.building"))


def test_large_batches_are_sorted_for_the_walk_and_answered_in_input_order(tmp_path) -> None:
    from components.serving.compiled import SORT_MIN_ROWS, sort_features

    booster, x = _booster("regression", seed=8)
    flat = FlatTrees.from_dump(booster.dump_model())
    keys = sort_features(flat)
    assert keys[0] in (4, 5) and keys[-1] not in (4, 5)  # categorical features first, then a numeric one
    compiled = compile_trees(flat, tmp_path)
    grid = _grid(x, seed=9)
    assert len(grid) >= SORT_MIN_ROWS
    raw = booster.predict(grid, raw_score=True)
    np.testing.assert_array_equal(compiled.raw(grid)[:, 0], raw)
    # Row by row (never sorted) gives the same numbers: the order only changes speed.
    np.testing.assert_array_equal(
        np.concatenate([compiled.raw(grid[i : i + 100])[:, 0] for i in range(0, 3000, 100)]), raw[:3000]
    )


def test_walk_order_of_category_codes_groups_rows_and_changes_no_answer(tmp_path) -> None:
    from components.serving.compiled import walk_order

    booster, x = _booster("regression", seed=10)
    flat = FlatTrees.from_dump(booster.dump_model())
    compiled = compile_trees(flat, tmp_path)
    grid = _grid(x, seed=12)
    grid[:, 4] = np.random.default_rng(1).integers(-1, 12, len(grid))  # codes as a design matrix holds them
    grid[:, 5] = np.random.default_rng(2).integers(0, 40, len(grid))
    keys = (4, 5, 0)
    order = walk_order(grid, keys)
    assert order is not None and np.array_equal(np.sort(order), np.arange(len(grid)))
    walked = grid[order]
    pairs = walked[:, 4] * 100 + walked[:, 5]
    assert (np.diff(pairs) >= 0).all()  # grouped by the categorical codes, primary first
    within = walked[pairs == pairs[len(pairs) // 2], 0]
    # then by the numeric key (to the float key's resolution: 0.0 and 1e-36 may swap), NaN last
    finite = np.isfinite(within).sum()
    assert (np.diff(within[:finite]) >= -1e-6).all() and np.isnan(within[finite:]).all()
    np.testing.assert_array_equal(compiled.raw(grid, order)[:, 0], booster.predict(grid, raw_score=True))
