"""`kernelcast ingest`: public sources in their upstream layout -> the canonical tables.

Each source is read from a local directory (default ``<datasets_dir>/<source>``) or, with
``--from <URL>``, from its upstream repository at the commit pinned in
``components.ingest.registry``. Exit codes: 0 written; 2 bad input (unknown source, missing
directory, unreadable file, offline fetch).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

if TYPE_CHECKING:
    import pandas as pd


def format_summary(table: pd.DataFrame, rows_in: dict[str, int]) -> str:
    """Rows per source and device, a subtotal per source, then the grand total."""
    lines = [f"{'source':<15}{'device':<26}{'rows':>10}{'rejects':>9}"]
    for source, group in table.groupby("source", sort=True):
        for device, rows, rejects in zip(group["device_id"], group["rows"], group["rejects"], strict=True):
            lines.append(f"{source:<15}{device:<26}{rows:>10}{rejects:>9}")
        lines.append(
            f"{source:<15}{'= total (rows in ' + str(rows_in.get(source, 0)) + ')':<26}"
            f"{int(group['rows'].sum()):>10}{int(group['rejects'].sum()):>9}"
        )
    lines.append(f"{'ALL':<15}{'':<26}{int(table['rows'].sum()):>10}{int(table['rejects'].sum()):>9}")
    return "\n".join(lines)


@clean_errors
def ingest_command(
    source: Annotated[
        list[str] | None, typer.Option("--source", "-s", help="source to ingest (repeatable)")
    ] = None,
    from_dir: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="local dir in upstream layout, or a git/http(s) URL to fetch "
            "at the pinned commit (one --source only)",
        ),
    ] = None,
    all_sources: Annotated[
        bool, typer.Option("--all", help="every source in params.yaml ingest.sources, from datasets_dir")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="output folder [data_dir/canonical]")] = None,
) -> None:
    """Read public sources into canonical measurements/kernels/rejects tables + summary.json."""
    from components.ingest.base import IngestError
    from components.ingest.registry import FILE_SOURCES, SOURCES, check_source
    from components.ingest.stage import IngestInputs, ingest_stage
    from components.platform.config import ingest_sources, load_params

    settings = prepared_settings()
    sources = list(source or [])
    if all_sources:
        if from_dir is not None:
            raise UserError("--all reads every source from datasets_dir; --from needs a single --source")
        listed = ingest_sources(load_params(settings.params_file)) if settings.params_file.is_file() else None
        sources = [*sources, *(listed or [s for s in SOURCES if s not in FILE_SOURCES])]
    if not sources:
        raise UserError(f"nothing to ingest: give --source NAME (one of {', '.join(SOURCES)}) or --all")
    sources = [check_source(s) for s in dict.fromkeys(sources)]
    inputs = IngestInputs(
        sources=tuple(sources),
        out_dir=out or settings.data_dir / "canonical",
        datasets_dir=settings.datasets_dir,
        cache_dir=settings.cache_dir,
        from_location=from_dir,
    )
    try:
        result = ingest_stage(inputs, progress=lambda m: typer.echo(m, err=True))
    except IngestError as exc:
        raise UserError(str(exc)) from None
    typer.echo(format_summary(result.summary, result.rows_in))
    if result.unknown_devices:
        typer.echo(
            f"unknown devices (add them to the catalog): {', '.join(result.unknown_devices)}", err=True
        )
    typer.echo(
        f"wrote {result.out_dir} (measurements.parquet, kernels.parquet, rejects.parquet, summary.json)"
    )
    typer.echo(
        f"replaced {', '.join(result.replaced) or 'nothing'}; kept {', '.join(result.kept) or 'nothing'}; "
        f"{result.total_rows} rows in all"
    )
