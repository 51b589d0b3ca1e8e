"""Accuracy benchmark: every model family on the published splits, next to the published figures.

For each split and family: fit on the split's train side (hyper-parameters fixed in params.yaml;
the train side is subsampled deterministically to ``bench_max_train_rows`` on a 2-core box and the
table says so), score on the test side with the harness (seen rows excluded), and report the
figures the papers report, on the same scope (per op family for NeuSight, per GPU for PipeWeave).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from components.evaluation.harness import (
    capped_rows, class_label_column, evaluate_predictor, split_folds, target_reports,
)
from components.evaluation.metrics import classification_report
from components.evaluation.splits import Fold
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS, Predictor

BENCH_SPLITS: tuple[str, ...] = ("neusight", "pipeweave-fp8", "bolet-roofline", "unseen-kernel", "unseen-gpu")
NEUSIGHT_OP_FAMILIES: tuple[str, ...] = ("bmm", "linear", "elementwise")


@dataclass(frozen=True)
class Published:
    split: str
    scope: str  # "" = the whole test side; "family=bmm"; "device=<catalog id>"
    target: str
    metric: str
    value: float
    by: str


NEUSIGHT_BY = ("NeuSight ASPLOS'25, unseen GPUs (H100/L4); per-op latency summed over model traces "
               "(per kernel its error is larger: retrained BMM ~40%, linear ~23%, elementwise ~13%)")
PIPEWEAVE_BY = "PipeWeave 2026 repo metadata: FP8 GEMM mean relative error on held-out GPUs"
PIPEWEAVE_GPU_BY = "PipeWeave shipped FP8-GEMM MLP re-run here (DESIGN.md)"
BOLET_BY = "Bolet et al. HPDC AI4Sys'25: best zero-shot LLM, 340 balanced kernels"


def published_figures(device_id: Callable[[str], str]) -> list[Published]:
    """The field's numbers, on the scope each paper measured (device names resolved by the catalog)."""
    return [
        Published("neusight", "family=bmm", "duration_us", "mape", 0.138, NEUSIGHT_BY),
        Published("neusight", "family=linear", "duration_us", "mape", 0.139, NEUSIGHT_BY),
        Published("neusight", "family=elementwise", "duration_us", "mape", 0.193, NEUSIGHT_BY),
        Published("pipeweave-fp8", "", "duration_us", "mape", 0.039, PIPEWEAVE_BY),
        Published("pipeweave-fp8", f"device={device_id('NVIDIA H100')}", "duration_us", "mape", 0.042, PIPEWEAVE_GPU_BY),
        Published("pipeweave-fp8", f"device={device_id('NVIDIA H200')}", "duration_us", "mape", 0.052, PIPEWEAVE_GPU_BY),
        Published("bolet-roofline", "", CLASS_TARGET, "accuracy", 0.64, BOLET_BY),
    ]


@dataclass
class BenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "notes": self.notes, "timings": self.timings}


# A factory fits one family on a train side: (family, train rows, split) -> (predictor, seconds).
Factory = Callable[[str, pd.DataFrame, str], tuple[Predictor, float]]


def select_folds(table: pd.DataFrame, split: str, max_folds: int) -> list[Fold]:
    """All folds, or for leave-one-GPU-out the ``max_folds`` largest (by test rows), named order."""
    folds = split_folds(table, split)
    if len(folds) <= max_folds:
        return folds
    chosen = sorted(folds, key=lambda f: (-len(f.test), f.name))[:max_folds]
    return sorted(chosen, key=lambda f: f.name)


def _scopes(frame: pd.DataFrame, split: str) -> list[tuple[str, pd.DataFrame]]:
    scopes: list[tuple[str, pd.DataFrame]] = [("", frame)]
    if split == "neusight":
        scopes += [(f"family={f}", frame[frame["family"] == f]) for f in NEUSIGHT_OP_FAMILIES]
    if split in ("neusight", "pipeweave-fp8", "unseen-gpu"):
        scopes += [(f"device={d}", rows) for d, rows in frame.groupby("device_id", sort=True)]
    if split in ("unseen-kernel", "random"):
        scopes += [(f"source={s}", rows) for s, rows in frame.groupby("source", sort=True)]
    return scopes


def _target_name(target: str, scope: str) -> str:
    return f"{target}[{scope}]" if scope else target


