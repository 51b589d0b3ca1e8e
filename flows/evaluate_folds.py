"""Prefect task: the evaluation itself as Ray tasks, one per (split fold, family).

``components.evaluation.bench.run_accuracy_bench`` with ``folds.ray_fold_executor``: each fold of
each split (leave-one-GPU-out: one fold per GPU) is fitted and scored in its own single-CPU Ray
task, so the held-out-GPU evaluation scales out over a cluster. The report (the same JSON as
``kernelcast bench accuracy --json``) is written atomically; its unseen-gpu rows are what the
new-GPU flow quotes for a GPU that nobody can profile.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task

from components.platform.config import Settings

# Families whose folds each fit in one Ray task (the llm family is a Ray Train job of its own).
FOLD_FAMILIES: tuple[str, ...] = ("roofline", "tabular")


@task(name="evaluate-folds")
def evaluate_folds_task(
    features_file: str,
    families: list[str],
    splits: list[str],
    out_file: str,
    settings: Settings,
    params: dict[str, Any],
    min_gpu_rows: int | None = None,
    max_train_rows: int | None = None,
) -> dict[str, Any]:
    """Fit and score every (split fold, family) as Ray tasks; write ``out_file``; return the report."""
    from components.common.atomic import atomic_write_text
    from components.devices import load_catalog
    from components.evaluation.bench import run_accuracy_bench
    from components.evaluation.folds import ray_fold_executor
    from components.evaluation.harness import read_feature_table
    from components.evaluation.published import published_figures
    from components.models.tabular_config import TabularConfig
    from components.platform.runtime import ensure_ray
    from components.training.tabular import make_predictor

    train_params = params.get("train") or {}
    cap = max_train_rows or int(train_params.get("bench_max_train_rows", 40_000))
    gpu_rows = min_gpu_rows or int(train_params.get("bench_min_gpu_rows", 1_000))
    config = TabularConfig.from_params(params, max_train_rows=cap)
    table = read_feature_table(Path(features_file), settings.data_dir / "canonical")
    catalog = load_catalog()

    # Runs inside a Ray task: fits in-process (no nested Ray).
    def in_task(name: str, train, split: str):
        return make_predictor(name, train, split, config, settings, use_ray=False)

    executor = ray_fold_executor(in_task, lambda: ensure_ray(settings))
    published = published_figures(lambda n: catalog.resolve(n).id)
    result = run_accuracy_bench(
        table,
        families,
        splits,
        in_task,
        published,
        min_gpu_rows=gpu_rows,
        log=lambda line: print(line, flush=True),
        fold_executor=executor,
        parallel_families=[f for f in families if f in FOLD_FAMILIES],
    )
    payload = {"command": f"evaluate-folds families={families} splits={splits}", **result.to_json()}
    atomic_write_text(Path(out_file), json.dumps(payload, indent=2) + "\n")
    return payload


def unseen_gpu_quality(report: dict[str, Any], family: str | None = None) -> dict[str, Any] | None:
    """Runtime error on GPUs held out of training (leave-one-GPU-out) from an evaluation report:
    ``{"family", "mape", "within_10", "n", "source"}`` for ``family`` (default: the best), or None."""
    rows = [
        r
        for r in report.get("rows", [])
        if r.get("split") == "unseen-gpu"
        and r.get("target") == "duration_us"
        and not r.get("scope")
        and r.get("ours") is not None
    ]
    by_family: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = by_family.setdefault(row["family"], {"family": row["family"], "n": row.get("n")})
        entry[row["metric"]] = row["ours"]
    candidates = [v for k, v in by_family.items() if "mape" in v and (family is None or k == family)]
    if not candidates:
        return None
    return min(candidates, key=lambda v: v["mape"])


__all__ = ["FOLD_FAMILIES", "evaluate_folds_task", "unseen_gpu_quality"]
