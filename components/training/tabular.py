"""Tabular fits as Ray tasks: one task per target, single-threaded each, so targets fit side by side.

The model code (``components.models.tabular``) stays pure; this module only decides where each
``TargetJob`` runs. A local Ray is started on first use (``components.platform.runtime.ensure_ray``); on a
cluster the same tasks go to its workers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from components.models.tabular import TabularPredictor
from components.models.tabular_config import TabularConfig, config_for_split
from components.models.tabular_fit import TargetJob, fit_job
from components.platform.config import Settings


def _fit_job_task(job: TargetJob) -> Any:
    # Ray workers inherit OMP_NUM_THREADS=1 from ensure_ray's runtime_env; n_jobs=1 is set in fit_job.
    return fit_job(job)


def ray_executor(settings: Settings):
    """An executor for ``TabularPredictor.fit`` that runs each target's fit as a Ray task."""

    def run(jobs: Sequence[TargetJob]) -> list[Any]:
        import ray

        from components.platform.runtime import ensure_ray

        ensure_ray(settings)
        remote = ray.remote(num_cpus=1, max_retries=0)(_fit_job_task)
        return ray.get([remote.remote(job) for job in jobs])

    return run


def serial_executor(jobs: Sequence[TargetJob]) -> list[Any]:
    return [fit_job(job) for job in jobs]


@dataclass(frozen=True)
class FitResult:
    predictor: TabularPredictor
    seconds: float
    n_train: int


def fit_tabular(
    train: pd.DataFrame, config: TabularConfig, settings: Settings | None = None, use_ray: bool = True
) -> FitResult:
    """Fit a ``TabularPredictor`` on the train side; targets run as Ray tasks unless ``use_ray=False``."""
    executor = ray_executor(settings) if use_ray and settings is not None else serial_executor
    started = time.perf_counter()
    predictor = TabularPredictor(config).fit(train, executor=executor)
    return FitResult(predictor, time.perf_counter() - started, len(predictor.trained_on))


# ---------------------------------------------------------------------- families, training runs


def make_predictor(
    family: str,
    train: pd.DataFrame,
    split: str | None,
    config: TabularConfig,
    settings: Settings | None,
    use_ray: bool = True,
) -> tuple[Any, float]:
    """Fit (or, for the roofline, just build) one family on a train side; returns (predictor, seconds)."""
    if family == "roofline":
        from components.models.roofline import RooflinePredictor

        # From source: measured counters would give the bolet task's answer away.
        return RooflinePredictor(mode="classic", use_measured_counters=False), 0.0
    if family == "tabular":
        result = fit_tabular(train, config_for_split(config, split), settings, use_ray=use_ray)
        return result.predictor, result.seconds
    if family == "llm":
        from components.training.llm import fit_for_bench

        started = time.perf_counter()
        predictor = fit_for_bench(train, split, settings)
        return predictor, time.perf_counter() - started
    raise ValueError(f"unknown model family {family!r}; choose roofline, tabular or llm")


def git_commit(root: Path) -> str:
    """HEAD of the project checkout (``components.registry.tracking.git_commit``: one definition)."""
    from components.registry.tracking import git_commit as head

    return head(root)
