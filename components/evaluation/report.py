"""The gate's evaluation report: one candidate judged on every split params.yaml ``register.splits`` names.

Per split the candidate is scored one of two ways, and the report says which (``mode``):

- ``artifact``: the registered predictor itself, on the split's test side (rows it trained on are
  excluded by the harness). Used for the split it was trained on and for training-free families
  (the roofline has nothing to leak).
- ``refit``: the candidate's recipe (its own saved config) fitted on each fold's train side and
  scored on that fold's test side -- the only honest way to score a model on GPUs or sources it
  has seen (leave-one-GPU-out, the published splits). Train and test sides are capped
  (``register.evaluation``) so the gate stays affordable on 2 cores; the caps are in the report.

A split that cannot be scored is recorded with ``status`` "error" or "skipped" and a note, and the
report is ``complete: false`` -- which never promotes.

JSON shape::

    {"kind": "kernelcast-gate-report", "model", "model_name", "model_version", "family",
     "trained_split", "dataset_version", "complete", "caps", "seconds",
     "splits": {SPLIT: {"status": "ok"|"error"|"skipped", "mode": "artifact"|"refit", "folds": [...],
                        "n", "seconds", "metrics": {name: value}, "report": {harness JSON}, "note"}}}
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from components.common.sampling import unit_hash_series
from components.evaluation.folds import (
    Factory,
    FoldExecutor,
    FoldJob,
    FoldOutcome,
    report_columns,
    serial_fold_executor,
)
from components.evaluation.harness import (
    capped_rows,
    evaluate_frame,
    evaluate_predictor,
    flat_metrics,
    split_folds,
)
from components.evaluation.splits import Fold, unseen_gpu_devices, unseen_gpu_split

if TYPE_CHECKING:
    from components.models.base import Predictor
    from components.registry.gate import EvaluationCaps

REPORT_KIND = "kernelcast-gate-report"
# Builds a fold executor around a factory: ``functools.partial(folds.ray_fold_executor, start_ray=...)``
# runs refit folds as Ray tasks; None runs them one after the other in this process.
ExecutorFactory = Callable[[Factory], FoldExecutor]
REFIT_FAMILIES: tuple[str, ...] = ("tabular",)


def _refit(config: Any, family: str, train: pd.DataFrame, split: str) -> tuple[Any, float]:
    """Fit the candidate's own config on a train side, single-threaded (it may run inside a Ray task):
    the model's own fit, as the train stage runs it without Ray (no import of training: it sits above)."""
    from components.models.tabular import TabularPredictor
    from components.models.tabular_config import config_for_split

    if family not in REFIT_FAMILIES:
        raise ValueError(f"the {family} family is scored as it is, not refitted")
    started = time.perf_counter()
    predictor = TabularPredictor(config_for_split(config, split)).fit(train)
    return predictor, time.perf_counter() - started


def _score_as_is(predictor: Any, table: pd.DataFrame, job: FoldJob, model: str) -> FoldOutcome:
    """The artifact on one fold's capped test side (rows it trained on excluded by the harness)."""
    started = time.perf_counter()
    evaluation = evaluate_predictor(
        predictor,
        table,
        job.split,
        model=model,
        rows=capped_rows(job.fold.test, table, job.max_test_rows),
        canonical_dir=job.canonical_dir,
    )
    frame = evaluation.frame
    keep = report_columns(frame)  # as bench's refit folds keep (features stay behind)
    timing = {
        "split": job.split,
        "fold": job.fold.name,
        "family": job.family,
        "n_test": evaluation.report["n"],
        "excluded_seen": evaluation.report["excluded_seen"],
        "total_s": round(time.perf_counter() - started, 1),
    }
    return FoldOutcome(frame[keep], tuple(predictor.targets), timing)


