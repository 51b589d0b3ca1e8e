"""Accuracy benchmark: every model family on the published splits, next to the published figures.

For each split and family: fit on the split's train side (hyper-parameters fixed in params.yaml;
the train side is subsampled deterministically to ``bench_max_train_rows`` on a 2-core box and the
table says so), score on the test side with the harness (seen rows excluded), and report the
figures the papers report, on the same scope (per op family for NeuSight, per GPU for PipeWeave).

Leave-one-GPU-out (``unseen-gpu``) runs one fold per GPU with at least ``bench_min_gpu_rows`` rows
(or the GPUs named), each holding that GPU out of every source's training rows; it reports a row
per (held-out GPU, source), per GPU overall, per source and per op family pooled over the held-out
GPUs, and the median and worst GPU.
Folds are independent: a ``FoldExecutor`` runs them as Ray tasks side by side, or one by one.
Every figure carries its coverage (rows predicted / rows asked), see ``harness``.

Choosing and running the folds: ``folds``; the papers' figures: ``published``; the Markdown table
and README section: ``bench_markdown``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from components.common.bench_rows import bench_row
from components.evaluation.folds import (
    DEFAULT_MIN_GPU_ROWS,
    Factory,
    FoldExecutor,
    FoldJob,
    FoldOutcome,
    select_folds,
    serial_fold_executor,
    unseen_gpu_note,
)
from components.evaluation.harness import class_label_column, roofline_report, target_reports
from components.evaluation.published import Published
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS

BENCH_SPLITS: tuple[str, ...] = (
    "neusight",
    "pipeweave-fp8",
    "bolet-roofline",
    "unseen-kernel",
    "unseen-gpu",
    "kernelbench",
)
# Whole PyTorch programs, scored from the canonical tables (not the feature table) by
# components.evaluation.kernelbench_bench; the CLI runs it beside run_accuracy_bench.
PROGRAM_SPLITS: tuple[str, ...] = ("kernelbench",)
# LLM deployments scored on measured serving runs (components.deployments.bench; SERVING_SPLITS, named in
# components.platform.config where the registry's gate checks them); run when asked by name.
NEUSIGHT_OP_FAMILIES: tuple[str, ...] = ("bmm", "linear", "elementwise")


@dataclass
class BenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "notes": self.notes, "timings": self.timings}


# Families whose folds may run side by side as Ray tasks: the roofline has nothing to fit, and the
# llm family is a Ray Train job itself.
PARALLEL_FAMILIES: tuple[str, ...] = ("tabular",)


def _scopes(frame: pd.DataFrame, split: str) -> list[tuple[str, pd.DataFrame]]:
    scopes: list[tuple[str, pd.DataFrame]] = [("", frame)]
    if split == "neusight":
        scopes += [(f"family={f}", frame[frame["family"] == f]) for f in NEUSIGHT_OP_FAMILIES]
    if split in ("neusight", "pipeweave-fp8"):
        scopes += [(f"device={d}", rows) for d, rows in frame.groupby("device_id", sort=True)]
    if split == "unseen-gpu":
        for device, rows in frame.groupby("device_id", sort=True):
            scopes.append((f"device={device}", rows))
            scopes += [(f"device={device},source={s}", part) for s, part in rows.groupby("source", sort=True)]
    if split in ("unseen-kernel", "random", "unseen-gpu"):
        scopes += [(f"source={s}", rows) for s, rows in frame.groupby("source", sort=True)]
    if split == "unseen-gpu" and "family" in frame.columns:  # op families, pooled over the held-out GPUs
        scopes += [(f"family={f}", rows) for f, rows in frame.groupby("family", sort=True)]
    if split == "amd-source":  # per HIP kernel on the held-out AMD GPU (components/evaluation/amd_source.py)
        from components.evaluation.amd_source import kernel_scopes

        scopes += kernel_scopes(frame)
    return scopes


def _target_name(target: str, scope: str) -> str:
    return f"{target}[{scope}]" if scope else target


def _gpu_summary(split: str, family: str, per_gpu: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and worst GPU of the per-GPU runtime figures.

    A GPU without a single prediction has no error to rank: the median row counts GPUs (``n`` =
    GPUs scored, ``n_asked`` = GPUs held out, coverage = their ratio), so such GPUs lower its
    coverage instead of vanishing; the worst-GPU row carries that GPU's rows and coverage.
    """
    scored = {
        d: r for d, r in per_gpu.items() if r.get("mape") is not None and math.isfinite(float(r["mape"]))
    }
    if not scored:
        return []
    mapes = {d: float(r["mape"]) for d, r in scored.items()}
    worst = max(mapes, key=lambda d: (mapes[d], d))
    n, asked = len(scored), len(per_gpu)
    median = {
        "mape": statistics.median(mapes.values()),
        "within_10": statistics.median(float(r["within_10"]) for r in scored.values()),
        "n": n,
        "n_asked": asked,
        "coverage": n / asked,
    }
    return [
        *_report_rows(split, family, "median GPU", "duration_us", median, ("mape", "within_10")),
        *_report_rows(split, family, f"worst GPU={worst}", "duration_us", scored[worst], ("mape",)),
    ]


