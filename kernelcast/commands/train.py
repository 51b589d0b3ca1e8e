"""`kernelcast train`: fit a model family on a split's train side, log it to MLflow, register a version."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

TRAINABLE_FAMILIES: tuple[str, ...] = ("tabular", "roofline", "llm")


class TabularModel(StrEnum):
    lgbm = "lgbm"
    mlp = "mlp"
    llm = "llm"  # shorthand for --family llm


@clean_errors
def train_command(
    family: Annotated[
        str, typer.Option("--family", help="model family: tabular, llm (or roofline, which only registers)")
    ] = "tabular",
    model: Annotated[
        TabularModel, typer.Option("--model", help="tabular learner (lgbm, mlp), or llm = --family llm")
    ] = TabularModel.lgbm,
    split: Annotated[str, typer.Option("--split", help="train on this split's train side")] = "unseen-kernel",
    fold: Annotated[
        str | None, typer.Option("--fold", help="fold of a multi-fold split (unseen-gpu: a device id)")
    ] = None,
    features: Annotated[
        Path | None,
        typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="predictor directory (default: models_dir/<family>-<split>-<time>)"),
    ] = None,
    register: Annotated[
        bool, typer.Option("--register/--no-register", help="register a version of the model")
    ] = True,
    max_train_rows: Annotated[
        int | None, typer.Option("--max-train-rows", min=1, help="deterministic subsample of the train side")
    ] = None,
    max_test_rows: Annotated[
        int | None,
        typer.Option(
            "--max-test-rows",
            min=1,
            help=(
                "score at most this many test rows (deterministic); "
                "llm default: params.yaml train.llm.max_test_rows"
            ),
        ),
    ] = None,
    measured_features: Annotated[
        bool,
        typer.Option(
            "--measured-features/--no-measured-features",
            help="use m_* measured-counter features (not for from-source tasks)",
        ),
    ] = False,
    ray: Annotated[bool, typer.Option("--ray/--no-ray", help="fit targets as Ray tasks")] = True,
) -> None:
    """Train on the split's train side, score its test side, log an MLflow run and register a version."""
    from components.evaluation.splits import SPLITS
    from components.platform.config import load_params
    from components.training.stage import TrainInputs, train_stage

    if model is TabularModel.llm:
        family = "llm"
    if family not in TRAINABLE_FAMILIES:
        raise UserError(f"--family must be one of {', '.join(TRAINABLE_FAMILIES)}, not {family!r}")
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    settings = prepared_settings()
    inputs = TrainInputs(
        features_file=features or settings.data_dir / "features" / "features.parquet",
        family=family,
        model="lgbm" if model is TabularModel.llm else model.value,
        split=split,
        fold=fold,
        out_dir=out,
        register=register,
        max_train_rows=max_train_rows,
        max_test_rows=max_test_rows,
        measured_features=measured_features,
        use_ray=ray,
    )
    result = train_stage(inputs, settings, load_params(settings.params_file), progress=typer.echo)

    duration = result.report["targets"].get("duration_us", {})
    if result.family == "llm":
        roofline = result.report.get("roofline") or {}
        typer.echo(
            f"test n={result.report['n']} (of {result.n_test_available}; cap {result.max_test_rows}) "
            f"runtime MAPE={_pct(duration.get('mape'))} within10={_pct(duration.get('within_10'))} "
            f"roofline acc={_pct(roofline.get('accuracy'))}; "
            f"{result.metrics.get('s_per_step', float('nan')):.2f} s/step"
        )
    else:
        typer.echo(
            f"fit {result.seconds:.1f}s; test n={result.report['n']} runtime MAPE="
            f"{_pct(duration.get('mape'))} within10={_pct(duration.get('within_10'))}"
        )
    typer.echo(f"predictor: {result.predictor_dir}")
    typer.echo(f"mlflow run: {result.run_id}")
    if result.model_uri is not None:
        typer.echo(f"registered: {result.model_uri}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
