"""`kernelcast train`: fit a model family on a split's train side, log it to MLflow, register a version."""

from __future__ import annotations

import json

from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

TRAINABLE_FAMILIES: tuple[str, ...] = ("tabular", "roofline")


class TabularModel(str, Enum):
    lgbm = "lgbm"
    mlp = "mlp"


def read_params(path: Path) -> dict[str, Any]:
    import yaml

    if not Path(path).is_file():
        raise UserError(f"params file not found: {path}")
    return yaml.safe_load(Path(path).read_text()) or {}


def ensure_tabular_loader() -> None:
    """Registered tabular models are rebuilt through ``components.models.load_predictor``."""
    from components.models import LOADERS, register_loader

    if "tabular" not in LOADERS:  # until components/models/__init__.py lists it
        register_loader("tabular", "components.models.tabular:TabularPredictor")


def pick_fold(folds: list[Any], fold: str | None) -> Any:
    if fold is None:
        return folds[0]
    for candidate in folds:
        if candidate.name in (fold, f"{candidate.name.split(':')[0]}:{fold}"):
            return candidate
    raise UserError(f"no fold {fold!r}; folds: {', '.join(f.name for f in folds)}")


@clean_errors
def train_command(
    family: Annotated[str, typer.Option("--family", help="model family: tabular (or roofline, which only registers)")] = "tabular",
    model: Annotated[TabularModel, typer.Option("--model", help="tabular learner")] = TabularModel.lgbm,
    split: Annotated[str, typer.Option("--split", help="train on this split's train side")] = "unseen-kernel",
    fold: Annotated[str | None, typer.Option("--fold", help="fold of a multi-fold split (unseen-gpu: a device id)")] = None,
    features: Annotated[Path | None, typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="predictor directory (default: models_dir/<family>-<split>-<time>)")] = None,
    register: Annotated[bool, typer.Option("--register/--no-register", help="register a version of the model")] = True,
    max_train_rows: Annotated[int | None, typer.Option("--max-train-rows", min=1, help="deterministic subsample of the train side")] = None,
    measured_features: Annotated[bool, typer.Option("--measured-features/--no-measured-features",
                                                    help="use m_* measured-counter features (not for from-source tasks)")] = False,
    ray: Annotated[bool, typer.Option("--ray/--no-ray", help="fit targets as Ray tasks")] = True,
) -> None:
    """Train on the split's train side, score its test side, log an MLflow run and register a version."""
    from components.evaluation.harness import evaluate_predictor, flat_metrics, read_feature_table, split_folds
    from components.evaluation.plots import write_plots
    from components.evaluation.splits import SPLITS
    from components.models.tabular import TabularConfig
    from components.training.tabular import file_md5, git_commit, log_training_run, make_predictor
    from kernelcast.settings import PROJECT_ROOT

    if family not in TRAINABLE_FAMILIES:
        raise UserError(f"--family must be one of {', '.join(TRAINABLE_FAMILIES)}, not {family!r}")
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    settings = prepared_settings()
    features_file = features or settings.data_dir / "features" / "features.parquet"
    table = read_feature_table(features_file, settings.data_dir / "canonical")
    chosen = pick_fold(split_folds(table, split), fold)
    params = read_params(settings.params_file)
    config = TabularConfig.from_params(params, model=model.value, use_measured=measured_features,
                                       max_train_rows=max_train_rows)
    ensure_tabular_loader()

    typer.echo(f"training {family} ({config.model}) on {chosen.name}: {len(chosen.train)} train rows")
    predictor, seconds = make_predictor(family, table.loc[chosen.train], split, config, settings, use_ray=ray)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = out or settings.models_dir / f"{family}-{split}-{stamp}"
    predictor.save(out_dir)
    evaluation = evaluate_predictor(predictor, table, split, model=str(out_dir), rows=chosen.test)
    plots = write_plots(evaluation.frame, settings.reports_dir / f"train-{family}-{split}-{stamp}")
    metrics = {**flat_metrics(evaluation.report), "train_seconds": seconds,
               "n_train": float(len(predictor.trained_on))}
    run_params = {"family": family, "model": config.model if family == "tabular" else "classic",
                  "split": split, "fold": chosen.name, "features_file": str(features_file),
                  **{f"cfg_{k}": v for k, v in vars(config).items()}}
    tags = {"split": split, "dataset_md5": file_md5(features_file), "git_commit": git_commit(PROJECT_ROOT)}
    run = log_training_run(settings, out_dir, params=run_params, metrics=metrics, tags=tags, artifacts=plots,
                           register=register, family=family)

    duration = evaluation.report["targets"].get("duration_us", {})
    typer.echo(f"fit {seconds:.1f}s; test n={evaluation.report['n']} runtime MAPE="
               f"{_pct(duration.get('mape'))} within10={_pct(duration.get('within_10'))}")
    typer.echo(f"predictor: {out_dir}")
    typer.echo(f"mlflow run: {run.run_id}")
    if run.version is not None:
        typer.echo(f"registered: models:/{settings.registered_model}/{run.version}")
    # What the register stage (`kernelcast promote --registration FILE`) needs, beside the model.
    registration = {"model_name": settings.registered_model, "version": run.version, "run_id": run.run_id,
                    "predictor_dir": str(out_dir), "split": split, "family": family}
    (out_dir / "registration.json").write_text(json.dumps(registration, indent=2, sort_keys=True))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