def rows_for(
    frame: pd.DataFrame, split: str, family: str, targets: Sequence[str], published: list[Published]
) -> list[dict[str, Any]]:
    """Benchmark rows of one (split, family): our figure and its coverage per scope, the published
    figure beside it."""
    lookup = {(p.split, p.scope, p.target, p.metric): p for p in published}
    out: list[dict[str, Any]] = []
    numeric = tuple(t for t in targets if t in NUMERIC_TARGETS)
    per_gpu: dict[str, dict[str, Any]] = {}
    for scope, rows in _scopes(frame, split):
        if split == "bolet-roofline":
            break
        wanted = numeric if not scope else ("duration_us",)  # sub-scopes: runtime only, keeps the table short
        reports = target_reports(rows, tuple(t for t in wanted if t in numeric))
        for target, report in reports.items():
            if (
                split == "unseen-gpu"
                and target == "duration_us"
                and scope.startswith("device=")
                and "," not in scope
            ):
                per_gpu[scope.removeprefix("device=")] = report
            out += _report_rows(split, family, scope, target, report, ("mape", "within_10"), lookup)
    if split == "unseen-gpu":
        out += _gpu_summary(split, family, per_gpu)
    if CLASS_TARGET in targets and len(frame):
        report = roofline_report(frame, class_label_column(split))
        if report is not None and report["n"]:
            out += _report_rows(
                split, family, "", CLASS_TARGET, report, ("accuracy", "balanced_accuracy"), lookup
            )
    # A published figure we could not score (e.g. the test side lacks that GPU) still gets a row.
    seen = {(r["split"], r["target"], r["metric"]) for r in out}
    for pub in published:
        name = CLASS_TARGET if pub.target == CLASS_TARGET else _target_name(pub.target, pub.scope)
        if pub.split == split and (split, name, pub.metric) not in seen:
            scope = "" if pub.target == CLASS_TARGET else pub.scope
            out.append(
                _row(split, family, scope, pub.target, pub.metric, math.nan, 0, pub, n_asked=0, coverage=None)
            )
    return out


def _report_rows(
    split: str,
    family: str,
    scope: str,
    target: str,
    report: dict[str, Any],
    metrics: Sequence[str],
    lookup: dict[tuple[str, str, str, str], Published] | None = None,
) -> list[dict[str, Any]]:
    """One row per metric of a scored ``report`` (its ``n``, ``n_asked``, ``coverage``), each beside the
    published figure for it in ``lookup`` (None: no published figure applies)."""
    return [
        _row(
            split,
            family,
            scope,
            target,
            metric,
            report[metric],
            report["n"],
            (lookup or {}).get((split, scope, target, metric)),
            n_asked=report["n_asked"],
            coverage=report["coverage"],
        )
        for metric in metrics
    ]


