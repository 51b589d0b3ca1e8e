"""Fresh measurements against a model that never saw them: per run, family and dtype.

    PYTHONPATH=. python benchmarks/fresh_measurements_check.py RUNS_DIR MODEL

RUNS_DIR: a folder of ``kernelcast profile`` run folders (e.g. a lent GPU's runs before they join
profiled-data/); MODEL: ``models:/kernelcast@champion``, a predictor folder or ``roofline``. Ingests and
validates the runs as ``kernelcast evaluate --source kernelcast --from`` does, scores the op rows (rows the
model trained on are left out), and prints MAPE, median APE, share within 10% and the median
predicted/measured ratio per (run, family, dtype), then by duration (below / above 10 us) and overall.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from components.evaluation.harness import evaluate_predictor
from components.evaluation.source_rows import source_frames
from components.platform.config import get_settings, load_params
from components.registry.loading import load_any_predictor


def scored_rows(runs: Path, model: str) -> pd.DataFrame:
    settings = get_settings()
    params = load_params(settings.params_file)
    table = source_frames("kernelcast", runs, params, settings.data_dir / "features" / "static.parquet").table
    predictor = load_any_predictor(model, settings.tracking_uri())
    frame = evaluate_predictor(
        predictor, table, None, model=model, rows=table.index, canonical_dir=settings.data_dir / "canonical"
    ).frame
    frame = frame[frame["pred_duration_us"].notna() & frame["duration_us"].notna()].copy()
    frame["ape"] = (frame["pred_duration_us"] - frame["duration_us"]).abs() / frame["duration_us"]
    frame["ratio"] = frame["pred_duration_us"] / frame["duration_us"]
    frame["run"] = frame["run_id"].str.split("-").str[2:].str.join("-")
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.groupby(["run", "family", "dtype"]).agg(
        n=("ape", "size"),
        mape=("ape", "mean"),
        median_ape=("ape", "median"),
        within10=("ape", lambda x: (x <= 0.1).mean()),
        pred_over_measured=("ratio", "median"),
    )


def main() -> None:
    runs, model = Path(sys.argv[1]), sys.argv[2]
    frame = scored_rows(runs, model)
    pd.set_option("display.width", 200)
    print(summary(frame).round(3).to_string())
    small = frame["duration_us"] < 10
    print(
        f"below 10 us: {small.sum()} rows, MAPE {frame.loc[small, 'ape'].mean():.1%}; "
        f"10 us and above: {(~small).sum()} rows, MAPE {frame.loc[~small, 'ape'].mean():.1%}"
    )
    print(
        f"all: {len(frame)} rows, MAPE {frame['ape'].mean():.1%}, median {frame['ape'].median():.1%}, "
        f"within 10% {(frame['ape'] <= 0.1).mean():.1%}"
    )


if __name__ == "__main__":
    main()
