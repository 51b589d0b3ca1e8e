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

from components.evaluation.harness import (
    capped_rows, class_label_column, evaluate_predictor, roofline_report, split_folds, target_reports,
)
from components.evaluation.splits import Fold, unseen_gpu_devices, unseen_gpu_split
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS, Predictor
from components.platform.config import SERVING_SPLITS

BENCH_SPLITS: tuple[str, ...] = ("neusight", "pipeweave-fp8", "bolet-roofline", "unseen-kernel", "unseen-gpu",
                                  "kernelbench")
# Whole PyTorch programs, scored from the canonical tables (not the feature table) by
# components.evaluation.kernelbench_bench; the CLI runs it beside run_accuracy_bench.
PROGRAM_SPLITS: tuple[str, ...] = ("kernelbench",)
# LLM deployments scored on measured serving runs (components.deployments.bench; SERVING_SPLITS, named in
# components.platform.config where the registry's gate checks them); run when asked by name.
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

DEFAULT_MIN_GPU_ROWS = 1000  # params.yaml train.bench_min_gpu_rows
# Every GPU with enough rows is held out, also one whose sources measured no other GPU (its fold
# then has no row of those sources in training: unseen GPU and unseen source; the note says so).
BENCH_MIN_DEVICES_PER_SOURCE = 1
# Families whose folds may run side by side as Ray tasks: the roofline has nothing to fit, and the
# llm family is a Ray Train job itself.
PARALLEL_FAMILIES: tuple[str, ...] = ("tabular",)
# Columns a fold sends back for the report (the feature columns stay where they were computed).
_REPORT_COLUMNS: tuple[str, ...] = ("measurement_id", "kernel_id", "device_id", "source", "family", "op", "dtype",
                                    CLASS_TARGET, "roofline_class_published", *NUMERIC_TARGETS)


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
    started = time.perf_counter()
    train = table.loc[job.fold.train]
    if job.canonical_dir is not None:  # where a family that reads source/launch columns joins them from
        train.attrs["canonical_dir"] = str(job.canonical_dir)
    predictor, fit_seconds = factory(job.family, train, job.split)
    evaluation = evaluate_predictor(predictor, table, job.split, model=job.family,
                                    rows=capped_rows(job.fold.test, table, job.max_test_rows),
                                    canonical_dir=job.canonical_dir)
    report = evaluation.report
    frame = evaluation.frame
    keep = [c for c in frame.columns if c in _REPORT_COLUMNS or str(c).startswith("pred_")]
    timing = {"split": job.split, "fold": job.fold.name, "family": job.family,
              "n_train": len(predictor.trained_on), "n_test": report["n"], "coverage": report.get("coverage"),
              "fit_s": round(fit_seconds, 1), "total_s": round(time.perf_counter() - started, 1)}
    from components.models.cuda_runtime import unpredicted_reasons

    # Test rows measured but left without a runtime, by the reason the predictor stated.
    timing["unpredicted_duration_us"] = unpredicted_reasons(frame)
    return FoldOutcome(frame[keep], tuple(predictor.targets), timing)


def serial_fold_executor(factory: Factory) -> FoldExecutor:
    """Folds one after the other in this process."""

    def run(table: pd.DataFrame, jobs: Sequence[FoldJob],
            on_done: Callable[[FoldOutcome], None]) -> list[FoldOutcome]:
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

    def run(table: pd.DataFrame, jobs: Sequence[FoldJob],
            on_done: Callable[[FoldOutcome], None]) -> list[FoldOutcome]:
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


