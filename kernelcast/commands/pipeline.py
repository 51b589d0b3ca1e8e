"""`kernelcast pipeline`: every stage of dvc.yaml (ingest -> ... -> register) as one Prefect flow."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings


@clean_errors
def pipeline_command(
    from_stage: Annotated[str | None, typer.Option("--from-stage", help="start at this stage")] = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="run just these stages (repeatable)")
    ] = None,
    force: Annotated[bool, typer.Option(help="rerun stages even if DVC finds them up to date")] = False,
    push: Annotated[bool, typer.Option(help="push outputs to the DVC remote at the end")] = True,
) -> None:
    """Run the pipeline as a Prefect flow; each task reproduces one DVC stage (unchanged ones are skipped).

    Prints each stage as it goes (what DVC did, rows written, seconds, elapsed), then the promotion
    verdict and where to look. One run per state folder: a second is refused while one runs.
    """
    import time

    from components.pipeline.graph import StageGraphError, select_stages
    from components.pipeline.lock import PipelineLocked
    from components.platform.config import PROJECT_ROOT
    from flows.pipeline import StageFailed, run_pipeline, verdict

    settings = prepared_settings()
    started = time.time()
    try:
        stages = select_stages(PROJECT_ROOT / "dvc.yaml", from_stage, only)
    except (StageGraphError, ValueError) as exc:
        raise UserError(str(exc)) from None
    try:
        reports = run_pipeline(settings, stages, force=force, push=push, echo=typer.echo)
    except StageFailed as exc:
        typer.echo(exc.tail.rstrip(), err=True)  # the stage's own error, above the one-line summary
        raise UserError(str(exc)) from None
    except PipelineLocked as exc:
        raise UserError(str(exc)) from None
    except KeyboardInterrupt as exc:  # SIGINT / SIGTERM: everything this run started is stopped
        typer.echo(
            f"error: pipeline interrupted ({exc or 'SIGINT'}); rerun to finish the unfinished stages",
            err=True,
        )
        raise typer.Exit(130) from None
    total = sum(report["seconds"] for report in reports)
    typer.echo(
        "wall time per stage: "
        + ", ".join(f"{r['stage']} {r['seconds']:.0f} s ({r['action']})" for r in reports)
        + f"; total {total:.0f} s"
    )
    for line in verdict(PROJECT_ROOT, settings, since=started):
        typer.echo(line)
