"""Prefect flow: ingest the public sources into the canonical tables, then validate them.

Each task wraps the same stage function as the CLI command and the DVC stage
(``components.ingest.stage.ingest_stage``, ``components.validation.run.validate_dir`` through
``flows.validate``). Ingest reads files and may fetch repositories, so it retries transient I/O.

    python -m flows.ingest_validate [SOURCE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.ingest.stage import IngestInputs, IngestStageResult, ingest_stage
from components.platform.config import Settings, get_settings
from flows.retry import transient_only


@task(name="ingest", retries=2, retry_delay_seconds=10, retry_condition_fn=transient_only)
def ingest_task(inputs: IngestInputs) -> IngestStageResult:
    """``ingest_stage``: adapters -> canonical tables under ``inputs.out_dir``."""
    return ingest_stage(inputs, progress=print)


def ingest_inputs(
    settings: Settings,
    sources: list[str] | None = None,
    out_dir: str | None = None,
    from_location: str | None = None,
) -> IngestInputs:
    """Inputs for ``sources`` (default: params.yaml ``ingest.sources``, else every source), read from
    ``from_location`` when given (one source: ``kernelcast ingest --from``)."""
    from components.ingest.registry import SOURCES
    from components.platform.config import ingest_sources, load_params

    chosen = sources or ingest_sources(load_params(settings.params_file)) or list(SOURCES)
    return IngestInputs(
        sources=tuple(chosen),
        out_dir=Path(out_dir) if out_dir else settings.data_dir / "canonical",
        datasets_dir=settings.datasets_dir,
        cache_dir=settings.cache_dir,
        from_location=from_location,
    )


@flow(name="ingest-validate", log_prints=True)
def ingest_validate_flow(
    sources: list[str] | None = None,
    canonical_dir: str | None = None,
    validated_dir: str | None = None,
    summary_path: str | None = None,
    from_location: str | None = None,
) -> dict[str, Any]:
    """Ingest ``sources`` (from ``from_location`` when given: one source) into ``canonical_dir``, then
    validate into ``validated_dir`` (defaults under data_dir). Returns ``{"ingest": {...}, "validate":
    summary}``; a failed validation is reported (``passed`` false), not raised."""
    from flows.validate import validate_task

    settings = get_settings()
    inputs = ingest_inputs(settings, sources, canonical_dir, from_location)
    ingested = ingest_task(inputs)
    summary = validate_task(
        str(ingested.out_dir),
        validated_dir or str(settings.data_dir / "validated"),
        str(settings.params_file),
        summary_path,
    )
    return {
        "ingest": {
            "rows": ingested.rows,
            "rows_in": ingested.rows_in,
            "out_dir": str(ingested.out_dir),
            "unknown_devices": ingested.unknown_devices,
        },
        "validate": summary,
    }


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    with prefect_server(get_settings()):
        report = ingest_validate_flow(argv or None)
    print(report["ingest"], {k: report["validate"][k] for k in ("rows_in", "rows_quarantined", "passed")})


if __name__ == "__main__":
    main(sys.argv[1:])