def select_folds(table: pd.DataFrame, split: str, min_gpu_rows: int = DEFAULT_MIN_GPU_ROWS,
                 devices: Sequence[str] | None = None) -> list[Fold]:
    """The split's folds; for leave-one-GPU-out, one per GPU with >= ``min_gpu_rows`` rows, or the
    GPUs named in ``devices`` (catalog ids) whatever their size."""
    if split != "unseen-gpu":
        return split_folds(table, split)
    folds = unseen_gpu_split(table, BENCH_MIN_DEVICES_PER_SOURCE, min_rows=min_gpu_rows,
                             devices=tuple(devices) if devices else None)
    if not folds:
        counts = unseen_gpu_devices(table, BENCH_MIN_DEVICES_PER_SOURCE)
        largest = counts.assign(_neg=-counts["rows"]).sort_values(["_neg", "device_id"]).head(3)
        raise ValueError(f"no GPU has at least {min_gpu_rows} rows (largest: "
                         + (", ".join(f"{d} {n}" for d, n in zip(largest["device_id"], largest["rows"])) or "none")
                         + ")")
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
    scored = {d: r for d, r in per_gpu.items() if r.get("mape") is not None and math.isfinite(float(r["mape"]))}
    if not scored:
        return []
    mapes = {d: float(r["mape"]) for d, r in scored.items()}
    worst = max(mapes, key=lambda d: (mapes[d], d))
    n, asked = len(scored), len(per_gpu)
    rows = [
        _row(split, family, "median GPU", "duration_us", "mape", statistics.median(mapes.values()), n, None,
             n_asked=asked, coverage=n / asked),
        _row(split, family, "median GPU", "duration_us", "within_10",
             statistics.median(float(r["within_10"]) for r in scored.values()), n, None,
             n_asked=asked, coverage=n / asked),
        _row(split, family, f"worst GPU={worst}", "duration_us", "mape", mapes[worst], int(scored[worst]["n"]), None,
             n_asked=int(scored[worst]["n_asked"]), coverage=scored[worst]["coverage"]),
    ]
    return rows


def rows_for(frame: pd.DataFrame, split: str, family: str, targets: Sequence[str],
             published: list[Published]) -> list[dict[str, Any]]:
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
            if split == "unseen-gpu" and target == "duration_us" and scope.startswith("device=") and "," not in scope:
                per_gpu[scope.removeprefix("device=")] = report
            for metric in ("mape", "within_10"):
                pub = lookup.get((split, scope, target, metric))
                out.append(_row(split, family, scope, target, metric, report[metric], report["n"], pub,
                                n_asked=report["n_asked"], coverage=report["coverage"]))
    if split == "unseen-gpu":
        out += _gpu_summary(split, family, per_gpu)
    if CLASS_TARGET in targets and len(frame):
        report = roofline_report(frame, class_label_column(split))
        if report is not None and report["n"]:
            for metric in ("accuracy", "balanced_accuracy"):
                pub = lookup.get((split, "", CLASS_TARGET, metric))
                out.append(_row(split, family, "", CLASS_TARGET, metric, report[metric], report["n"], pub,
                                n_asked=report["n_asked"], coverage=report["coverage"]))
    # A published figure we could not score (e.g. the test side lacks that GPU) still gets a row.
    seen = {(r["split"], r["target"], r["metric"]) for r in out}
    for pub in published:
        name = CLASS_TARGET if pub.target == CLASS_TARGET else _target_name(pub.target, pub.scope)
        if pub.split == split and (split, name, pub.metric) not in seen:
            scope = "" if pub.target == CLASS_TARGET else pub.scope
            out.append(_row(split, family, scope, pub.target, pub.metric, math.nan, 0, pub, n_asked=0, coverage=None))
    return out


def _row(split: str, family: str, scope: str, target: str, metric: str, ours: float | None, n: int,
         pub: Published | None, *, n_asked: int, coverage: float | None) -> dict[str, Any]:
    value = None if ours is None or not math.isfinite(float(ours)) else round(float(ours), 4)
    cov = None if coverage is None or not math.isfinite(float(coverage)) else round(float(coverage), 4)
    return {"split": split, "family": family, "target": _target_name(target, scope), "scope": scope,
            "metric": metric, "ours": value, "n": int(n), "n_asked": int(n_asked), "coverage": cov,
            "published": pub.value if pub else None, "published_by": pub.by if pub else None}


