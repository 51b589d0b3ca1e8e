"""Prefect flow: evaluate a trained version on the evaluation split, then gate it for ``champion``.

The tasks wrap ``components.evaluation.stage.evaluate_stage`` and
``components.registry.promote.promote_stage`` -- the calls behind ``kernelcast evaluate`` /
``kernelcast promote`` and the DVC ``evaluate`` / ``register`` stages. Promotion only talks to the
registry, so it retries transient I/O; evaluation does not.

    python -m flows.evaluate_and_promote REGISTRATION_JSON [EVAL_JSON]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from components.evaluation.stage import EvaluateInputs, EvaluateResult, evaluate_stage
from components.platform.config import Settings, get_settings
from components.registry.gate import GatePolicy
from components.registry.promote import PromoteInputs, PromoteResult, promote_stage
from flows.retry import transient_only


@task(name="evaluate")
def evaluate_task(
    inputs: EvaluateInputs, settings: Settings, params: dict[str, Any], ray_folds: bool = False
) -> EvaluateResult:
    """``evaluate_stage``: score the model, write the JSON report, log an evaluation run.

    ``ray_folds``: the gate's refit folds run as Ray tasks, one per (split fold, family).
    """
    executor = None
    if ray_folds:
        from functools import partial

        from components.evaluation.folds import ray_fold_executor
        from components.platform.runtime import ensure_ray

        executor = partial(ray_fold_executor, start_ray=lambda: ensure_ray(settings))
    return evaluate_stage(inputs, settings, params, executor)


@task(name="promote", retries=2, retry_delay_seconds=5, retry_condition_fn=transient_only)
def promote_task(inputs: PromoteInputs, thresholds: GatePolicy) -> PromoteResult:
    """``promote_stage``: challenger always; champion only through the params.yaml gate."""
    return promote_stage(inputs, thresholds)


@flow(name="evaluate-and-promote", log_prints=True)
def evaluate_and_promote_flow(
    registration_file: str,
    out_file: str | None = None,
    split: str = "unseen-kernel",
    promotion_report: str | None = None,
    features_file: str | None = None,
    fold_splits: list[str] | None = None,
    fold_families: list[str] | None = None,
) -> dict[str, Any]:
    """Evaluate the predictor a ``registration.json`` names on ``split``, then promote its version.

    ``fold_splits`` (e.g. ``["unseen-gpu"]``) also evaluates ``fold_families`` (default: the
    registered family and the roofline) on every fold of those splits, one Ray task per (fold,
    family) -- ``flows.evaluate_folds`` -- into ``reports/evaluation-folds.json``.
    Returns the evaluation's headline figures and the promotion outcome; a version that stays
    challenger is a result, not a failure.
    """
    from components.platform.config import load_params
    from components.registry.promote import gate_thresholds
    from components.registry.runs import read_registration

    settings = get_settings()
    params = load_params(settings.params_file)
    thresholds = gate_thresholds(params, str(settings.params_file))  # before the evaluation, not after
    registration = read_registration(Path(registration_file))
    out = Path(out_file) if out_file else settings.data_dir / "eval" / f"{registration.family}-{split}.json"
    evaluated = evaluate_task(
        EvaluateInputs(
            model=registration.predictor_dir,
            out_file=out,
            split=split,
            features_file=Path(features_file) if features_file else None,
        ),
        settings,
        params,
    )
    # The promotion gate's report (every split of params.yaml register.splits), attached to the
    # version as its eval_report: what promote_task judges.
    evaluate_task(
        EvaluateInputs(
            model=registration.predictor_dir,
            out_file=out.with_name(f"{registration.family}-gate.json"),
            gate=True,
            registration=Path(registration_file),
            features_file=Path(features_file) if features_file else None,
        ),
        settings,
        params,
        ray_folds=True,
    )
    folds = None
    if fold_splits:
        from flows.evaluate_folds import evaluate_folds_task, unseen_gpu_quality

        folds_report = evaluate_folds_task(
            str(features_file or settings.data_dir / "features" / "features.parquet"),
            fold_families or list(dict.fromkeys(["roofline", registration.family])),
            list(fold_splits),
            str(settings.reports_dir / "evaluation-folds.json"),
            settings,
            params,
        )
        folds = {
            "out_file": str(settings.reports_dir / "evaluation-folds.json"),
            "unseen_gpu": unseen_gpu_quality(folds_report, registration.family),
        }
    promoted = promote_task(
        PromoteInputs(
            tracking_uri=settings.tracking_uri(),
            registration=Path(registration_file),
            default_model=settings.registered_model,
            report=Path(promotion_report) if promotion_report else None,
        ),
        thresholds,
    )
    duration = evaluated.report.get("targets", {}).get("duration_us", {})
    return {
        "evaluation": {
            "out_file": str(evaluated.out_file),
            "run_id": evaluated.run_id,
            "n": evaluated.report.get("n"),
            "runtime_mape": duration.get("mape"),
            "within_10": duration.get("within_10"),
        },
        "promotion": promoted.to_json(),
        "folds": folds,
    }


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    if not argv:
        raise SystemExit("usage: python -m flows.evaluate_and_promote REGISTRATION_JSON [EVAL_JSON]")
    with prefect_server(get_settings()):
        print(evaluate_and_promote_flow(*argv[:2]))


if __name__ == "__main__":
    main(sys.argv[1:])
