"""`kernelcast evaluate`: score a model (registry URI or local predictor dir) and write the JSON report.

Rows come from the feature table (the split's test side) or, with ``--source/--from``, from a
directory ingested on the fly through the source's adapter, validation and feature building.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

# CLI source name -> ingest adapter module under components.ingest (our own profiled H100 data).
ADAPTER_MODULES: dict[str, str] = {"kernelcast": "profiled", "profiled": "profiled"}


def load_model(uri: str, tracking_uri: str) -> Any:
    """A predictor from ``models:/name@alias``, ``models:/name/N``, ``runs:/...`` or a local directory."""
    from kernelcast.commands.train import ensure_tabular_loader

    ensure_tabular_loader()
    if uri.startswith(("models:/", "runs:/")):
        import mlflow
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
        try:
            wrapper = mlflow.pyfunc.load_model(uri)
        except MlflowException as exc:
            raise UserError(f"cannot load {uri} from {tracking_uri}: {exc.message.splitlines()[0]}") from exc
        predictor = getattr(wrapper.unwrap_python_model(), "predictor", None)
        if predictor is None:
            raise UserError(f"{uri} is not a kernelcast model (no predictor inside its pyfunc wrapper)")
        return predictor
    path = Path(uri).expanduser()
    if not path.is_dir():
        raise UserError(f"--model {uri!r} is neither a models:/ or runs:/ URI nor a predictor directory")
    from components.models import load_predictor

    return load_predictor(path)


def ingest_features(source: str, root: Path, settings: Any, params: dict[str, Any]) -> tuple[Any, int]:
    """Adapter -> validation -> features for one source directory; returns (table, quarantined rows)."""
    import importlib

    import pandas as pd

    from components.devices import load_catalog
    from components.features.build import build_feature_table
    from components.validation.run import validate_measurements

    module_name = ADAPTER_MODULES.get(source, source)
    try:
        adapter = importlib.import_module(f"components.ingest.{module_name}")
    except ModuleNotFoundError as exc:
        raise UserError(f"no ingest adapter for source {source!r} (components.ingest.{module_name})") from exc
    if not root.is_dir():
        raise UserError(f"--from {root}: not a directory")
    catalog = load_catalog()
    output = adapter.ingest(root, catalog)
    measurements = output.measurements
    if measurements["measurement_id"].isna().any():
        # An adapter that left ids empty: they are a pure function of the key columns (schema).
        from components.ingest.schema import with_measurement_ids

        measurements = with_measurement_ids(measurements)
    validation = validate_measurements(measurements, catalog, params, kernels=output.kernels)
    static_file = settings.data_dir / "features" / "static.parquet"
    static = pd.read_parquet(static_file) if static_file.is_file() else None
    table = build_feature_table(validation.valid, output.kernels, catalog, static)
    # The bolet split reads these canonical columns, which the feature table does not carry.
    extra = validation.valid[["measurement_id", "upstream_row", "roofline_class_published"]]
    table = table.merge(extra.drop_duplicates("measurement_id"), on="measurement_id", how="left")
    # program for the bolet split; source_text for predictors that read source (llm): this table is
    # one directory's rows in memory, never written, so carrying the text per row is fine here.
    kernel_extra = [c for c in ("program", "source_text") if c in output.kernels.columns]
    table = table.merge(output.kernels[["kernel_id", *kernel_extra]].drop_duplicates("kernel_id"), on="kernel_id",
                        how="left")
    return table, len(validation.quarantine)


@clean_errors
def evaluate_command(
    model: Annotated[str, typer.Option("--model", help="models:/kernelcast@champion, models:/kernelcast/3 or a predictor dir")],
    out: Annotated[Path, typer.Option("--out", help="evaluation report (JSON)")],
    source: Annotated[str | None, typer.Option("--source", help="ingest this source on the fly (with --from)")] = None,
    from_dir: Annotated[Path | None, typer.Option("--from", help="directory of the source in its upstream layout")] = None,
    split: Annotated[str | None, typer.Option("--split", help="score this split's test side (default: unseen-kernel; all rows with --source)")] = None,
    features: Annotated[Path | None, typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)")] = None,
    log: Annotated[bool, typer.Option("--log/--no-log", help="record an MLflow evaluation run")] = True,
    max_rows: Annotated[int | None, typer.Option("--max-rows", min=1, help=(
        "score at most this many rows, chosen by hash of measurement_id (the same rows every run); "
        "for the llm family on a CPU"))] = None,
) -> None:
    """Evaluate MODEL; rows it trained on are excluded and counted as excluded_seen."""
    from components.evaluation.harness import (
        capped_rows, evaluate_predictor, evaluation_rows, log_evaluation_run, read_feature_table,
    )
    from components.evaluation.plots import write_plots
    from components.evaluation.splits import SPLITS
    from components.training.tabular import experiment_id
    from kernelcast.commands.train import read_params

    if (source is None) != (from_dir is None):
        raise UserError("--source and --from go together")
    if split is not None and split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if out.suffix.lower() != ".json":
        raise UserError(f"--out must be a .json file, got {out}")
    settings = prepared_settings()
    if source is not None:
        table, quarantined = ingest_features(source, from_dir, settings, read_params(settings.params_file))
        typer.echo(f"{source}: {len(table)} rows ingested ({quarantined} quarantined by validation)")
    else:
        split = split or "unseen-kernel"
        table = read_feature_table(features or settings.data_dir / "features" / "features.parquet",
                                   settings.data_dir / "canonical")
    predictor = load_model(model, settings.tracking_uri())
    candidates = evaluation_rows(table, split)
    rows = capped_rows(candidates.index, table, max_rows)
    evaluation = evaluate_predictor(predictor, table, split, model=model, rows=rows,
                                    canonical_dir=settings.data_dir / "canonical")
    report = evaluation.report
    if len(rows) < len(candidates):
        report["subsampled_from"] = len(candidates)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")

    if log:
        plots = write_plots(evaluation.frame, out.with_name(out.stem + "_plots"))
        run_id = log_evaluation_run(report, plots, tracking_uri=settings.tracking_uri(),
                                    experiment_id=experiment_id(settings, "kernelcast"),
                                    tags={"model_uri": model, "source": source or "features"})
        typer.echo(f"mlflow evaluation run: {run_id}")
    for target, figures in report["targets"].items():
        typer.echo(f"{target:16s} n={figures['n']:6d} MAPE={_pct(figures['mape'])} "
                   f"median={_pct(figures['median_ape'])} within10={_pct(figures['within_10'])}")
    if "roofline" in report:
        typer.echo(f"roofline class   n={report['roofline']['n']:6d} acc={_pct(report['roofline']['accuracy'])} "
                   f"balanced={_pct(report['roofline']['balanced_accuracy'])}")
    typer.echo(f"{report['n']} rows scored, {report['excluded_seen']} excluded as seen in training -> {out}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
