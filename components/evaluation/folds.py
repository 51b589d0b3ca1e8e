"""Folds of the accuracy bench: choose them, fit and score each one, run them one by one or as Ray tasks.

A fold job fits one family on the fold's train side (``Factory``) and scores its (capped) test
side with the harness, sending back only the scored rows' keys, targets and predictions. Folds
are independent: a ``FoldExecutor`` runs them as Ray tasks side by side, or one by one.
Leave-one-GPU-out (``unseen-gpu``) has one fold per GPU with at least ``min_gpu_rows`` rows (or
the GPUs named), each holding that GPU out of every source's training rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from components.evaluation.harness import capped_rows, evaluate_predictor, silent_rows_reasoned, split_folds
from components.evaluation.splits import Fold, unseen_gpu_devices, unseen_gpu_split
from components.features.build import IDENTITY_COLUMNS, LABEL_COLUMNS
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS, Predictor

# A factory fits one family on a train side: (family, train rows, split) -> (predictor, seconds).
Factory = Callable[[str, pd.DataFrame, str], tuple[Predictor, float]]

DEFAULT_MIN_GPU_ROWS = 1000  # params.yaml train.bench_min_gpu_rows
# Every GPU with enough rows is held out, also one whose sources measured no other GPU (its fold
# then has no row of those sources in training: unseen GPU and unseen source; the note says so).
BENCH_MIN_DEVICES_PER_SOURCE = 1
# Columns a fold sends back for the report (the feature columns stay where they were computed).
REPORT_COLUMNS: tuple[str, ...] = (*IDENTITY_COLUMNS, CLASS_TARGET, *LABEL_COLUMNS, *NUMERIC_TARGETS)


def report_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of an evaluated fold the report keeps: identity, targets and every ``pred_*``."""
    return [c for c in frame.columns if c in REPORT_COLUMNS or str(c).startswith("pred_")]


@dataclass(frozen=True)
class FoldJob:
    split: str
    family: str
    fold: Fold
    max_test_rows: int | None = None
    canonical_dir: Path | None = None


@dataclass
class FoldOutcome:
    frame: pd.DataFrame  # the scored test rows: keys, targets, pred_* columns
    targets: tuple[str, ...]
    timing: dict[str, Any]


# Runs fold jobs on the table; calls ``on_done`` as each finishes; returns outcomes in job order.
FoldExecutor = Callable[[pd.DataFrame, Sequence[FoldJob], Callable[[FoldOutcome], None]], list[FoldOutcome]]


def run_fold(table: pd.DataFrame, job: FoldJob, factory: Factory) -> FoldOutcome:
    """Fit ``job.family`` on the fold's train side, score its (capped) test side."""
    from components.models.roofline_class import NO_PROGRAMS_ASKED, program_rows

    started = time.perf_counter()
    train = table.loc[job.fold.train]
    if job.canonical_dir is not None:  # where a family that reads source/launch columns joins them from
        train.attrs["canonical_dir"] = str(job.canonical_dir)
    rows = capped_rows(job.fold.test, table, job.max_test_rows)
    if not program_rows(table.loc[rows]).any():  # a class model would score nothing here: not fitted
        train.attrs[NO_PROGRAMS_ASKED] = True  # (118 of an unseen-gpu fold's 132 CPU-s went to it)
    predictor, fit_seconds = factory(job.family, train, job.split)
    evaluation = evaluate_predictor(
        predictor, table, job.split, model=job.family, rows=rows, canonical_dir=job.canonical_dir
    )
    report = evaluation.report
    frame = evaluation.frame
    keep = report_columns(frame)
    timing = {
        "split": job.split,
        "fold": job.fold.name,
        "family": job.family,
        "n_train": len(predictor.trained_on),
        "n_test": report["n"],
        "coverage": report.get("coverage"),
        "fit_s": round(fit_seconds, 1),
        "total_s": round(time.perf_counter() - started, 1),
    }
    from components.models.cuda_runtime import unpredicted_reasons

    # Test rows measured but left without a runtime, by reason: the predictor's, else the one
    # ``silent_rows_reasoned`` names (as ``evaluate`` counts them), never a bare count.
    timing["unpredicted_duration_us"] = unpredicted_reasons(silent_rows_reasoned(frame))
    return FoldOutcome(frame[keep], tuple(predictor.targets), timing)


