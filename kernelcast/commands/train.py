"""`kernelcast train`: fit a model family on a split's train side, log it to MLflow, register a version."""

from __future__ import annotations

import json

from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

TRAINABLE_FAMILIES: tuple[str, ...] = ("tabular", "roofline", "llm")


class TabularModel(str, Enum):
    lgbm = "lgbm"
    mlp = "mlp"
    llm = "llm"  # shorthand for --family llm


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
    family: Annotated[str, typer.Option("--family", help="model family: tabular, llm (or roofline, which only registers)")] = "tabular",
    model: Annotated[TabularModel, typer.Option("--model", help="tabular learner (lgbm, mlp), or llm = --family llm")] = TabularModel.lgbm,
    split: Annotated[str, typer.Option("--split", help="train on this split's train side")] = "unseen-kernel",
    fold: Annotated[str | None, typer.Option("--fold", help="fold of a multi-fold split (unseen-gpu: a device id)")] = None,
    features: Annotated[Path | None, typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="predictor directory (default: models_dir/<family>-<split>-<time>)")] = None,
    register: Annotated[bool, typer.Option("--register/--no-register", help="register a version of the model")] = True,
    max_train_rows: Annotated[int | None, typer.Option("--max-train-rows", min=1, help="deterministic subsample of the train side")] = None,
    max_test_rows: Annotated[int | None, typer.Option("--max-test-rows", min=1, help=(
        "score at most this many test rows (deterministic); llm default: params.yaml train.llm.max_test_rows"))] = None,
    measured_features: Annotated[bool, typer.Option("--measured-features/--no-measured-features",
                                                    help="use m_* measured-counter features (not for from-source tasks)")] = False,
    ray: Annotated[bool, typer.Option("--ray/--no-ray", help="fit targets as Ray tasks")] = True,
) -> None:
    """Train on the split's train side, score its test side, log an MLflow run and register a version."""
    from components.evaluation.harness import (
        capped_rows, evaluate_predictor, flat_metrics, read_feature_table, split_folds,
    )
    from components.evaluation.plots import write_plots
    from components.evaluation.splits import SPLITS
    from components.models.tabular import TabularConfig
    from components.training.tabular import file_md5, git_commit, log_training_run, make_predictor
    from kernelcast.settings import PROJECT_ROOT

    if model is TabularModel.llm:
        family = "llm"
    if family not in TRAINABLE_FAMILIES:
        raise UserError(f"--family must be one of {', '.join(TRAINABLE_FAMILIES)}, not {family!r}")
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    settings = prepared_settings()
    features_file = features or settings.data_dir / "features" / "features.parquet"
    table = read_feature_table(features_file, settings.data_dir / "canonical")
    chosen = pick_fold(split_folds(table, split), fold)
    params = read_params(settings.params_file)
    if family == "llm":
        train_llm_on_split(table, chosen, split, features_file, settings, params, out=out, register=register,
                           max_train_rows=max_train_rows, max_test_rows=max_test_rows)
        return
    config = TabularConfig.from_params(params, model=model.value, use_measured=measured_features,
                                       max_train_rows=max_train_rows)
    ensure_tabular_loader()

    typer.echo(f"training {family} ({config.model}) on {chosen.name}: {len(chosen.train)} train rows")
    predictor, seconds = make_predictor(family, table.loc[chosen.train], split, config, settings, use_ray=ray)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = out or settings.models_dir / f"{family}-{split}-{stamp}"
    predictor.save(out_dir)
    rows = capped_rows(chosen.test, table, max_test_rows)
    evaluation = evaluate_predictor(predictor, table, split, model=str(out_dir), rows=rows)
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


def train_llm_on_split(table: Any, chosen: Any, split: str, features_file: Path, settings: Any,
                       params: dict[str, Any], *, out: Path | None, register: bool, max_train_rows: int | None,
                       max_test_rows: int | None) -> None:
    """LoRA fine-tune on the fold's train side (Ray Train), score its test side, and record the
    scores on the training run, so ``promote`` gates the LLM version like any other."""
    import shutil
    from dataclasses import replace

    from mlflow import MlflowClient

    from components.evaluation.harness import capped_rows, evaluate_predictor, flat_metrics
    from components.evaluation.plots import write_plots
    from components.training.llm import fit_on_side, llm_params
    from components.training.tabular import file_md5, git_commit
    from kernelcast.settings import PROJECT_ROOT

    config, run = llm_params(params)
    run = replace(run, max_train_rows=max_train_rows or run.max_train_rows,
                  max_test_rows=max_test_rows or run.max_test_rows)
    typer.echo(f"training llm ({config.base or 'embedded SmolLM2-135M'}, LoRA r={config.lora_r}) on {chosen.name}: "
               f"{len(chosen.train)} train rows, at most {run.max_train_rows} used; {run.workers} Ray Train workers")
    predictor, trained_dir = fit_on_side(table.loc[chosen.train], split, settings, config=config, run=run,
                                         register_as=settings.registered_model if register else "",
                                         run_name=f"train-llm-{split}")
    out_dir = trained_dir
    if out is not None:
        shutil.copytree(trained_dir, out, dirs_exist_ok=True)
        out_dir = out
    rows = capped_rows(chosen.test, table, run.max_test_rows)
    evaluation = evaluate_predictor(predictor, table, split, model=str(out_dir), rows=rows,
                                    canonical_dir=settings.data_dir / "canonical")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    plots = write_plots(evaluation.frame, settings.reports_dir / f"train-llm-{split}-{stamp}")

    run_id = trained_dir.name  # train_llm saves under models_dir/llm/<mlflow run id>
    client = MlflowClient(tracking_uri=settings.tracking_uri(), registry_uri=settings.tracking_uri())
    steps = [h["s_per_step"] for h in predictor.history if "s_per_step" in h]
    metrics = {**flat_metrics(evaluation.report), "n_train": float(len(predictor.trained_on)),
               "n_test_available": float(len(chosen.test))}
    if steps:
        metrics["s_per_step"] = float(sum(steps) / len(steps))
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    tags = {"split": split, "fold": chosen.name, "dataset_md5": file_md5(features_file),
            "git_commit": git_commit(PROJECT_ROOT), "kind": "train"}
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    for path in plots:
        client.log_artifact(run_id, str(path), "evaluation")
    version = None
    if register:
        versions = client.search_model_versions(f"run_id='{run_id}'")
        version = str(versions[0].version) if versions else None
        for key in ("split", "dataset_md5", "git_commit"):
            if version is not None:
                client.set_model_version_tag(settings.registered_model, version, key, tags[key])

    duration = evaluation.report["targets"].get("duration_us", {})
    roofline = evaluation.report.get("roofline") or {}
    typer.echo(f"test n={evaluation.report['n']} (of {len(chosen.test)}; cap {run.max_test_rows}) runtime MAPE="
               f"{_pct(duration.get('mape'))} within10={_pct(duration.get('within_10'))} roofline acc="
               f"{_pct(roofline.get('accuracy'))}; {metrics.get('s_per_step', float('nan')):.2f} s/step")
    typer.echo(f"predictor: {out_dir}")
    typer.echo(f"mlflow run: {run_id}")
    if version is not None:
        typer.echo(f"registered: models:/{settings.registered_model}/{version}")
    registration = {"model_name": settings.registered_model, "version": version, "run_id": run_id,
                    "predictor_dir": str(out_dir), "split": split, "family": "llm"}
    (out_dir / "registration.json").write_text(json.dumps(registration, indent=2, sort_keys=True))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