def gpu_folds(table: pd.DataFrame, caps: EvaluationCaps) -> list[Fold]:
    """Leave-one-GPU-out folds under the caps: the GPUs ``gpu_folds`` names (those present), else at
    most ``max_gpu_folds`` GPUs with ``min_gpu_rows`` rows, drawn by hash of the device id (the same
    GPUs for every candidate, none picked by how well a model does on it)."""
    counts = unseen_gpu_devices(table, 1)
    eligible = counts.loc[counts["rows"] >= caps.min_gpu_rows, "device_id"].astype(str)
    if caps.gpu_folds:
        chosen = [d for d in caps.gpu_folds if d in set(counts["device_id"])]
    else:
        ranked = (
            eligible.iloc[unit_hash_series(eligible, "gate-gpu").argsort(kind="stable")]
            if len(eligible)
            else eligible
        )
        chosen = list(ranked[: caps.max_gpu_folds] if caps.max_gpu_folds else ranked)
    if not chosen:
        raise ValueError(
            f"no GPU with at least {caps.min_gpu_rows} rows to hold out"
            + (f" (none of {', '.join(caps.gpu_folds)} is in the table)" if caps.gpu_folds else "")
        )
    return unseen_gpu_split(table, 1, devices=tuple(chosen))


def _folds(table: pd.DataFrame, split: str, caps: EvaluationCaps) -> list[Fold]:
    return gpu_folds(table, caps) if split == "unseen-gpu" else split_folds(table, split)


def _split_metrics(split: str, report: dict[str, Any], frame: pd.DataFrame) -> dict[str, float]:
    metrics = flat_metrics(report)
    if split == "unseen-gpu" and "pred_duration_us" in frame.columns:
        per_gpu = [
            figures["duration_us"]["mape"]
            for figures in report.get("per_device", {}).values()
            if figures.get("duration_us", {}).get("mape") is not None
        ]
        if per_gpu:
            metrics["median_gpu_runtime_mape"] = float(statistics.median(per_gpu))
            metrics["worst_gpu_runtime_mape"] = float(max(per_gpu))
    return metrics


def evaluate_split(
    predictor: Predictor,
    table: pd.DataFrame,
    split: str,
    *,
    mode: str,
    caps: EvaluationCaps,
    model: str,
    canonical_dir: Path | None,
    executor_factory: ExecutorFactory | None = None,
    on_frame: Callable[[str, pd.DataFrame], None] | None = None,
) -> dict[str, Any]:
    """One split's entry of the gate report (raises on a split the table cannot build). ``on_frame`` gets
    the split's scored rows (the evaluate stage draws its plots from them)."""
    started = time.perf_counter()
    folds = _folds(table, split, caps)
    family = getattr(predictor, "family", "model")
    jobs = [FoldJob(split, family, fold, caps.max_test_rows, canonical_dir) for fold in folds]
    if mode == "refit":
        config = getattr(predictor, "config", None)
        if config is None:
            raise ValueError(f"the {family} predictor carries no config to refit")
        from dataclasses import replace

        factory: Factory = functools.partial(_refit, replace(config, max_train_rows=caps.max_train_rows))
        parallel = executor_factory is not None and len(jobs) > 1
        executor = executor_factory(factory) if parallel else serial_fold_executor(factory)
        outcomes = executor(table, jobs, lambda _outcome: None)
    else:  # the artifact itself: no train side to slice (run_fold would copy it for nothing)
        outcomes = [_score_as_is(predictor, table, job, model) for job in jobs]
    if len(outcomes) != len(jobs):
        raise RuntimeError(f"{len(jobs) - len(outcomes)} of {len(jobs)} folds returned nothing")
    frame = pd.concat([o.frame for o in outcomes]) if outcomes else pd.DataFrame()
    targets = tuple(sorted({t for o in outcomes for t in o.targets}))
    excluded = sum(
        int(o.timing.get("excluded_seen", 0)) for o in outcomes
    )  # refit folds never saw their test
    report = evaluate_frame(frame, targets, model=model, split=split, excluded_seen=excluded)
    if on_frame is not None:
        on_frame(split, frame)
    return {
        "status": "ok",
        "mode": mode,
        "folds": [fold.name for fold in folds],
        "n": report["n"],
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": _split_metrics(split, report, frame),
        "report": report,
        "timings": [o.timing for o in outcomes],
        "note": None,
    }


