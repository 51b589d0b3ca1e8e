"""Nested leave-one-GPU-out selection of the spec tier's configuration (``components/opmodel/spec.py``).

The held-out GPU of an outer fold is a test side: nothing about it chooses anything. For each outer fold
(one of the store's measured GPUs held out of every source), every candidate ``SpecConfig`` is scored by an
inner leave-one-GPU-out over the *remaining* GPUs only (fit on all but the outer and the inner GPU, plus
PipeWeave's FP8 train file; score the inner GPU), per family; the candidate with the lowest inner MAPE (rows
pooled over the inner folds, as the gate pools them) is refitted on the outer fold's training GPUs and
scored once on the held-out GPU. Prints, per family and outer fold, the inner-chosen candidate, its inner
MAPE and the outer MAPE beside the roofline's; the pooled outer figure is the nested estimate of the spec
tier's unseen-GPU error. The candidate that wins most outer folds' inner selections (ties: the lower mean
inner MAPE) is what ``spec.CHOSEN`` holds.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/spec_tier_selection.py \\
        --store ~/.kernelcast/data/opmodel/store --datasets ../shared/datasets   # ~5 min on 2 cores
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

# The candidates, each a physics argument (see SpecConfig): the original tier; a per-kernel latency floor
# added to the base time (half or all of it); a working-set-over-L2 feature; the GPU-naming features
# dropped; the learned efficiency hedged toward the base; with the floor, the efficiency made monotone in
# the roofline time.
CANDIDATES: tuple[dict[str, Any], ...] = tuple(
    {"floor": floor, "identity": identity, "l2": l2, "hedge": hedge, "monotone": monotone}
    for floor, monotone, identity, l2, hedge in itertools.product(
        (0.0, 1.0), (False, True), (True, False), (False, True), (1.0, 0.7)
    )
    if floor > 0 or not monotone
)  # monotone in the roofline time is physics only with the floor in the base


def _name(candidate: dict[str, Any]) -> str:
    return (
        f"floor={candidate['floor']:g},identity={int(candidate['identity'])},l2={int(candidate['l2'])},"
        f"hedge={candidate['hedge']:g},monotone={int(candidate['monotone'])}"
    )


def _pooled(groups: list[dict[str, Any]], family: str, key: str = "sum_ape") -> float:
    part = [g for g in groups if g["family"] == family]
    n = sum(g["n"] for g in part)
    return sum(g[key] for g in part) / n if n else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--datasets", type=Path, default=None)
    parser.add_argument("--train-per-group", type=int, default=1000)
    parser.add_argument("--test-per-group", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None, help="write the selection as JSON here too")
    args = parser.parse_args()

    from components.devices.catalog import load_catalog
    from components.evaluation.opmodel_bench import score_held_gpu
    from components.opmodel import spec as spec_tier
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
    cache: dict[tuple[frozenset, str], list[dict[str, Any]]] = {}

    def scores(excluded: frozenset, candidate: dict[str, Any], held: str) -> list[dict[str, Any]]:
        """Groups of ``held`` scored by the candidate fitted without the ``excluded`` GPUs (cached: the fit
        without {A, B} serves inner fold B of outer A and inner fold A of outer B)."""
        key = (excluded, _name(candidate))
        if key not in cache:
            train = {f: r[~r["device_id"].isin(excluded)] for f, r in rows.items()}
            config = spec_tier.SpecConfig(**candidate)
            model = spec_tier.fit(
                train, specs, rounds=args.rounds, configs={f: config for f in spec_tier.SPEC_FAMILIES}
            )
            cache[key] = [
                g
                for gpu in excluded
                for g in score_held_gpu(model, store, gpu, specs[gpu], args.test_per_group)
            ]
        return [g for g in cache[key] if g["device"] == held]

    report: dict[str, Any] = {"candidates": [_name(c) for c in CANDIDATES], "folds": {}}
    outer_groups: list[dict[str, Any]] = []
    for outer in gpus:
        inner_gpus = [g for g in gpus if g != outer]
        inner = {
            _name(c): [g for h in inner_gpus for g in scores(frozenset({outer, h}), c, h)] for c in CANDIDATES
        }
        fold: dict[str, Any] = {}
        for family in spec_tier.SPEC_FAMILIES:
            ranked = sorted(CANDIDATES, key=lambda c: _pooled(inner[_name(c)], family))
            best = ranked[0]
            outer_result = [g for g in scores(frozenset({outer}), best, outer) if g["family"] == family]
            outer_groups.extend(outer_result)
            fold[family] = {
                "chosen": _name(best),
                "inner_mape": _pooled(inner[_name(best)], family),
                "inner_original_mape": _pooled(inner[_name(CANDIDATES[0])], family),
                "outer_mape": _pooled(outer_result, family),
                "outer_roofline_mape": _pooled(outer_result, family, "sum_roof"),
                "inner_ranking": [(_name(c), round(_pooled(inner[_name(c)], family), 4)) for c in ranked[:5]],
            }
            got = fold[family]
            print(
                f"outer {outer:16s} {family:9s} chose {got['chosen']:40s} "
                f"inner {got['inner_mape']:.3f} (original {got['inner_original_mape']:.3f})"
                f"  outer {got['outer_mape']:.3f} (roofline {got['outer_roofline_mape']:.3f})",
                flush=True,
            )
        report["folds"][outer] = fold
    report["nested"] = {
        family: {
            "outer_mape": _pooled(outer_groups, family),
            "outer_roofline_mape": _pooled(outer_groups, family, "sum_roof"),
        }
        for family in spec_tier.SPEC_FAMILIES
    }
    for family in spec_tier.SPEC_FAMILIES:
        votes: dict[str, list[float]] = {}
        for fold in report["folds"].values():
            votes.setdefault(fold[family]["chosen"], []).append(fold[family]["inner_mape"])
        report["nested"][family]["chosen_by_vote"] = min(
            votes, key=lambda c: (-len(votes[c]), sum(votes[c]) / len(votes[c]))
        )
        print(
            f"nested {family}: outer MAPE {report['nested'][family]['outer_mape']:.3f} "
            f"(roofline {report['nested'][family]['outer_roofline_mape']:.3f}); "
            f"most chosen {report['nested'][family]['chosen_by_vote']}"
        )
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(f"{report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
