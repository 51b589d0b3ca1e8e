"""Fresh measurements against a model that never saw them: per run, family and dtype.

    PYTHONPATH=. python benchmarks/fresh_measurements_check.py RUNS_DIR MODEL [--asked]

RUNS_DIR: a folder of ``kernelcast profile`` run folders (e.g. a lent GPU's runs before they join
profiled-data/); MODEL: ``models:/kernelcast@champion``, a predictor folder or ``roofline``. Ingests and
validates the runs as ``kernelcast evaluate --source kernelcast --from`` does, scores the op rows (rows the
model trained on are left out), and prints MAPE, median APE, share within 10% and the median
predicted/measured ratio per (run, family, dtype), then by duration (below / above 10 us) and overall. Rows
without an answer are counted per family, never dropped silently.

``--asked``: each row asked as a user asks it (``kernelcast predict``'s answerer: the op engine for
tensor-dtype GEMMs and attention, the champion for the rest), scored per (run, family, dtype, tier); a row
the question schema cannot express (its op has no question form) is counted as not askable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from components.evaluation.harness import evaluate_predictor
from components.evaluation.source_rows import source_frames
from components.platform.config import get_settings, load_params
from components.registry.loading import load_any_predictor


def _source(runs: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    settings = get_settings()
    params = load_params(settings.params_file)
    frames = source_frames("kernelcast", runs, params, settings.data_dir / "features" / "static.parquet")
    return frames.table, frames.kernels


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    frame["ape"] = (frame["pred_duration_us"] - frame["duration_us"]).abs() / frame["duration_us"]
    frame["ratio"] = frame["pred_duration_us"] / frame["duration_us"]
    frame["run"] = frame["run_id"].astype(str).str.split("-").str[2:].str.join("-")
    return frame


def scored_rows(runs: Path, model: str) -> pd.DataFrame:
    """Every op row of the runs with the model's answer (``pred_duration_us`` NaN where it gave none)."""
    settings = get_settings()
    table, _ = _source(runs)
    predictor = load_any_predictor(model, settings.tracking_uri())
    frame = evaluate_predictor(
        predictor, table, None, model=model, rows=table.index, canonical_dir=settings.data_dir / "canonical"
    ).frame
    return _scored(frame[frame["duration_us"].notna()].copy())


def question_of(op: str, family: str, dtype: str, shape: dict, device: str) -> dict | None:
    """The ``kernelcast predict`` question of one measured row; None where no question form says its op."""
    from components.serving.query import FAMILY_OF_OP

    name = op if op in FAMILY_OF_OP else family if family in FAMILY_OF_OP else None
    return None if name is None else {"device": device, "dtype": dtype, "op": name, "shape": shape}


def asked_rows(runs: Path, model: str) -> pd.DataFrame:
    """Every op row asked as a user asks it: its answer, tier and what the answer rests on."""
    from components.serving.question_forms import parse_questions
    from components.serving.questions import answer_questions

    table, kernels = _source(runs)
    shapes = kernels.drop_duplicates("kernel_id").set_index("kernel_id")["shape_json"]
    frame = table[table["duration_us"].notna()].copy()
    questions = [
        question_of(str(r.op), str(r.family), str(r.dtype), json.loads(shapes[r.kernel_id]), str(r.device_id))
        for r in frame.itertuples()
    ]
    askable = [q is not None for q in questions]
    predictor = load_any_predictor(model, get_settings().tracking_uri())
    answers = answer_questions(
        predictor, parse_questions([q for q in questions if q is not None]), model_version=model
    )
    for key in ("duration_us", "tier", "support"):
        values = iter(a.get(key) for a in answers)
        frame[f"pred_{key}"] = [next(values) if ok else None for ok in askable]
    frame["pred_duration_us"] = pd.to_numeric(frame["pred_duration_us"], errors="coerce")
    frame["askable"] = askable
    return _scored(frame)


def summary(frame: pd.DataFrame, by: tuple[str, ...] = ("run", "family", "dtype")) -> pd.DataFrame:
    return frame.groupby(list(by), dropna=False).agg(
        n=("ape", "size"),
        mape=("ape", "mean"),
        median_ape=("ape", "median"),
        within10=("ape", lambda x: (x <= 0.1).mean()),
        pred_over_measured=("ratio", "median"),
    )


def report(frame: pd.DataFrame, by: tuple[str, ...]) -> None:
    """The tables and totals of answered rows, and the count of rows without an answer per family."""
    missing = frame["pred_duration_us"].isna()
    if missing.any():
        reason = (
            frame.loc[missing, "askable"].map({True: "no answer", False: "not askable"})
            if "askable" in frame
            else pd.Series("no answer", index=frame.index[missing])
        )
        counts = frame.loc[missing].assign(reason=reason).groupby(["family", "reason"]).size()
        print("rows without an answer: " + ", ".join(f"{f} {r} {n}" for (f, r), n in counts.items()))
    frame = frame[~missing]
    pd.set_option("display.width", 200)
    print(summary(frame, by).round(3).to_string())
    small = frame["duration_us"] < 10
    print(
        f"below 10 us: {small.sum()} rows, MAPE {frame.loc[small, 'ape'].mean():.1%}; "
        f"10 us and above: {(~small).sum()} rows, MAPE {frame.loc[~small, 'ape'].mean():.1%}"
    )
    print(
        f"all: {len(frame)} rows, MAPE {frame['ape'].mean():.1%}, median {frame['ape'].median():.1%}, "
        f"within 10% {(frame['ape'] <= 0.1).mean():.1%}"
    )


def main() -> None:
    runs, model = Path(sys.argv[1]), sys.argv[2]
    if "--asked" in sys.argv[3:]:
        report(asked_rows(runs, model), ("run", "family", "dtype", "pred_tier"))
    else:
        report(scored_rows(runs, model), ("run", "family", "dtype"))


if __name__ == "__main__":
    main()