def split_mode(predictor: Predictor, split: str, trained_split: str | None) -> str | None:
    """``artifact``, ``refit`` or None (the family cannot be refitted affordably: not evaluated)."""
    if not predictor.trained_on or split == trained_split:
        return "artifact"
    if getattr(predictor, "family", None) in REFIT_FAMILIES:
        return "refit"
    return None


def _error_entry(exc: BaseException, mode: str | None) -> dict[str, Any]:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return {"status": "error", "mode": mode, "metrics": {}, "note": f"{type(exc).__name__}: {message}"}


def _say(progress: Callable[[str], None], split: str, entry: dict[str, Any]) -> None:
    progress(
        f"{split}: {entry['status']}"
        + (
            f" ({entry['mode']}, n={entry['n']}, {entry['seconds']} s)"
            if entry["status"] == "ok"
            else f" ({entry['note']})"
        )
    )


class _SideEntries:
    """Gate entries computed in spawned processes while the caller scores the other splits: the op engine's
    splits in one, the serving splits (they read only the candidate's op engine, loaded there from its folder)
    in another. Processes, not threads: both are CPU-bound Python. Two, not one: each chain is ~2 minutes of a
    core on its own, so in one process the two chains ran one after the other and ended the stage with a core
    idle (docs/pipeline-time.md). A group with no split starts no process."""

    def __init__(
        self, splits: list[str], canonical_dir: Path | None, serving: list[str] = (), predictor: Any = None
    ) -> None:
        engine = (getattr(predictor, "family", None), getattr(predictor, "opmodel_dir", None))
        groups = [
            [(s, _opmodel_entry, (s, canonical_dir)) for s in splits],
            [(s, _serving_side_entry, (s, *engine)) for s in serving],
        ]
        self._pools = [_spawned_pool() for group in groups if group]
        self._futures = {
            split: pool.submit(function, *args)
            for pool, group in zip(self._pools, (g for g in groups if g), strict=True)
            for split, function, args in group
        }

    def results(self) -> dict[str, dict[str, Any]]:
        """Each split's entry, waiting for those still running; a crashed worker is that split's error."""
        out = {}
        for split, future in self._futures.items():
            try:
                out[split] = future.result()
            except (
                Exception
            ) as exc:  # the worker died (e.g. out of memory): the split is an error, not a crash
                out[split] = _error_entry(exc, "refit")
        for pool in self._pools:
            pool.shutdown()
        return out

    def abandon(self) -> None:
        """The caller failed: stop the side processes now rather than wait for their entries."""
        for pool in self._pools:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)