def run_accuracy_bench(table: pd.DataFrame, families: Sequence[str], splits: Sequence[str], factory: Factory,
                       published: list[Published], *, min_gpu_rows: int = DEFAULT_MIN_GPU_ROWS,
                       devices: Sequence[str] | None = None,
                       log: Callable[[str], None] = lambda _: None, max_test_rows: int | None = None,
                       canonical_dir: Path | None = None,
                       on_progress: Callable[[BenchResult], None] | None = None,
                       fold_executor: FoldExecutor | None = None,
                       parallel_families: Sequence[str] = PARALLEL_FAMILIES) -> BenchResult:
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
        result.notes.append(f"each fold's test side capped to {max_test_rows} rows (hash of measurement_id; "
                            "the same rows for every family)")
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
                log(f"{timing['fold']} {family}: fit {timing['fit_s']:.1f}s, total {timing['total_s']:.1f}s, "
                    f"n_test={timing['n_test']}{coverage}")

            started = time.perf_counter()
            outcomes = (fold_executor if parallel else serial)(table, jobs, done)
            if len(jobs) > 1:
                result.notes.append(f"{split} {family}: {len(jobs)} folds in {time.perf_counter() - started:.0f} s "
                                    + ("as parallel Ray tasks" if parallel else "one after the other"))
            frames = [o.frame for o in outcomes]
            targets = sorted({t for o in outcomes for t in o.targets})
            frame = pd.concat(frames) if frames else pd.DataFrame()
            result.rows += rows_for(frame, split, family, targets, published)
            if on_progress is not None:
                on_progress(result)
    return result


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _coverage_cell(entry: dict[str, Any], families: Sequence[str]) -> str:
    """One figure when every family covered the same share, else each family's."""
    values = {f: entry.get(f"cov:{f}") for f in families if f"cov:{f}" in entry}
    distinct = set(values.values())
    if not values or distinct == {None}:
        return "–"
    if len(distinct) == 1:
        return _pct(next(iter(distinct)))
    return " / ".join(f"{f} {_pct(v)}" for f, v in values.items())


