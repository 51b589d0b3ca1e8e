"""Regression head vs constrained numeric decoding for the LLM family, chosen on validation rows.

Fits both heads with params.yaml ``train.llm`` on the same capped train side of ``--split`` (Ray
Train, not registered), then scores each on that side's validation slice -- never the test side,
so the choice is not tuned on it -- and prints MAPE, median error, within-10% and seconds per row.

    .venv/bin/python benchmarks/llm_head_choice.py --split unseen-kernel   # ~20 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="unseen-kernel")
    parser.add_argument("--features", type=Path, default=None)
    args = parser.parse_args()

    from components.common.metrics import regression_report
    from components.evaluation.harness import read_feature_table, split_folds
    from components.platform.config import get_settings, load_params
    from components.platform.runtime import configure_environment
    from components.training.llm import fit_and_validation_sides, fit_on_side, llm_params

    settings = get_settings()
    configure_environment(settings)
    params = load_params(settings.params_file)
    config, run = llm_params(params)
    table = read_feature_table(
        args.features or settings.data_dir / "features" / "features.parquet", settings.data_dir / "canonical"
    )
    train_side = table.loc[split_folds(table, args.split)[0].train]
    results = {}
    for head in ("regression", "decode"):
        cfg = replace(config, head=head, predict_class=config.predict_class and head == "regression")
        _, _, val = fit_and_validation_sides(train_side, args.split, settings, cfg, run)
        started = time.perf_counter()
        predictor, _ = fit_on_side(
            train_side, args.split, settings, config=cfg, run=run, run_name=f"llm-head-{head}"
        )
        fit_s = time.perf_counter() - started
        started = time.perf_counter()
        predicted = predictor.predict(val)["pred_duration_us"]
        report = regression_report(val["duration_us"], predicted)
        results[head] = {
            "val_n": report["n"],
            "val_mape": report["mape"],
            "val_median_ape": report["median_ape"],
            "val_within_10": report["within_10"],
            "fit_s": round(fit_s, 1),
            "s_per_row": round((time.perf_counter() - started) / max(len(val), 1), 3),
            "s_per_step": [h.get("s_per_step") for h in predictor.history],
        }
    print(json.dumps({"split": args.split, "heads": results}, indent=1))


if __name__ == "__main__":
    main()