def _spawned_pool() -> Any:
    """One spawned worker process (a fresh interpreter: no fork of the caller's threads and Ray state)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def _opmodel_entry(split: str, canonical_dir: Path | None) -> dict[str, Any]:
    """The op engine's split, on the state folder's measured store (built when missing)."""
    from components.evaluation.opmodel_bench import gate_entry
    from components.opmodel.train import ensure_store
    from components.platform.config import get_settings

    settings = get_settings()
    try:
        store = ensure_store(settings)
        if store is None:
            raise FileNotFoundError(f"no measured store and no {settings.datasets_dir / 'aiconfigurator'}")
        return gate_entry(split, store, Path(settings.datasets_dir))
    except Exception as exc:
        return _error_entry(exc, "refit")


def _serving_entry(split: str, predictor: Predictor) -> dict[str, Any]:
    """A serving split (components/deployments/bench.py) with the candidate's op engine, the datasets in
    place."""
    from components.deployments.bench import bench_engine, gate_entry
    from components.devices import load_catalog
    from components.platform.config import get_settings

    try:
        return gate_entry(split, Path(get_settings().datasets_dir), load_catalog(), bench_engine(predictor))
    except Exception as exc:
        return _error_entry(exc, "refit")


def _serving_side_entry(split: str, family: str | None, opmodel_dir: Any) -> dict[str, Any]:
    """A serving split in the side process: the candidate's op engine is all it reads of the candidate (its
    family and engine folder, as ``opmodel.loading.engine_for`` picks the engine), so no predictor is sent."""
    from types import SimpleNamespace

    return _serving_entry(split, SimpleNamespace(family=family, opmodel_dir=opmodel_dir))


def _candidate_entry(
    predictor: Predictor,
    table: pd.DataFrame,
    split: str,
    caps: EvaluationCaps,
    *,
    model: str,
    trained_split: str | None,
    canonical_dir: Path | None,
    executor_factory: ExecutorFactory | None,
    on_frame: Callable[[str, pd.DataFrame], None] | None,
) -> dict[str, Any]:
    """One split's gate entry for the candidate: a serving split, a skipped one, or the harness's score."""
    from components.platform.config import SERVING_SPLITS

    mode = split_mode(predictor, split, trained_split)
    if split in SERVING_SPLITS:  # LLM deployments: the composition on measured serving runs
        return _serving_entry(split, predictor)
    if mode is None:
        return {
            "status": "skipped",
            "mode": None,
            "metrics": {},
            "note": f"the {predictor.family} family is not refitted per fold by the gate "
            f"(trained on {trained_split}); only that split can be scored",
        }
    try:
        return evaluate_split(
            predictor,
            table,
            split,
            mode=mode,
            caps=caps,
            model=model,
            canonical_dir=canonical_dir,
            executor_factory=executor_factory,
            on_frame=on_frame,
        )
    except Exception as exc:
        return _error_entry(exc, mode)


def gate_report(
    predictor: Predictor,
    table: pd.DataFrame,
    splits: Sequence[str],
    caps: EvaluationCaps,
    *,
    model: str,
    trained_split: str | None,
    canonical_dir: Path | None = None,
    executor_factory: ExecutorFactory | None = None,
    identity: dict[str, Any] | None = None,
    progress: Callable[[str], None] = lambda _line: None,
    on_frame: Callable[[str, pd.DataFrame], None] | None = None,
) -> dict[str, Any]:
    """The gate report for ``predictor`` over ``splits`` (see the module docstring); ``on_frame`` gets each
    scored split's rows."""
    started = time.perf_counter()
    entries: dict[str, Any] = {}
    from components.evaluation.opmodel_bench import OPMODEL_SPLITS

    # The op engine's splits read neither the candidate nor the feature table, the serving splits only its op
    # engine: they run in processes of their own (one per kind) beside the candidate's other splits.
    from components.platform.config import SERVING_SPLITS

    serving = [s for s in splits if s in SERVING_SPLITS]
    side = _SideEntries([s for s in splits if s in OPMODEL_SPLITS], canonical_dir, serving, predictor)
    try:
        for split in (s for s in splits if s not in OPMODEL_SPLITS and s not in serving):  # the rest: `side`
            entries[split] = _candidate_entry(
                predictor,
                table,
                split,
                caps,
                model=model,
                trained_split=trained_split,
                canonical_dir=canonical_dir,
                executor_factory=executor_factory,
                on_frame=on_frame,
            )
            _say(progress, split, entries[split])
    except BaseException:
        side.abandon()
        raise
    for split, entry in side.results().items():
        entries[split] = entry
        _say(progress, split, entry)
    entries = {split: entries[split] for split in splits}
    return {
        "kind": REPORT_KIND,
        **(identity or {}),
        "model": model,
        "family": getattr(predictor, "family", None),
        "trained_split": trained_split,
        "complete": all(entries[s]["status"] == "ok" for s in splits) and bool(splits),
        "caps": {**vars(caps), "gpu_folds": list(caps.gpu_folds)},
        "seconds": round(time.perf_counter() - started, 1),
        "splits": entries,
    }
