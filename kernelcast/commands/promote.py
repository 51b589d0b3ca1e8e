"""`kernelcast promote`: judge a version on its gate report and move `champion` only if every rule passes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelcast.commands._common import clean_errors, prepared_settings


@clean_errors
def promote_command(
    version: Annotated[
        int | None, typer.Option("--version", "-v", help="registered model version to promote")
    ] = None,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="point `champion` back at `previous-champion`")
    ] = False,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="registered model (default: settings.registered_model)")
    ] = None,
    registration: Annotated[
        Path | None, typer.Option("--registration", help="registration.json written by `kernelcast train`")
    ] = None,
    eval_report: Annotated[
        Path | None,
        typer.Option(
            "--eval-report",
            help=(
                "judge on this gate report "
                "(default: the one `kernelcast evaluate --gate` attached to the version)"
            ),
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="judge and print every rule; move no alias, record nothing")
    ] = False,
    allow_challenger: Annotated[
        bool, typer.Option("--allow-challenger", help="exit 0 when the version stays challenger (pipelines)")
    ] = False,
    report: Annotated[Path | None, typer.Option("--report", help="write the decision as JSON")] = None,
    warm_models: Annotated[
        bool,
        typer.Option(
            "--warm-models",
            help=(
                "also save every bundled model's attention lattices (~80 CPU-s once; a first `rank --llm` "
                "of a model then costs ~5 CPU-s less)"
            ),
        ),
    ] = False,
) -> None:
    """Judge VERSION on its gate evaluation report (params.yaml `register:`: thresholds per split and
    target, no guarded metric worse than the champion's by more than the tolerance), print each
    rule with its figure and verdict, record the decision on the version, and make it champion only
    if every rule passes.

    Exit code 0 when `champion` moved (a dry run: when it would), 1 when the version stays challenger.
    """
    from components.platform.config import load_params
    from components.registry.promote import PromoteInputs, gate_policy, promote_stage

    settings = prepared_settings()
    inputs = PromoteInputs(
        tracking_uri=settings.tracking_uri(),
        model_name=model_name,
        default_model=settings.registered_model,
        version=None if version is None else str(version),
        registration=registration,
        rollback=rollback,
        report=report,
        eval_report=eval_report,
        dry_run=dry_run,
        lock_dir=settings.state_dir / "locks",
    )
    params_file = settings.params_file
    policy = None if rollback else gate_policy(load_params(params_file), str(params_file))
    result = promote_stage(inputs, policy)
    if result.rolled_back:
        typer.echo(f"{result.model_name}: champion -> v{result.champion} ({result.reason})")
        _prepare(result.model_name, result.champion, inputs.tracking_uri, warm_models)
        return
    for rule in result.rules:
        typer.echo(f"  {rule.line()}")
    if result.dry_run:
        verdict = "would become champion" if result.would_promote else "would stay challenger"
        typer.echo(
            f"{result.model_name} v{result.version}: DRY RUN, {verdict}; nothing moved "
            f"({_champion(result.champion)})"
        )
        if not result.would_promote and not allow_challenger:
            raise typer.Exit(code=1)
        return
    status = "champion" if result.promoted else "challenger only"
    typer.echo(
        f"{result.model_name} v{result.version}: {status} ({result.reason}); {_champion(result.champion)}"
    )
    if result.promoted:
        _prepare(result.model_name, result.champion, inputs.tracking_uri, warm_models)
    if not result.promoted and not allow_challenger:
        raise typer.Exit(code=1)


def _prepare(name: str, version: str | None, tracking_uri: str, warm_models: bool = False) -> None:
    """Make the new champion's local copy and split store (``serving.prepare``), so the first question
    answers warm (``warm_models``: the bundled models' attention lattices too); a failure leaves the
    promotion standing and says why (that question makes them)."""
    from components.serving.prepare import prepare_version
    from components.serving.query import QueryError

    if version is None:
        return
    try:
        prepared = prepare_version(name, version, tracking_uri, warm_models=warm_models)
    except (QueryError, OSError) as exc:
        typer.echo(f"{name} v{version}: local copy not prepared ({exc}); the first question makes it")
        return
    split = "" if prepared.split is None else ("; op engine store split" if prepared.split else "")
    if prepared.lattices:
        split += f"; {prepared.lattices} GEMM lattices saved"
    if prepared.attention_models:
        split += f"; the attention lattices of {prepared.attention_models} bundled models"
    typer.echo(f"{name} v{version}: ready to answer from {prepared.folder}{split}")


def _champion(version: str | None) -> str:
    return "no champion yet" if version is None else f"champion is v{version}"
