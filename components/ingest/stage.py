"""The ingest stage: public sources in their upstream layout -> the canonical tables.

``ingest_stage`` is the one function behind ``kernelcast ingest``, the DVC ``ingest`` stage and the
ingest task of ``flows/ingest_validate.py``. Each source is read from a local directory (default
``<datasets_dir>/<source>``, or the project's own ``profiled-data/``) or fetched from its upstream
repository at the commit pinned in ``components.ingest.registry``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

_REMOTE = re.compile(r"^(https?|git|ssh|file)://|^git@|\.git$")
# Names the evaluate stage accepts for our own profiled measurements, beside the source name.
ALIASES: dict[str, str] = {"profiled": "kernelcast"}


@dataclass(frozen=True)
class IngestInputs:
    sources: tuple[str, ...]
    out_dir: Path
    datasets_dir: Path
    cache_dir: Path  # where upstream repositories are fetched to
    from_location: str | None = None  # a directory in upstream layout or a git/http(s) URL (one source)


@dataclass(frozen=True)
class IngestStageResult:
    out_dir: Path
    roots: dict[str, Path]
    rows_in: dict[str, int]
    summary: pd.DataFrame  # rows and rejects per (source, device)
    unknown_devices: list[str]
    paths: dict[str, Path] = field(default_factory=dict)
    # The canonical folder after this ingest: partitions written now, partitions kept from before
    # (other sources and runs, untouched), and its total measurement rows.
    replaced: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    total_rows: int = 0

    @property
    def rows(self) -> int:
        return int(self.summary["rows"].sum()) if len(self.summary) else 0


def is_remote(location: str) -> bool:
    return bool(_REMOTE.search(location))


def resolve_roots(
    sources: list[str] | tuple[str, ...],
    from_location: str | None,
    datasets_dir: Path,
    cache_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Where each source is read from: ``from_location`` (a directory, or a URL fetched at the pinned
    commit), else its default folder. A ValueError names a missing directory."""
    from components.ingest.registry import FILE_SOURCES, default_root, upstream

    if from_location is not None and len(sources) != 1:
        raise ValueError("--from reads one source: give exactly one --source with it")
    roots: dict[str, Path] = {}
    for source in sources:
        if from_location is not None and is_remote(from_location):
            from components.ingest.run import fetch_upstream

            pinned = upstream(source)
            if progress:
                progress(f"fetching {from_location} at {pinned.commit[:12]} into {cache_dir}")
            roots[source] = fetch_upstream(from_location, pinned.commit, cache_dir)
            continue
        root = Path(from_location) if from_location is not None else default_root(source, datasets_dir)
        if source in FILE_SOURCES and root.is_file():
            roots[source] = root.resolve()
            continue
        if not root.is_dir():
            raise ValueError(f"{source}: source directory not found: {root}")
        roots[source] = root.resolve()
    return roots


def ingest_tables(
    sources: list[str] | tuple[str, ...],
    roots: dict[str, Path],
    catalog: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Adapters -> merged canonical tables in memory (``components.ingest.run.IngestResult``)."""
    from components.devices import load_catalog
    from components.ingest.registry import check_source
    from components.ingest.run import ingest_sources

    names = [check_source(ALIASES.get(s, s)) for s in dict.fromkeys(sources)]
    roots = {ALIASES.get(s, s): Path(r) for s, r in roots.items()}
    return ingest_sources(names, roots, catalog if catalog is not None else load_catalog(), progress=progress)


def ingest_stage(
    inputs: IngestInputs, catalog: Any = None, progress: Callable[[str], None] | None = None
) -> IngestStageResult:
    """Read ``inputs.sources`` into the canonical folder: their partitions (a profiled run's: that
    run's) are replaced, every other source's rows kept, and the merged
    measurements/kernels/rejects.parquet and summary.json rewritten -- one atomic swap of the folder.

    Raises ``components.ingest.base.IngestError`` when a source cannot be read at all, ValueError
    for an unknown source or a missing directory.
    """
    from components.ingest.registry import check_source
    from components.ingest.run import commit_canonical, summarise, unknown_devices

    if not inputs.sources:
        raise ValueError("nothing to ingest: no sources given")
    sources = [check_source(s) for s in dict.fromkeys(inputs.sources)]
    roots = resolve_roots(sources, inputs.from_location, inputs.datasets_dir, inputs.cache_dir, progress)
    result = ingest_tables(sources, roots, catalog, progress)
    committed = commit_canonical(result, inputs.out_dir)
    return IngestStageResult(
        out_dir=Path(inputs.out_dir),
        roots=roots,
        rows_in=dict(result.rows_in),
        summary=summarise(result),
        unknown_devices=unknown_devices(result),
        paths=committed.paths,
        replaced=committed.replaced,
        kept=committed.kept,
        total_rows=len(committed.merged.measurements),
    )
