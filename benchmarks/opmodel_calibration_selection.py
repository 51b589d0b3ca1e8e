"""Nested leave-one-GPU-out selection of the op engine's calibration settings (``components/opmodel/
calibrated.py``: shrinkage, the per-GPU ridge, the local correction's reach), per number of rows K.

The held-out GPU of an outer fold is a test side: for each outer GPU, every candidate is scored by
calibrating each *other* measured GPU (the spec tier fitted without the outer and that inner GPU) with K of
its rows and scoring the rest; the candidate with the lowest mean inner per-GPU MAPE calibrates the outer
GPU's spec tier (fitted without it) and is scored once there. Prints, per K and outer GPU, the inner choice
and the outer MAPE; the median over outer GPUs is the nested estimate of the calibration figure. The most
chosen candidate per K is what ``calibrated.CHOSEN_SETTINGS`` holds.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/opmodel_calibration_selection.py \\
        --store ~/.kernelcast/data/opmodel/store --datasets ../shared/datasets
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

CANDIDATES: tuple[dict[str, Any], ...] = tuple(
    {"shrink": shrink, "ridge": ridge, "local_scale": scale}
    for shrink, ridge, scale in itertools.product((2.0, 8.0, 32.0), (True, False), (0.0, 1.5, 3.0))
)
KS: tuple[int, ...] = (100, 400)


def _name(candidate: dict[str, Any]) -> str:
    shrink, ridge, scale = candidate["shrink"], int(candidate["ridge"]), candidate["local_scale"]
    return f"shrink={shrink:g},ridge={ridge},local={scale:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--datasets", type=Path, default=None)
    parser.add_argument("--train-per-group", type=int, default=1000)
    parser.add_argument("--test-per-group", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from components.devices.catalog import load_catalog
    from components.evaluation.opmodel_bench import _calibration_scores
    from components.opmodel import spec as spec_tier
    from components.opmodel.calibrated import CalibrationSettings
    from components.opmodel.store import load_store

    started = time.perf_counter()
    store = load_store(args.store, spec_tier.SPEC_FAMILIES)
    catalog = load_catalog()
    rows = spec_tier.training_rows(store, args.datasets, per_group=args.train_per_group)
    specs = {
        str(d): catalog.get(str(d)) for f in rows.values() for d in f["device_id"].unique() if d in catalog
    }
    gpus = sorted(
        {
            str(d)
            for f in spec_tier.SPEC_FAMILIES
            if f in store
            for d in store[f]["device_id"].unique()
            if d in catalog
        }
    )
    models: dict[frozenset, Any] = {}
    scored: dict[tuple[frozenset, str, str], dict[int, float]] = {}

    def mape(excluded: frozenset, held: str, candidate: dict[str, Any]) -> dict[int, float]:
        """K -> MAPE of ``held`` calibrated with K rows, the spec tier fitted without ``excluded``."""
        key = (excluded, held, _name(candidate))
        if key not in scored:
            if excluded not in models:
                train = {f: r[~r["device_id"].isin(excluded)] for f, r in rows.items()}
                models[excluded] = spec_tier.fit(train, specs, rounds=args.rounds)
            got = _calibration_scores(
                models[excluded],
                store,
                held,
                specs[held],
                KS,
                args.test_per_group,
                CalibrationSettings(**candidate),
            )
            scored[key] = {r["k"]: r["mape"] for r in got}
        return scored[key]

    report: dict[str, Any] = {"candidates": [_name(c) for c in CANDIDATES], "folds": {}}
    for outer in gpus:
        inner_gpus = [g for g in gpus if g != outer]
        fold = {}
        for k in KS:
            inner = {
                _name(c): statistics.mean(mape(frozenset({outer, h}), h, c)[k] for h in inner_gpus)
                for c in CANDIDATES
            }
            best = min(CANDIDATES, key=lambda c: inner[_name(c)])
            outer_mape = mape(frozenset({outer}), outer, best)[k]
            default = mape(frozenset({outer}), outer, {"shrink": 8.0, "ridge": True, "local_scale": 1.5})[k]
            fold[k] = {
                "chosen": _name(best),
                "inner_mape": inner[_name(best)],
                "outer_mape": outer_mape,
                "outer_default_mape": default,
            }
            print(
                f"K={k:4d} outer {outer:16s} chose {_name(best):32s} inner {inner[_name(best)]:.3f}  "
                f"outer {outer_mape:.3f} (default settings {default:.3f})",
                flush=True,
            )
        report["folds"][outer] = fold
    report["nested"] = {}
    for k in KS:
        chosen = [report["folds"][g][k]["chosen"] for g in gpus]
        report["nested"][k] = {
            "median_gpu_mape": statistics.median(report["folds"][g][k]["outer_mape"] for g in gpus),
            "median_gpu_default_mape": statistics.median(
                report["folds"][g][k]["outer_default_mape"] for g in gpus
            ),
            "chosen_by_vote": max(set(chosen), key=chosen.count),
        }
        print(
            f"nested K={k}: median per-GPU MAPE {report['nested'][k]['median_gpu_mape']:.3f} "
            f"(default settings {report['nested'][k]['median_gpu_default_mape']:.3f}); "
            f"most chosen {report['nested'][k]['chosen_by_vote']}"
        )
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(f"{report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