def rows_for(frame: pd.DataFrame, split: str, family: str, targets: Sequence[str],
             published: list[Published]) -> list[dict[str, Any]]:
    """Benchmark rows of one (split, family): our figure per scope, with the published one beside it."""
    lookup = {(p.split, p.scope, p.target, p.metric): p for p in published}
    out: list[dict[str, Any]] = []
    numeric = tuple(t for t in targets if t in NUMERIC_TARGETS)
    for scope, rows in _scopes(frame, split):
        if split == "bolet-roofline":
            break
        wanted = numeric if not scope else ("duration_us",)  # sub-scopes: runtime only, keeps the table short
        reports = target_reports(rows, tuple(t for t in wanted if t in numeric))
        for target, report in reports.items():
            for metric in ("mape", "within_10"):
                pub = lookup.get((split, scope, target, metric))
                out.append(_row(split, family, _target_name(target, scope), metric, report[metric], report["n"], pub))
    if CLASS_TARGET in targets:
        label = class_label_column(split)
        if label in frame.columns and f"pred_{CLASS_TARGET}" in frame.columns:
            labelled = frame[frame[label].notna()]
            if len(labelled):
                predicted = labelled[f"pred_{CLASS_TARGET}"].astype(object).where(
                    labelled[f"pred_{CLASS_TARGET}"].notna(), "none")
                report = classification_report(labelled[label].astype(object).to_numpy(), predicted.to_numpy())
                for metric in ("accuracy", "balanced_accuracy"):
                    pub = lookup.get((split, "", CLASS_TARGET, metric))
                    out.append(_row(split, family, CLASS_TARGET, metric, report[metric], report["n"], pub))
    # A published figure we could not score (e.g. the test side lacks that GPU) still gets a row.
    seen = {(r["split"], r["target"], r["metric"]) for r in out}
    for pub in published:
        name = CLASS_TARGET if pub.target == CLASS_TARGET else _target_name(pub.target, pub.scope)
        if pub.split == split and (split, name, pub.metric) not in seen:
            out.append(_row(split, family, name, pub.metric, math.nan, 0, pub))
    return out


def _row(split: str, family: str, target: str, metric: str, ours: float, n: int, pub: Published | None) -> dict[str, Any]:
    value = None if ours is None or not math.isfinite(float(ours)) else round(float(ours), 4)
    return {"split": split, "family": family, "target": target, "metric": metric, "ours": value, "n": int(n),
            "published": pub.value if pub else None, "published_by": pub.by if pub else None}


def run_accuracy_bench(table: pd.DataFrame, families: Sequence[str], splits: Sequence[str], factory: Factory,
                       published: list[Published], max_folds: int = 3,
                       log: Callable[[str], None] = lambda _: None, *, max_test_rows: int | None = None,
                       canonical_dir: Path | None = None,
                       on_progress: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Fit every family on every split's train side(s), score the test side(s), collect rows.

    ``max_test_rows`` caps each fold's test side (by hash, identical rows for every family), for
    families too slow to score tens of thousands of rows on a CPU; ``canonical_dir`` supplies the
    kernel columns (source text) a family's predictor asks for. ``on_progress`` sees the result
    after every (split, family), so an hour-long run that fails late keeps what it measured.
    """
    result = BenchResult()
    if max_test_rows is not None:
        result.notes.append(f"each fold's test side capped to {max_test_rows} rows (hash of measurement_id; "
                            "the same rows for every family)")
    for split in splits:
        try:
            folds = select_folds(table, split, max_folds)
        except (ValueError, KeyError) as exc:  # the table lacks this split's source: say so, go on
            result.notes.append(f"{split}: skipped ({exc})")
            log(f"{split}: skipped ({exc})")
            continue
        if split == "unseen-gpu":
            result.notes.append(f"unseen-gpu: {len(folds)} leave-one-GPU-out folds "
                                f"({', '.join(f.name.split(':', 1)[1] for f in folds)}), the largest by test rows")
        for family in families:
            frames, targets = [], set()
            for fold in folds:
                started = time.perf_counter()
                predictor, fit_seconds = factory(family, table.loc[fold.train], split)
                evaluation = evaluate_predictor(predictor, table, split, model=family,
                                                rows=capped_rows(fold.test, table, max_test_rows),
                                                canonical_dir=canonical_dir)
                frames.append(evaluation.frame)
                targets.update(predictor.targets)
                result.timings.append({"split": split, "fold": fold.name, "family": family,
                                       "n_train": len(predictor.trained_on), "n_test": evaluation.report["n"],
                                       "fit_s": round(fit_seconds, 1),
                                       "total_s": round(time.perf_counter() - started, 1)})
                log(f"{fold.name} {family}: fit {fit_seconds:.1f}s, n_test={evaluation.report['n']}")
            frame = pd.concat(frames) if frames else pd.DataFrame()
            result.rows += rows_for(frame, split, family, sorted(targets), published)
            if on_progress is not None:
                on_progress(result)
    return result


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (split, target, metric): every family's figure, then the published one."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    keyed: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        entry = keyed.setdefault((row["split"], row["target"], row["metric"]), {"published": None, "by": None})
        entry[row["family"]] = row["ours"]
        entry[f"n:{row['family']}"] = row["n"]
        if row["published"] is not None:
            entry["published"], entry["by"] = row["published"], row["published_by"]

    def fmt(value: Any) -> str:
        return "–" if value is None else f"{100 * value:.1f}%"

    header = ["split", "target", "metric", *families, "n", "published", "published by"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (split, target, metric), entry in keyed.items():
        n = max((entry.get(f"n:{f}") or 0) for f in families)
        cells = [split, target, metric, *(fmt(entry.get(f)) for f in families), str(n), fmt(entry["published"]),
                 (entry["by"] or "").split(":")[0]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
