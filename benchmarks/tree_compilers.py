"""LightGBM tree compilers against each other on one model of the champion's size, one thread each:
treelite + tl2cgen (C code generation), lleaves (LLVM, with and without inlining) and LightGBM's own
predictor: batched rows/s, single-row latency, compile time, and whether the raw scores equal
``Booster.predict(raw_score=True)``.

It decided the serving tier: the C generator we used to keep (``components/serving/compiled.py``, removed)
was 1.12x lleaves' batched rate and 1.32x its single-row speed on this benchmark -- short of the 2x that
justifies hand-written code -- so bulk predictions now go through lleaves
(``components/serving/tree_compile.py``); ``benchmarks/results/tree_compilers.json`` keeps its last figures.

treelite/tl2cgen are not project dependencies; install them beside the venv to run this, e.g.

    pip install --no-deps --target /tmp/tl treelite==4.8.1 tl2cgen==1.0.0
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD:/tmp/tl .venv/bin/python benchmarks/tree_compilers.py \\
        [--trees 400 --leaves 63 --features 30 --rows 20000] [--out benchmarks/results/tree_compilers.json]

A library missing from the path is reported as such, not timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def synthetic(rows: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features like the champion's: log2 sizes, ratios, a few small integer codes; a smooth target."""
    rng = np.random.default_rng(seed)
    x = np.column_stack(
        [rng.uniform(0, 24, (rows, features // 2)), rng.normal(0, 1, (rows, features - features // 2 - 3))]
    )
    codes = rng.integers(0, 6, (rows, 3)).astype("float64")
    x = np.column_stack([x, codes])
    y = (
        np.sin(x[:, 0] / 3)
        + 0.1 * x[:, 1]
        + 0.5 * codes[:, 0]
        + np.log1p(np.abs(x[:, -4]))
        + rng.normal(0, 0.1, rows)
    )
    return x, y


def train(trees: int, leaves: int, features: int, seed: int) -> Any:
    import lightgbm as lgb

    x, y = synthetic(20_000, features, seed)
    params = {"objective": "regression", "num_leaves": leaves, "min_data_in_leaf": 5, "verbose": -1}
    return lgb.train({**params, "num_threads": 1, "seed": seed}, lgb.Dataset(x, y), num_boost_round=trees)


def rate(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, repeats: int = 3) -> float:
    """Rows per second of one thread, the best of ``repeats`` (the least disturbed by the shared box)."""
    best = np.inf
    for _ in range(repeats):
        start = time.process_time()
        predict(x)
        best = min(best, time.process_time() - start)
    return len(x) / best


def single_row_us(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, calls: int = 2000) -> float:
    """Median microseconds of one call with one row (wall clock: a caller waits for it)."""
    times = []
    for i in range(calls):
        row = x[i % len(x) : i % len(x) + 1]
        start = time.perf_counter()
        predict(row)
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def tl2cgen_lib(booster: Any, work: Path) -> tuple[Callable, float]:
    import tl2cgen
    import treelite

    start = time.perf_counter()
    model = treelite.frontend.from_lightgbm(booster)
    library = work / "tl2cgen.so"
    tl2cgen.export_lib(model, toolchain="gcc", libpath=str(library), params={"parallel_comp": 8}, nthread=1)
    predictor = tl2cgen.Predictor(str(library), nthread=1)
    seconds = time.perf_counter() - start
    return (
        lambda x: np.asarray(predictor.predict(tl2cgen.DMatrix(x), pred_margin=True)).reshape(len(x))
    ), seconds


def treelite_gtil(booster: Any, work: Path) -> tuple[Callable, float]:
    import treelite

    start = time.perf_counter()
    model = treelite.frontend.from_lightgbm(booster)
    seconds = time.perf_counter() - start
    return (
        lambda x: np.asarray(treelite.gtil.predict(model, x, nthread=1, pred_margin=True)).reshape(len(x))
    ), seconds


def lleaves_lib(booster: Any, work: Path, inline: bool = True) -> tuple[Callable, float]:
    """lleaves; ``inline=False`` is its documented switch for a much faster compile (what serving uses)."""
    import lleaves

    text = work / "model.txt"
    booster.save_model(str(text))
    start = time.perf_counter()
    model = lleaves.Model(model_file=str(text))
    model.compile(cache=str(work / f"lleaves-{inline}.o"), raw_score=True, finline=inline)
    seconds = time.perf_counter() - start
    return (lambda x: model.predict(x, n_jobs=1)), seconds


def lightgbm_own(booster: Any, work: Path) -> tuple[Callable, float]:
    return (lambda x: booster.predict(x, raw_score=True, num_threads=1)), 0.0


PATHS = {
    "treelite 4.8.1 + tl2cgen 1.0.0 (generated C)": tl2cgen_lib,
    "treelite 4.8.1 gtil (interpreted)": treelite_gtil,
    "lleaves 1.3.0 (LLVM)": lleaves_lib,
    "lleaves 1.3.0 (LLVM, finline=False)": lambda booster, work: lleaves_lib(booster, work, inline=False),
    "lightgbm Booster.predict": lightgbm_own,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=400)
    parser.add_argument("--leaves", type=int, default=63)
    parser.add_argument("--features", type=int, default=30)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    booster = train(args.trees, args.leaves, args.features, seed=0)
    x, _ = synthetic(args.rows, args.features, seed=1)
    truth = booster.predict(x, raw_score=True, num_threads=1)
    results: dict[str, Any] = {"model": vars(args) | {"out": None}, "paths": {}}
    work = Path(tempfile.mkdtemp())
    for name, build in PATHS.items():
        try:
            predict, compile_s = build(booster, work)
        except ImportError as exc:
            results["paths"][name] = {"missing": str(exc)}
            print(f"{name}: not installed ({exc})")
            continue
        got = predict(x)
        entry = {
            "compile_s": round(compile_s, 1),
            "rows_per_s": round(rate(predict, x)),
            "single_row_us": round(single_row_us(predict, x), 1),
            "max_abs_diff_vs_lightgbm": float(np.max(np.abs(got - truth))),
            "bit_identical": bool(np.array_equal(got, truth)),
        }
        results["paths"][name] = entry
        print(f"{name}: {entry}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
