"""`kernelcast evaluate`: score a model and write the JSON report.

The model is a registry URI, a local predictor dir or `roofline`.

Rows come from the feature table (the split's test side) or, with ``--source/--from``, from a
directory ingested on the fly through the ingest, validate and features stages.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

if TYPE_CHECKING:
    from components.evaluation.report import ExecutorFactory
    from components.platform.config import Settings


@clean_errors
def evaluate_command(
    out: Annotated[Path, typer.Option("--out", help="evaluation report (JSON)")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="models:/kernelcast@champion, models:/kernelcast/3, a predictor dir or 'roofline'"
        ),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="ingest this source on the fly (with --from)")
    ] = None,
    from_dir: Annotated[
        Path | None, typer.Option("--from", help="directory of the source in its upstream layout")
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split", help="score this split's test side (default: unseen-kernel; all rows with --source)"
        ),
    ] = None,
    features: Annotated[
        Path | None,
        typer.Option("--features", help="feature table (default: data_dir/features/features.parquet)"),
    ] = None,
    log: Annotated[bool, typer.Option("--log/--no-log", help="record an MLflow evaluation run")] = True,
    max_rows: Annotated[
        int | None,
        typer.Option(
            "--max-rows",
            min=1,
            help=(
                "score at most this many rows, chosen by hash of measurement_id (the same rows every run); "
                "for the llm family on a CPU"
            ),
        ),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate",
            help=(
                "write the promotion gate's report: every split of params.yaml register.splits (refits under "
                "register.evaluation caps); attached to the registered version as its eval_report"
            ),
        ),
    ] = False,
    registration: Annotated[
        Path | None,
        typer.Option(
            "--registration",
            help=("with --gate: the version a registration.json (written by `kernelcast train`) names"),
        ),
    ] = None,
) -> None:
    """Evaluate MODEL; rows it trained on are excluded and counted as excluded_seen."""
    from components.evaluation.stage import EvaluateInputs, check_inputs, evaluate_stage
    from components.platform.config import load_params

    inputs = EvaluateInputs(
        model=model or "",
        out_file=out,
        split=split,
        features_file=features,
        source=source,
        from_dir=from_dir,
        log=log,
        max_rows=max_rows,
        gate=gate,
        registration=registration,
    )
    if not model and registration is None:
        raise UserError("--model is required (or --gate --registration FILE)")
    try:
        check_inputs(inputs)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    from components.ingest.base import IngestError

    settings = prepared_settings()
    try:
        result = evaluate_stage(
            inputs, settings, load_params(settings.params_file), _gate_folds(settings, gate)
        )
    except IngestError as exc:  # --from names a folder that is not the source's upstream layout
        raise UserError(str(exc)) from None
    report = result.report
    if gate:
        _print_gate(report, out)
        return
    if "serving" in report:
        _print_serving(report["serving"])
    if result.ingested_rows is not None:
        typer.echo(
            f"{source}: {result.ingested_rows} rows ingested ({result.quarantined} quarantined by validation)"
        )
        accounting = report.get("source_rows", {})
        for why, count in accounting.get("rejected_at_ingest", {}).items():
            typer.echo(f"  rejected at ingest, {count} of {accounting['rows_in']} upstream rows: {why}")
    if result.run_id is not None:
        typer.echo(f"mlflow evaluation run: {result.run_id}")
    for target, figures in report["targets"].items():
        typer.echo(
            f"{target:16s} n={figures['n']:6d} MAPE={_pct(figures['mape'])} "
            f"median={_pct(figures['median_ape'])} within10={_pct(figures['within_10'])}"
        )
    if "roofline" in report:
        roofline = report["roofline"]
        typer.echo(
            f"roofline class   n={roofline['n']:6d} acc={_pct(roofline['accuracy'])} "
            f"balanced={_pct(roofline['balanced_accuracy'])}"
        )
    for why, count in report.get("unanswered", {}).items():
        typer.echo(f"  no runtime for {count} rows: {why}")
    if "programs" in report:
        _print_programs(report["programs"])
    typer.echo(f"{report['n']} rows scored, {report['excluded_seen']} excluded as seen in training -> {out}")


def _print_serving(serving: dict) -> None:
    """Serving runs of the tree: per device, answered/asked and each target's MAPE; reasons of the rest."""
    if not serving.get("n_asked"):
        typer.echo(f"serving runs: {serving.get('note', 'none')}")
        return
    for device, entry in serving["by_device"].items():
        figures = " ".join(
            f"{k.removesuffix('_mape')}={_pct(v)}" for k, v in entry.items() if k.endswith("_mape")
        )
        typer.echo(f"serving {device:16s} {entry['n']}/{entry['n_asked']} answered {figures}")
        for reason, n in entry["not_answered"].items():
            typer.echo(f"    not answered: {n} x {reason}")
    typer.echo(f"serving runs: {serving['n']}/{serving['n_asked']} answered ({serving['framework']})")


def _print_programs(programs: dict) -> None:
    typer.echo(
        f"programs ({programs['split']}): {programs['n_answered']} of {programs['n_rows']} "
        "timing rows answered "
        "(leave-one-GPU-out program model, as `bench accuracy --split kernelbench`)"
    )
    for why, count in programs["unanswered"].items():
        typer.echo(f"  not answered, {count} rows: {why}")
    for row in programs["figures"]:
        if row["metric"] == "mape" and "GPU" in row["scope"].split(",")[-1]:  # median / worst GPU per level
            typer.echo(f"  {row['family']:9s} {row['scope']:40s} MAPE={_pct(row['ours'])}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _gate_folds(settings: Settings, gate: bool) -> ExecutorFactory | None:
    """The gate's refit folds of one split (unseen-gpu's held-out GPUs) as Ray tasks side by side, not one
    after the other (each fold is a single-threaded fit: one core each); Ray starts only for such a split."""
    if not gate:
        return None
    from functools import partial

    from components.evaluation.folds import ray_fold_executor
    from components.platform.runtime import ensure_ray

    return partial(ray_fold_executor, start_ray=lambda: ensure_ray(settings))


def _print_gate(report: dict, out: Path) -> None:
    who = (
        f"{report['model_name']} v{report['model_version']}"
        if report.get("model_version")
        else str(report.get("model"))
    )
    typer.echo(f"gate report for {who} ({report.get('family')}; dataset {report.get('dataset_version')})")
    for split, entry in report["splits"].items():
        if entry["status"] != "ok":
            typer.echo(f"{split:15s} {entry['status'].upper()}: {entry.get('note')}")
            continue
        metrics = entry["metrics"]
        figures = [
            f"{name}={_pct(metrics.get(name))}"
            for name in ("runtime_mape", "within_10", "roofline_accuracy")
            if metrics.get(name) is not None
        ]
        typer.echo(
            f"{split:15s} {entry['mode']:8s} n={entry['n']:6d} {' '.join(figures)} ({entry['seconds']} s)"
        )
    state = "complete" if report.get("complete") else "INCOMPLETE (cannot promote)"
    typer.echo(f"{state}; {report.get('seconds')} s -> {out}")