def _pivot(rows: list[dict[str, Any]]) -> tuple[list[str], dict[tuple[str, str, str], dict[str, Any]]]:
    families = list(dict.fromkeys(r["family"] for r in rows))
    keyed: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        entry = keyed.setdefault((row["split"], row["target"], row["metric"]), {"published": None, "by": None})
        entry[row["family"]] = row["ours"]
        entry[f"n:{row['family']}"] = row["n"]
        entry[f"cov:{row['family']}"] = row.get("coverage")
        entry["scope"] = row.get("scope", "")
        if row["published"] is not None:
            entry["published"], entry["by"] = row["published"], row["published_by"]
    return families, keyed


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (split, target, metric): every family's figure, n, coverage, the published one."""
    families, keyed = _pivot(rows)
    header = ["split", "target", "metric", *families, "n", "coverage", "published", "published by"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (split, target, metric), entry in keyed.items():
        n = max((entry.get(f"n:{f}") or 0) for f in families)
        cells = [split, target, metric, *(_pct(entry.get(f)) for f in families), str(n),
                 _coverage_cell(entry, families), _pct(entry["published"]), (entry["by"] or "").split(":")[0]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ README section

MARKER_START = "<!-- bench:start -->"
MARKER_END = "<!-- bench:end -->"
_SPLIT_TITLES = {
    "pipeweave-fp8": "PipeWeave FP8 GEMM (unseen GPUs)",
    "neusight": "NeuSight (unseen GPUs)",
    "unseen-kernel": "unseen kernels",
    "random": "random rows",
    "bolet-roofline": "Bolet roofline class from source",
    "unseen-gpu": "leave-one-GPU-out",
}


def _headline(split: str, scope: str, target: str, metric: str) -> bool:
    """The README's short table: whole-split runtime MAPE and within 10%, the published scopes
    (op family, GPU), the median and worst GPU, and the roofline class."""
    if target.startswith(CLASS_TARGET):
        return True
    if not target.startswith("duration_us"):
        return False
    if scope == "":
        return metric in ("mape", "within_10")
    if split == "unseen-gpu":
        return scope == "median GPU" or scope.startswith("worst GPU")
    return metric == "mape" and split in ("neusight", "pipeweave-fp8") and scope.startswith(("family=", "device="))


def readme_markdown(result: BenchResult, command: str = "kernelcast bench accuracy") -> str:
    """The README's accuracy section: headline table, leave-one-GPU-out per GPU (per source in a
    collapsed block), every figure in a collapsed block, then the run's notes."""
    from components.evaluation.opmodel_bench import markdown_section  # the op engine's splits, if run
    from components.platform.config import OPMODEL_SPLITS

    rows = [r for r in result.rows if r["split"] not in OPMODEL_SPLITS]  # those get their own table below
    families, keyed = _pivot(rows)
    out = [f"Generated by `{command}`; runtime MAPE unless the metric says otherwise; coverage = rows "
           "predicted / rows asked (for the median GPU: GPUs with a prediction / GPUs held out); a row without "
           "a predicted class counts as wrong in the accuracy.", ""]
    header = ["split", "scope", "metric", *families, "n", "coverage", "published"]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (split, target, metric), entry in keyed.items():
        scope = entry["scope"]
        if not _headline(split, scope, target, metric):
            continue
        label = (CLASS_TARGET if target.startswith(CLASS_TARGET) else scope) or "all"
        pub = _pct(entry["published"]) if entry["published"] is not None else "-"
        if entry["by"]:
            pub += f" ({entry['by'].split(':')[0].split(',')[0]})"
        n = max((entry.get(f"n:{f}") or 0) for f in families)
        out.append("| " + " | ".join([_SPLIT_TITLES.get(split, split), label, metric.replace("_", " "),
                                      *(_pct(entry.get(f)) for f in families), str(n),
                                      _coverage_cell(entry, families), pub]) + " |")
    gpu_rows = [r for r in rows if r["split"] == "unseen-gpu" and r["target"].startswith("duration_us[device=")]
    if gpu_rows:
        out += ["", "Leave-one-GPU-out, runtime (each GPU held out of every source's training rows):", ""]
        out += _per_gpu_table([r for r in gpu_rows if "," not in r["scope"]], families, "held-out GPU")
        out += ["", "<details><summary>per held-out GPU and source</summary>", ""]
        out += _per_gpu_table([r for r in gpu_rows if "," in r["scope"]], families, "held-out GPU, source")
        out += ["", "</details>"]
    out += markdown_section(result.rows)
    out += ["", "<details><summary>every figure</summary>", "", markdown_table(rows), "", "</details>"]
    if result.notes:
        out += [""] + [f"- {note}" for note in result.notes]
    return "\n".join(out)


def _per_gpu_table(rows: list[dict[str, Any]], families: Sequence[str], first: str) -> list[str]:
    keyed: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = keyed.setdefault(row["scope"].removeprefix("device=").replace(",source=", ", "), {})
        entry[(row["family"], row["metric"])] = row["ours"]
        entry[("cov", row["family"])] = row.get("coverage")
        entry["n"] = max(entry.get("n", 0), row.get("n_asked", row["n"]))
    header = [first, "rows", *(f"{f} MAPE" for f in families), *(f"{f} within 10%" for f in families), "coverage"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, entry in keyed.items():
        coverage = _coverage_cell({f"cov:{f}": entry.get(("cov", f)) for f in families
                                   if ("cov", f) in entry}, families)
        lines.append("| " + " | ".join([name, str(entry["n"]),
                                        *(_pct(entry.get((f, "mape"))) for f in families),
                                        *(_pct(entry.get((f, "within_10"))) for f in families), coverage]) + " |")
    return lines


def check_markdown_target(path: Path) -> str | None:
    """The current text of ``path`` if it can take the bench section (None when it does not exist
    yet); ValueError naming the file when it lacks the markers or has them twice or out of order."""
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    text = path.read_text()
    start, end = text.find(MARKER_START), text.find(MARKER_END)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"{path} has no {MARKER_START} ... {MARKER_END} section: add both markers (on their "
                         "own lines, in that order) where the accuracy table goes")
    if text.count(MARKER_START) > 1 or text.count(MARKER_END) > 1:
        raise ValueError(f"{path} has more than one {MARKER_START} ... {MARKER_END} section")
    return text


def write_markdown(path: Path, section: str) -> None:
    """Write ``section`` between the bench markers of ``path`` (atomically).

    A missing file is created holding just the marked section; an existing file must carry both
    markers, in order, and only what lies between them is replaced.
    """
    from components.common.atomic import atomic_write

    text = check_markdown_target(path)
    block = f"{MARKER_START}\n{section.rstrip()}\n{MARKER_END}"
    if text is None:
        new = block + "\n"
    else:
        start, end = text.find(MARKER_START), text.find(MARKER_END)
        new = text[:start] + block + text[end + len(MARKER_END):]
    atomic_write(Path(path), lambda tmp: tmp.write_text(new))
