"""`kernelcast ingest`: public sources in their upstream layout -> the canonical tables.

Each source is read from a local directory (default ``<datasets_dir>/<source>``) or, with
``--from <URL>``, from its upstream repository at the commit pinned in
``components.ingest.registry``. Exit codes: 0 written; 2 bad input (unknown source, missing
directory, unreadable file, offline fetch).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernelcast.commands._common import UserError, clean_errors, prepared_settings

if TYPE_CHECKING:
    import pandas as pd

    from kernelcast.settings import Settings

_REMOTE = re.compile(r"^(https?|git|ssh|file)://|^git@|\.git$")


def params_sources(settings: Settings) -> list[str] | None:
    """``ingest.sources`` from params.yaml (what the DVC stage declares), or None when absent."""
    import yaml

    path = settings.params_file
    if not path.is_file():
        return None
    params = yaml.safe_load(path.read_text()) or {}
    sources = (params.get("ingest") or {}).get("sources")
    if sources is None:
        return None
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise UserError(f"{path}: ingest.sources must be a list of source names")
    return sources


def resolve_roots(sources: list[str], from_dir: str | None, settings: Settings) -> dict[str, Path]:
    """Where each source is read from: --from (a directory or a URL to fetch), else datasets_dir."""
    from components.ingest.registry import default_root, upstream

    if from_dir is not None and len(sources) != 1:
        raise UserError("--from reads one source: give exactly one --source with it")
    roots: dict[str, Path] = {}
    for source in sources:
        if from_dir is not None and _REMOTE.search(from_dir):
            from components.ingest.run import fetch_upstream

            pinned = upstream(source)
            typer.echo(f"fetching {from_dir} at {pinned.commit[:12]} into {settings.cache_dir}", err=True)
            roots[source] = fetch_upstream(from_dir, pinned.commit, settings.cache_dir)
            continue
        root = Path(from_dir) if from_dir is not None else default_root(source, settings.datasets_dir)
        if not root.is_dir():
            raise UserError(f"{source}: source directory not found: {root}")
        roots[source] = root.resolve()
    return roots


def format_summary(table: pd.DataFrame, rows_in: dict[str, int]) -> str:
    """Rows per source and device, a subtotal per source, then the grand total."""
    lines = [f"{'source':<15}{'device':<26}{'rows':>10}{'rejects':>9}"]
    for source, group in table.groupby("source", sort=True):
        for device, rows, rejects in zip(group["device_id"], group["rows"], group["rejects"], strict=True):
            lines.append(f"{source:<15}{device:<26}{rows:>10}{rejects:>9}")
        lines.append(f"{source:<15}{'= total (rows in ' + str(rows_in.get(source, 0)) + ')':<26}"
                     f"{int(group['rows'].sum()):>10}{int(group['rejects'].sum()):>9}")
    lines.append(f"{'ALL':<15}{'':<26}{int(table['rows'].sum()):>10}{int(table['rejects'].sum()):>9}")
    return "\n".join(lines)


@clean_errors
def ingest_command(
    source: Annotated[
        list[str] | None, typer.Option("--source", "-s", help="source to ingest (repeatable)")
    ] = None,
    from_dir: Annotated[
        str | None, typer.Option("--from", help="local dir in upstream layout, or a git/http(s) URL to fetch "
                                                "at the pinned commit (one --source only)")
    ] = None,
    all_sources: Annotated[
        bool, typer.Option("--all", help="every source in params.yaml ingest.sources, from datasets_dir")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="output folder [data_dir/canonical]")] = None,
) -> None:
    """Read public sources into canonical measurements/kernels/rejects tables + summary.json."""
    from components.ingest.registry import SOURCES, check_source

    settings = prepared_settings()
    sources = list(source or [])
    if all_sources:
        if from_dir is not None:
            raise UserError("--all reads every source from datasets_dir; --from needs a single --source")
        sources = [*sources, *(params_sources(settings) or SOURCES)]
    if not sources:
        raise UserError(f"nothing to ingest: give --source NAME (one of {', '.join(SOURCES)}) or --all")
    sources = [check_source(s) for s in dict.fromkeys(sources)]
    out_dir = out or settings.data_dir / "canonical"

    from components.devices import load_catalog
    from components.ingest.base import IngestError
    from components.ingest.run import ingest_sources, summarise, unknown_devices, write_canonical

    try:
        roots = resolve_roots(sources, from_dir, settings)
        result = ingest_sources(sources, roots, load_catalog(), progress=lambda m: typer.echo(m, err=True))
    except IngestError as exc:
        raise UserError(str(exc)) from None
    write_canonical(result, out_dir)
    typer.echo(format_summary(summarise(result), result.rows_in))
    unknown = unknown_devices(result)
    if unknown:
        typer.echo(f"unknown devices (add them to the catalog): {', '.join(unknown)}", err=True)
    typer.echo(f"wrote {out_dir} (measurements.parquet, kernels.parquet, rejects.parquet, summary.json)")
