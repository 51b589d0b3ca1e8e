"""Prefect flow: validate the canonical tables, the work done as a Ray job.

The task hands the Ray job folder paths, not DataFrames: the job reads the canonical parquet
files where it runs, writes the validated folder, and returns only the summary dict -- so
~330k rows never travel through Prefect or Ray's object store. ``components.platform.runtime.ensure_ray``
connects to the configured cluster or starts a local Ray (reused when already initialised).

    python -m flows.validate [IN_DIR] [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.platform.config import Settings, get_settings


def validation_job(
    in_dir: str, out_dir: str, params_file: str, summary_path: str | None, drift_against: str | None
) -> dict[str, Any]:
    """What the Ray worker runs: the same stage as ``kernelcast validate``."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # two cores thrash otherwise
    from components.devices import load_catalog
    from components.platform.config import load_params, validate_params
    from components.validation.run import validate_dir

    params = load_params(Path(params_file))
    validate_params(params, source=params_file)
    summary = validate_dir(
        Path(in_dir),
        Path(out_dir),
        load_catalog(),
        params,
        Path(summary_path) if summary_path else None,
        Path(drift_against) if drift_against else None,
    )
    summary["worker_pid"] = os.getpid()
    return summary


@task(name="validate-measurements")
def validate_task(
    in_dir: str,
    out_dir: str,
    params_file: str,
    summary_path: str | None = None,
    drift_against: str | None = None,
) -> dict[str, Any]:
    """Run ``validation_job`` as a Ray task and wait for its summary."""
    import ray

    from components.platform.runtime import ensure_ray

    ensure_ray(get_settings())
    remote_job = ray.remote(num_cpus=1, max_retries=0)(validation_job)
    return ray.get(remote_job.remote(in_dir, out_dir, params_file, summary_path, drift_against))


@flow(name="validate", log_prints=False)
def validate_flow(
    in_dir: str | None = None,
    out_dir: str | None = None,
    summary_path: str | None = None,
    drift_against: str | None = None,
) -> dict[str, Any]:
    """Validate ``in_dir`` (default data_dir/canonical) into ``out_dir`` (default data_dir/validated).

    Returns the summary; a failed validation (``passed`` false) is reported, not raised, so the
    calling pipeline decides whether to stop.
    """
    settings: Settings = get_settings()
    return validate_task(
        in_dir or str(settings.data_dir / "canonical"),
        out_dir or str(settings.data_dir / "validated"),
        str(settings.params_file),
        summary_path,
        drift_against,
    )


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    settings = get_settings()
    with prefect_server(settings):
        summary = validate_flow(*(argv[:2]))
    print({k: summary[k] for k in ("rows_in", "rows_valid", "rows_quarantined", "failure_share", "passed")})


if __name__ == "__main__":
    main(sys.argv[1:])
