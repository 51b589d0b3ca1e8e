"""The whole pipeline as one Prefect flow: each task reproduces one DVC stage, in order.

DVC owns *what* is versioned and whether a stage must rerun (its deps/params changed); Prefect
owns *running* it (ordering, retries, logs, the run history in the UI). Stages that parallelise
dispatch their work to Ray themselves (validation, features, training). A failed stage can be
rerun alone: ``kernelcast pipeline --from-stage features``.

Every stage's command (``kernelcast ingest``, ``validate``, ``features``, ``train``, ``evaluate``,
``promote``) calls the same stage function as the tasks of the per-stage flows
(``flows/ingest_validate.py``, ``features.py``, ``train.py``, ``evaluate_and_promote.py``); this flow
runs them through DVC instead, so an unchanged stage is skipped and every output is versioned.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TypedDict

from prefect import flow, task

from components.config import PROJECT_ROOT, Settings

STAGES: tuple[str, ...] = ("ingest", "validate", "static", "features", "train", "evaluate", "register")


class StageReport(TypedDict):
    stage: str
    seconds: float
    output_tail: str


class StageFailed(RuntimeError):
    """A DVC stage's command failed; carries the stage name and the end of its output."""


def _dvc() -> list[str]:
    """The dvc executable of this environment (the venv's, not whatever is first on PATH)."""
    local = Path(sys.executable).with_name("dvc")
    return [str(local)] if local.exists() else [shutil.which("dvc") or "dvc"]


def _stage_env() -> dict[str, str]:
    """Stage commands (``kernelcast ...``) must resolve to this venv's entry point."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@task(name="dvc-repro", retries=0)
def reproduce_stage(stage: str, project_root: str, force: bool = False) -> StageReport:
    """``dvc repro --single-item STAGE``: runs the stage only if its deps or params changed."""
    start = time.monotonic()
    command = [*_dvc(), "repro", "--single-item", stage] + (["--force"] if force else [])
    result = subprocess.run(command, cwd=project_root, env=_stage_env(), capture_output=True, text=True)
    tail = (result.stdout + result.stderr)[-4000:]
    print(tail)
    if result.returncode != 0:
        raise StageFailed(f"stage {stage!r} failed (exit {result.returncode}):\n{tail}")
    return {"stage": stage, "seconds": round(time.monotonic() - start, 1), "output_tail": tail[-800:]}


@task(name="dvc-push", retries=2, retry_delay_seconds=5)
def push_outputs(project_root: str) -> str:
    """Push every stage output to the default DVC remote (I/O: retried)."""
    result = subprocess.run([*_dvc(), "push"], cwd=project_root, env=_stage_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"dvc push failed:\n{result.stderr[-2000:]}")
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "pushed"


@flow(name="kernelcast-pipeline", log_prints=True)
def pipeline_flow(stages: list[str], project_root: str, force: bool = False, push: bool = True) -> list[StageReport]:
    """Reproduce ``stages`` in order; stop at the first failure (later stages need its outputs)."""
    reports = [reproduce_stage(stage, project_root, force) for stage in stages]
    if push:
        print(push_outputs(project_root))
    return reports


def select_stages(from_stage: str | None, only: list[str] | None) -> list[str]:
    if only:
        unknown = [s for s in only if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; stages are {', '.join(STAGES)}")
        return [s for s in STAGES if s in only]
    if from_stage is None:
        return list(STAGES)
    if from_stage not in STAGES:
        raise ValueError(f"unknown stage {from_stage!r}; stages are {', '.join(STAGES)}")
    return list(STAGES[STAGES.index(from_stage):])


def run_pipeline(settings: Settings, stages: list[str], force: bool = False, push: bool = True,
                 project_root: Path = PROJECT_ROOT) -> list[StageReport]:
    """Start (or reuse) the Prefect API, then run the flow."""
    from flows.runtime import prefect_server

    with prefect_server(settings):
        return pipeline_flow(stages, str(project_root), force, push)
