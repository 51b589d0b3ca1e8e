"""Choose the tabular model's features, learner and size on the TRAIN side only, holding out whole GPUs.

    .venv/bin/python benchmarks/model_selection.py --features .kernelcast/data/features/features.parquet \
        --split unseen-kernel --split neusight [--candidates refine] \
        --out benchmarks/results/model_selection.json

For each split, its train side (never its test side) is cut into leave-one-GPU-out folds: the
fastest training GPU, the highest-bandwidth one and two more by hash
(components.models.selection). Every candidate is fitted without the held-out GPU and scored on
it; the winner has the lowest median per-GPU runtime MAPE. The chosen settings go to params.yaml
``train.tabular`` by hand, with this report committed beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import pandas as pd

    from components.evaluation.splits import make_split
    from components.models.selection import CANDIDATE_SETS, report_json, select
    from components.models.tabular_config import TabularConfig
    from components.platform.config import load_params

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=Path, required=True)
    parser.add_argument("--split", action="append", default=None, help="whose train side (repeatable)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--max-train-rows", type=int, default=40000)
    parser.add_argument(
        "--candidates",
        choices=("broad", "refine", "overlap", "l2"),
        default="broad",
        help="broad: feature sets, normalisers, learners; refine: around the broad winner; overlap: p-norm "
        "pipes normaliser; l2: pipes vs roofline after the L2 fallback fix",
    )
    args = parser.parse_args()
    if not args.features.is_file():
        print(
            f"error: --features {args.features}: no such file (run `kernelcast features build`)",
            file=sys.stderr,
        )
        return 2
    table = pd.read_parquet(args.features)
    base = TabularConfig.from_params(load_params(ROOT / "params.yaml"))
    results = {}
    for split in args.split or ["unseen-kernel"]:
        fold = make_split(table, split)[0]
        report = select(
            table.loc[fold.train],
            base,
            CANDIDATE_SETS[args.candidates],
            max_train_rows=args.max_train_rows,
            log=lambda line, s=split: print(f"[{s}] {line}", flush=True),
        )
        results[split] = json.loads(report_json(report))
        print(
            f"[{split}] held out {', '.join(report.folds)}; chosen: {report.chosen} ({report.seconds:.0f} s)"
        )
        for name, score in sorted(report.scores.items(), key=lambda kv: kv[1]["median"]):
            print(
                f"[{split}]   {name:<26} median {100 * score['median']:6.1f}%  "
                f"worst {100 * score['worst']:6.1f}%"
            )
    if args.out:
        from components.common.atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(results, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