def _row(
    split: str,
    family: str,
    scope: str,
    target: str,
    metric: str,
    ours: float | None,
    n: int,
    pub: Published | None,
    *,
    n_asked: int,
    coverage: float | None,
) -> dict[str, Any]:
    return bench_row(
        split,
        family,
        _target_name(target, scope),
        scope,
        metric,
        ours,
        n,
        n_asked,
        coverage=coverage,
        published=pub.value if pub else None,
        published_by=pub.by if pub else None,
    )


def run_accuracy_bench(
    table: pd.DataFrame,
    families: Sequence[str],
    splits: Sequence[str],
    factory: Factory,
    published: list[Published],
    *,
    min_gpu_rows: int = DEFAULT_MIN_GPU_ROWS,
    devices: Sequence[str] | None = None,
    log: Callable[[str], None] = lambda _: None,
    max_test_rows: int | None = None,
    canonical_dir: Path | None = None,
    on_progress: Callable[[BenchResult], None] | None = None,
    fold_executor: FoldExecutor | None = None,
    parallel_families: Sequence[str] = PARALLEL_FAMILIES,
) -> BenchResult:
    """Fit every family on every split's train side(s), score the test side(s), collect rows.

    ``min_gpu_rows``/``devices`` choose the leave-one-GPU-out folds (see ``select_folds``).
    ``fold_executor`` runs the folds of one (split, family) side by side (Ray tasks) for the
    families in ``parallel_families`` when there is more than one fold; otherwise folds run one by
    one here with ``factory``. ``max_test_rows`` caps each fold's test side (by hash, identical
    rows for every family), for families too slow to score tens of thousands of rows on a CPU;
    ``canonical_dir`` supplies the kernel columns (source text) a family's predictor asks for.
    ``on_progress`` sees the result after every (split, family), so an hour-long run that fails
    late keeps what it measured.
    """
    result = BenchResult()
    if max_test_rows is not None:
        result.notes.append(
            f"each fold's test side capped to {max_test_rows} rows (hash of measurement_id; "
            "the same rows for every family)"
        )
    serial = serial_fold_executor(factory)
    for split in splits:
        try:
            folds = select_folds(table, split, min_gpu_rows, devices if split == "unseen-gpu" else None)
        except (ValueError, KeyError) as exc:  # the table lacks this split's source: say so, go on
            result.notes.append(f"{split}: skipped ({exc})")
            log(f"{split}: skipped ({exc})")
            continue
        if split == "unseen-gpu":
            note = unseen_gpu_note(table, folds, min_gpu_rows, chosen=bool(devices))
            result.notes.append(note)
            log(note)
        for family in families:
            jobs = [FoldJob(split, family, fold, max_test_rows, canonical_dir) for fold in folds]
            parallel = fold_executor is not None and family in parallel_families and len(jobs) > 1
            if parallel:
                log(f"{split} {family}: {len(jobs)} folds as Ray tasks")

            def done(outcome: FoldOutcome, family: str = family) -> None:
                timing = outcome.timing
                result.timings.append(timing)
                coverage = "" if timing["coverage"] is None else f", coverage={100 * timing['coverage']:.1f}%"
                log(
                    f"{timing['fold']} {family}: fit {timing['fit_s']:.1f}s, total {timing['total_s']:.1f}s, "
                    f"n_test={timing['n_test']}{coverage}"
                )

            started = time.perf_counter()
            outcomes = (fold_executor if parallel else serial)(table, jobs, done)
            if len(jobs) > 1:
                result.notes.append(
                    f"{split} {family}: {len(jobs)} folds in {time.perf_counter() - started:.0f} s "
                    + ("as parallel Ray tasks" if parallel else "one after the other")
                )
            frames = [o.frame for o in outcomes]
            targets = sorted({t for o in outcomes for t in o.targets})
            frame = pd.concat(frames) if frames else pd.DataFrame()
            result.rows += rows_for(frame, split, family, targets, published)
            if on_progress is not None:
                on_progress(result)
    return result