def serial_fold_executor(factory: Factory) -> FoldExecutor:
    """Folds one after the other in this process."""

    def run(
        table: pd.DataFrame, jobs: Sequence[FoldJob], on_done: Callable[[FoldOutcome], None]
    ) -> list[FoldOutcome]:
        outcomes = []
        for job in jobs:
            outcomes.append(run_fold(table, job, factory))
            on_done(outcomes[-1])
        return outcomes

    return run


def _fold_task(table: pd.DataFrame, job: FoldJob, factory: Factory) -> FoldOutcome:
    return run_fold(table, job, factory)


def ray_fold_executor(factory: Factory, start_ray: Callable[[], None]) -> FoldExecutor:
    """Each fold as one single-CPU Ray task; the table goes to the object store once per call.

    ``factory`` runs inside the task, so it must fit in-process (no nested Ray tasks): the caller
    hands the single-threaded variant. ``start_ray`` is the project's Ray start-up (idempotent).
    """

    def run(
        table: pd.DataFrame, jobs: Sequence[FoldJob], on_done: Callable[[FoldOutcome], None]
    ) -> list[FoldOutcome]:
        import ray

        start_ray()
        table_ref = ray.put(table)
        task = ray.remote(num_cpus=1, max_retries=0)(_fold_task)
        refs = [task.remote(table_ref, job, factory) for job in jobs]
        position = {ref: i for i, ref in enumerate(refs)}
        outcomes: list[FoldOutcome | None] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                outcome = ray.get(done[0])
                outcomes[position[done[0]]] = outcome
                on_done(outcome)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            del table_ref
        return [o for o in outcomes if o is not None]

    return run


def select_folds(
    table: pd.DataFrame,
    split: str,
    min_gpu_rows: int = DEFAULT_MIN_GPU_ROWS,
    devices: Sequence[str] | None = None,
) -> list[Fold]:
    """The split's folds; for leave-one-GPU-out, one per GPU with >= ``min_gpu_rows`` rows, or the
    GPUs named in ``devices`` (catalog ids) whatever their size."""
    if split != "unseen-gpu":
        return split_folds(table, split)
    folds = unseen_gpu_split(
        table,
        BENCH_MIN_DEVICES_PER_SOURCE,
        min_rows=min_gpu_rows,
        devices=tuple(devices) if devices else None,
    )
    if not folds:
        counts = unseen_gpu_devices(table, BENCH_MIN_DEVICES_PER_SOURCE)
        largest = counts.assign(_neg=-counts["rows"]).sort_values(["_neg", "device_id"]).head(3)
        raise ValueError(
            f"no GPU has at least {min_gpu_rows} rows (largest: "
            + (
                ", ".join(f"{d} {n}" for d, n in zip(largest["device_id"], largest["rows"], strict=False))
                or "none"
            )
            + ")"
        )
    return folds


def unseen_gpu_note(table: pd.DataFrame, folds: list[Fold], min_gpu_rows: int, chosen: bool) -> str:
    """Which GPUs were held out (rows per source) and which were left out for having too few rows."""
    counts = unseen_gpu_devices(table, BENCH_MIN_DEVICES_PER_SOURCE).set_index("device_id")
    devices_per_source = table.groupby("source")["device_id"].nunique()
    held = [f.name.split(":", 1)[1] for f in folds]

    def describe(device: str) -> str:
        row = counts.loc[device]
        sources = [c.removeprefix("rows_") for c in counts.columns if c.startswith("rows_") and row[c]]
        alone = [s for s in sources if devices_per_source.get(s, 0) < 2]
        text = f"{device} ({', '.join(s + ' ' + str(int(row['rows_' + s])) for s in sources)})"
        return text + (f" [only GPU of {', '.join(alone)}: that source is unseen too]" if alone else "")

    rule = "the GPUs asked for" if chosen else f"every GPU with at least {min_gpu_rows} rows"
    note = f"unseen-gpu: {len(folds)} leave-one-GPU-out folds, {rule}: {'; '.join(describe(d) for d in held)}"
    below = counts[(counts["rows"] < min_gpu_rows) & ~counts.index.isin(held)]
    if len(below) and not chosen:
        note += "; fewer rows, not held out: " + ", ".join(f"{d} {int(n)}" for d, n in below["rows"].items())
    return note
