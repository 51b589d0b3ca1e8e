"""Prefect flow ``profile_device``: profile a device through Ray, validate the rows (GX), append
them to the versioned dataset.

Tasks: ``profile`` (``components.profiling.run.profile_run``: one Ray job per suite chunk, placed on
a node of the device's accelerator type), ``validate_rows`` (GX on every row; failures quarantined
beside the run), ``append`` (the run folder copied atomically into the dataset folder, default
``profiled-data/``, then versioned: ``dvc add`` when the folder is DVC-tracked on its own; the
``ingest`` stage of ``dvc.yaml`` depends on ``profiled-data`` either way, so ``dvc repro`` re-ingests).
``retrain_on_new_gpu`` calls ``profile_device`` first.

    python -m flows.profile DEVICE [BACKEND] [SUITE]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.common.atomic import atomic_write_dir, atomic_write_text
from components.platform.config import PROJECT_ROOT, get_settings
from components.profiling.run import ProfileInputs, ProfileResult, profile_params, profile_run
from components.validation.profiled import validate_rows

DEFAULT_DATASET = PROJECT_ROOT / "profiled-data"


def _active_chooser(model: str | None):
    """The active-learning chooser when a model is given.

    It asks ``model``, and lives in serving, above profiling.
    """
    if model is None:
        return None
    from components.serving.active import interval_selector

    return interval_selector


@task(name="profile")
def profile_task(inputs: ProfileInputs) -> ProfileResult:
    """``profile_run``: the suite on the device as Ray jobs, into a run folder."""
    return profile_run(inputs)


@task(name="validate-rows")
def validate_task(run_dir: Path) -> dict[str, Any]:
    """GX on the run's rows; writes ``validation.json`` and ``quarantine.jsonl`` into the run folder."""
    from components.profiling.rows import read_rows

    _valid, quarantine, summary = validate_rows(read_rows(run_dir))
    atomic_write_text(
        run_dir / "quarantine.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in quarantine)
    )
    atomic_write_text(run_dir / "validation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _dvc_root(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        if (parent / ".dvc").is_dir():
            return parent
    return None


def version_dataset(dataset_dir: Path) -> str:
    """``dvc add`` the dataset folder when DVC tracks it on its own (``<folder>.dvc``); what was done."""
    pointer = dataset_dir.with_name(dataset_dir.name + ".dvc")
    root = _dvc_root(dataset_dir.resolve())
    if root is None:
        return "not in a DVC repository"
    if not pointer.exists():
        return "dvc.yaml stage deps cover it (dvc repro re-ingests)"
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "add", str(dataset_dir.resolve())],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"dvc add {dataset_dir} failed: {(result.stderr or result.stdout).strip()[-500:]}")
    return f"dvc add -> {pointer.name}"


@task(name="append", retries=2, retry_delay_seconds=5)
def append_task(run_dir: Path, dataset_dir: Path) -> dict[str, Any]:
    """Copy the run folder into the dataset folder atomically (a run is added whole or not at all)."""
    target = dataset_dir / run_dir.name
    if target.resolve() != run_dir.resolve():
        atomic_write_dir(
            target,
            lambda tmp: shutil.copytree(
                run_dir, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("raw")
            ),
            replace_existing=True,
        )
    return {"appended_to": str(target), "versioned": version_dataset(dataset_dir)}


@flow(name="profile-device", log_prints=True)
def profile_device(
    device: str | None = None,
    backend: str = "events",
    suite: str = "smoke",
    *,
    dataset_dir: str | None = None,
    out_dir: str | None = None,
    ray_address: str | None = None,
    chunk_size: int | None = None,
    timeout_s: float | None = None,
    model: str | None = None,
    warmup: int | None = None,
    repeats: int | None = None,
    append: bool = True,
) -> dict[str, Any]:
    """Profile ``device`` (catalog GPU, or ``host``) with ``backend`` on ``suite``; validate; append.

    ``device`` None: the GPU this flow run's machine sees (a deployment on a GPU node). Host runs are
    appended only to an explicitly given ``dataset_dir`` (CPU rows are not GPU data).
    Returns a summary: run folder, rows, validation counts, where the rows went, the Ray report.
    """
    if device is None:
        from components.profiling.schedule import local_device

        device = local_device()
    defaults = profile_params()  # params.yaml `profile:` fills what the caller leaves out
    inputs = ProfileInputs(
        device=device,
        backend=backend,
        suite=suite,
        out_dir=Path(out_dir) if out_dir else None,
        chunk_size=chunk_size or int(defaults.get("chunk_size", 8)),
        timeout_s=timeout_s or float(defaults.get("timeout_s", 3600)),
        max_retries=int(defaults.get("max_retries", 3)),
        l2_flush=bool(defaults.get("l2_flush", True)),
        ray_address=ray_address,
        model=model,
        chooser=_active_chooser(model),
        warmup=warmup,
        repeats=repeats,
    )
    result = profile_task(inputs)
    validation = validate_task(result.run_dir)
    summary: dict[str, Any] = {
        "run_dir": str(result.run_dir),
        "rows": result.manifest["rows"],
        "validation": validation,
        "report": result.report,
        "status": result.manifest["status"],
    }
    target = Path(dataset_dir) if dataset_dir else (None if device == "host" else DEFAULT_DATASET)
    if append and target is not None and validation["rows_valid"]:
        summary.update(append_task(result.run_dir, target))
    print(
        f"profiled {device} ({backend}, {suite}): {summary['rows']} rows, {validation['rows_valid']} valid, "
        f"{validation['rows_quarantined']} quarantined -> {summary.get('appended_to', result.run_dir)}"
    )
    return summary


# The deployment name in infra/prefect.yaml.
profile_flow = profile_device


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    if not argv:
        raise SystemExit("usage: python -m flows.profile DEVICE [BACKEND] [SUITE]")
    with prefect_server(get_settings()):
        print(profile_device(*argv[:3]))


if __name__ == "__main__":
    main(sys.argv[1:])
