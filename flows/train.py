"""Prefect flow: train a model family on a split's train side, log it and register a version.

The task wraps ``components.training.stage.train_stage`` -- the same call as ``kernelcast train``
and the DVC ``train`` stage. Tabular targets fit as Ray tasks, the llm family with Ray Train; a
fit is not retried (a second attempt would register a second version).

    python -m flows.train [FAMILY] [SPLIT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.platform.config import Settings, get_settings
from components.training.stage import TrainInputs, TrainResult, train_stage


@task(name="train")
def train_task(inputs: TrainInputs, settings: Settings, params: dict[str, Any]) -> TrainResult:
    """``train_stage``: fit, score the test side, log one MLflow run, register, write registration.json."""
    return train_stage(inputs, settings, params, progress=print)


@flow(name="train", log_prints=True)
def train_flow(
    family: str = "tabular",
    split: str = "unseen-kernel",
    features_file: str | None = None,
    out_dir: str | None = None,
    register_version: bool = True,
    max_train_rows: int | None = None,
    use_ray: bool = True,
) -> dict[str, Any]:
    """Train ``family`` on ``split``; returns the run, the registered version and the test figures."""
    from components.platform.config import load_params

    settings = get_settings()
    inputs = TrainInputs(
        features_file=Path(features_file)
        if features_file
        else settings.data_dir / "features" / "features.parquet",
        family=family,
        split=split,
        out_dir=Path(out_dir) if out_dir else None,
        register=register_version,
        max_train_rows=max_train_rows,
        use_ray=use_ray,
    )
    result = train_task(inputs, settings, load_params(settings.params_file))
    return summary(result)


def summary(result: TrainResult) -> dict[str, Any]:
    """What a caller (the evaluate-and-promote flow, a log line) needs from a training run."""
    duration = result.report.get("targets", {}).get("duration_us", {})
    return {
        "family": result.family,
        "split": result.split,
        "fold": result.fold,
        "run_id": result.run_id,
        "model_uri": result.model_uri,
        "predictor_dir": str(result.predictor_dir),
        "registration_file": str(result.registration_file),
        "n_test": result.report.get("n"),
        "runtime_mape": duration.get("mape"),
        "within_10": duration.get("within_10"),
    }


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    with prefect_server(get_settings()):
        print(train_flow(*argv[:2]))


if __name__ == "__main__":
    main(sys.argv[1:])
