"""The evaluate stage: score a model on a split's test side (or on a freshly ingested source) and
write the evaluation JSON; optionally record it as an MLflow evaluation run.

``evaluate_stage`` is the one function behind ``kernelcast evaluate``, the DVC ``evaluate`` stage
and the evaluate task of ``flows/evaluate_and_promote.py``. Rows from a source directory go
through the same ingest -> validate -> features functions as the pipeline's stages.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.common.atomic import atomic_write

if TYPE_CHECKING:
    import pandas as pd

    from components.evaluation.report import ExecutorFactory
    from components.platform.config import Settings

EXPERIMENT = "kernelcast"
# The bench's program split: KernelBench programs, scored by components.evaluation.kernelbench_bench.
PROGRAM_SPLIT = "kernelbench"


@dataclass(frozen=True)
class EvaluateInputs:
    model: str  # models:/name@alias, models:/name/N, runs:/..., a predictor folder, or "roofline"
    out_file: Path  # the evaluation JSON
    split: str | None = None  # default: unseen-kernel on the feature table, every row of a source
    features_file: Path | None = None  # default: data_dir/features/features.parquet
    source: str | None = None  # ingest this source from ``from_dir`` instead of reading the feature table
    from_dir: Path | None = None
    log: bool = True  # record an MLflow evaluation run (with plots beside the JSON)
    max_rows: int | None = None  # at most this many rows, chosen by hash of measurement_id
    gate: bool = False  # the promotion gate's report: every split of params.yaml register.splits
    registration: Path | None = None  # gate: judge the version a registration.json names (replaces model)


@dataclass(frozen=True)
class EvaluateResult:
    report: dict[str, Any]
    out_file: Path
    run_id: str | None  # the MLflow evaluation run, when logged
    ingested_rows: int | None  # rows from ``source`` (None when the feature table was read)
    quarantined: int | None  # of the source's rows, quarantined by validation


def check_inputs(inputs: EvaluateInputs) -> None:
    """A ValueError naming the input that is wrong."""
    from components.evaluation.splits import SPLITS

    if (inputs.source is None) != (inputs.from_dir is None):
        raise ValueError("--source and --from go together")
    if inputs.gate and (inputs.source is not None or inputs.split is not None or inputs.max_rows is not None):
        raise ValueError(
            "--gate scores the splits of params.yaml register.splits under its caps; "
            "it does not go with --source, --split or --max-rows"
        )
    if inputs.registration is not None and not inputs.gate:
        raise ValueError("--registration goes with --gate (the promotion gate's report of that version)")
    if inputs.split is not None and inputs.split not in (*SPLITS, PROGRAM_SPLIT):
        known = ", ".join((*SPLITS, PROGRAM_SPLIT))
        raise ValueError(f"unknown split {inputs.split!r}; choose one of {known}")
    if Path(inputs.out_file).suffix.lower() != ".json":
        raise ValueError(f"--out must be a .json file, got {inputs.out_file}")


PROGRAM_NOTE = "whole program: the op-level model does not answer it; the program model does (see programs)"


def _program_rows_noted(frame: pd.DataFrame, programs_scored: bool) -> pd.DataFrame:
    """``frame`` with PROGRAM_NOTE on whole-program rows the model left without a runtime or a reason,
    when the program path scored them -- so no row is counted as 'no reason given' for that."""
    import pandas as pd

    if not programs_scored or "family" not in frame.columns:
        return frame
    notes = (
        frame["pred_note"]
        if "pred_note" in frame.columns
        else pd.Series(pd.NA, index=frame.index, dtype="object")
    )
    silent = frame["family"].astype(str).eq("program") & notes.isna()
    return frame.assign(pred_note=notes.astype("object").mask(silent, PROGRAM_NOTE))


NOT_A_FOLD = "not scored: its GPU and run config make no leave-one-GPU-out fold (see the notes)"
NO_DURATION = "no finite duration in the data"


def program_answers(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any] | None:
    """The KernelBench programs among ``measurements`` scored the way ``bench accuracy --split
    kernelbench`` scores them (the same function: leave-one-GPU-out program model beside the trace's
    roofline), and every timing row without an answer counted by its reason. None: no such rows."""
    import numpy as np
    import pandas as pd

    from components.evaluation.kernelbench_bench import SPLIT, reason_class, run_kernelbench_bench
    from components.programs.kernelbench_data import SOURCE, config_name

    rows = measurements[measurements["source"] == SOURCE]
    if rows.empty:
        return None
    bench = run_kernelbench_bench(measurements, kernels, cache_dir, log=log)
    key_columns = ["kernel_id", "device_id", "config"]
    scored = (
        set(bench.predictions[key_columns].itertuples(index=False, name=None))
        if bench.predictions is not None
        else set()
    )
    stated = bench.reasons[[*key_columns, "reason"]] if bench.reasons is not None else None
    reasons = (
        {}
        if stated is None
        else {(k, d, c): reason_class(r) for k, d, c, r in stated.itertuples(index=False, name=None)}
    )
    configs = rows["params_json"].map(lambda t: config_name(json.loads(t) if isinstance(t, str) else {}))
    finite = np.isfinite(pd.to_numeric(rows["duration_us"], errors="coerce").to_numpy("float64"))
    why: list[str | None] = []
    for key, ok in zip(
        zip(rows["kernel_id"], rows["device_id"], configs, strict=False), finite, strict=False
    ):
        why.append(NO_DURATION if not ok else None if key in scored else reasons.get(key, NOT_A_FOLD))
    unanswered = Counter(w for w in why if w is not None)
    return {
        "split": SPLIT,
        "method": "leave-one-GPU-out program model per run config (components.evaluation.kernelbench_bench, "
        "as `kernelcast bench accuracy --split kernelbench`); the figures score the mean timing of "
        "each (program, GPU, config)",
        "n_rows": len(rows),
        "n_answered": why.count(None),
        "unanswered": dict(unanswered.most_common()),
        "figures": bench.rows,
        "notes": bench.notes,
    }


def evaluate_stage(
    inputs: EvaluateInputs,
    settings: Settings,
    params: dict[str, Any],
    fold_executor: ExecutorFactory | None = None,
) -> EvaluateResult:
    """Score the model on the chosen rows (rows it trained on are excluded and counted as
    ``excluded_seen``), write the JSON report atomically, and log it unless ``inputs.log`` is off.

    With ``inputs.gate`` it writes the promotion gate's report instead (``gate_stage``);
    ``fold_executor`` (e.g. ``functools.partial(folds.ray_fold_executor, start_ray=...)``) runs its
    refit folds side by side; None runs them one after the other here.
    """
    if inputs.gate:
        from components.evaluation.gate_stage import gate_stage

        return gate_stage(inputs, settings, params, fold_executor)
    from components.evaluation.harness import (
        capped_rows,
        evaluate_predictor,
        evaluation_rows,
        log_evaluation_run,
        read_feature_table,
        silent_rows_reasoned,
    )
    from components.evaluation.plots import write_plots
    from components.evaluation.source_rows import source_frames, unanswered_by_device
    from components.models.cuda_runtime import unpredicted_reasons
    from components.registry.loading import load_any_predictor
    from components.registry.runs import experiment_id

    check_inputs(inputs)
    from components.ingest.base import IngestError

    serving = _serving_section(inputs)  # LLM serving runs in the tree (pipeweave, aiconfigurator)
    if serving is not None and not _is_ingest_source(str(inputs.source)):  # a tree of serving runs only
        return _write_serving_only(inputs, serving)
    canonical = settings.data_dir / "canonical"
    split, ingested, quarantined = inputs.split, None, None
    frames = None
    if inputs.source is not None:
        assert inputs.from_dir is not None  # check_inputs
        static_file = settings.data_dir / "features" / "static.parquet"
        try:
            frames = source_frames(inputs.source, inputs.from_dir, params, static_file)
        except IngestError as exc:  # a tree of serving runs without the kernel tables: score those alone
            if not (serving or {}).get("n_asked"):
                raise
            return _write_serving_only(inputs, serving or {}, f"no kernel rows ({exc})")
        table, quarantined = frames.table, frames.quarantined
        ingested = len(table)
    else:
        split = split or "unseen-kernel"
        table = read_feature_table(
            inputs.features_file or settings.data_dir / "features" / "features.parquet", canonical
        )
        if split == PROGRAM_SPLIT:  # the model on the KernelBench rows; the programs as the bench scores them
            table = table[table["source"] == PROGRAM_SPLIT]
    predictor = load_any_predictor(inputs.model, settings.tracking_uri())
    op_split = None if split == PROGRAM_SPLIT else split  # the program split scores every KernelBench row
    candidates = evaluation_rows(table, op_split)
    rows = capped_rows(candidates.index, table, inputs.max_rows)
    evaluation = evaluate_predictor(
        predictor, table, op_split, model=inputs.model, rows=rows, canonical_dir=canonical
    )
    report = evaluation.report
    if split == PROGRAM_SPLIT:
        report["split"] = split
    if len(rows) < len(candidates):
        report["subsampled_from"] = len(candidates)
    if inputs.source is not None:
        report["coverage_by_device"] = unanswered_by_device(
            evaluation.frame, tuple(predictor.targets), table.attrs.get("quarantined_by_device")
        )
        if table.attrs.get("extra_devices"):
            report["devices_from_source"] = list(table.attrs["extra_devices"])
    if frames is not None:  # whole programs: the bench's own scoring, never a silent 0 of N
        report["source_rows"] = frames.accounting()
        programs = program_answers(frames.measurements, frames.kernels, settings.cache_dir)
        if programs is not None:
            report["programs"] = programs
    elif split == PROGRAM_SPLIT:
        from components.evaluation.kernelbench_bench import read_program_tables

        try:
            measurements, kernels = read_program_tables(canonical)
        except FileNotFoundError as exc:
            raise ValueError(
                f"--split {PROGRAM_SPLIT}: {exc} (run `kernelcast ingest --source kernelbench`)"
            ) from None
        report["programs"] = program_answers(measurements, kernels, settings.cache_dir)
    # Rows scored but left without a runtime, by the reason the predictor stated (as the bench counts them).
    report["unanswered"] = unpredicted_reasons(
        silent_rows_reasoned(_program_rows_noted(evaluation.frame, "programs" in report))
    )
    if serving is not None:
        report["serving"] = serving
    out = Path(inputs.out_file)
    text = json.dumps(report, indent=2, sort_keys=False) + "\n"
    atomic_write(out, lambda tmp: tmp.write_text(text))

    run_id = None
    if inputs.log:
        plots = write_plots(evaluation.frame, out.with_name(out.stem + "_plots"))
        uri = settings.tracking_uri()
        run_id = log_evaluation_run(
            report,
            plots,
            tracking_uri=uri,
            experiment_id=experiment_id(EXPERIMENT, uri, settings.artifact_root()),
            tags={"model_uri": inputs.model, "source": inputs.source or "features"},
        )
    return EvaluateResult(report, out, run_id, ingested, quarantined)


def _is_ingest_source(source: str) -> bool:
    from components.ingest.registry import SOURCES

    return source in SOURCES


def _serving_section(inputs: EvaluateInputs) -> dict[str, Any] | None:
    """The tree's LLM serving runs scored by the deployment composition (per device, with coverage and the
    reason of every run not answered); None for a source without serving runs."""
    from components.deployments.tree import SERVING_SOURCES, score_serving_tree

    if inputs.source not in SERVING_SOURCES or inputs.from_dir is None:
        return None
    from components.devices import load_catalog

    if not Path(inputs.from_dir).is_dir():
        raise ValueError(f"--from {inputs.from_dir}: not a directory")
    try:
        return score_serving_tree(inputs.source, Path(inputs.from_dir), load_catalog())
    except (OSError, KeyError) as exc:  # the tree lacks the serving files: the kernels may still be scored
        return {
            "source": inputs.source,
            "from": str(inputs.from_dir),
            "n_asked": 0,
            "note": f"no serving runs ({exc})",
        }


def _write_serving_only(
    inputs: EvaluateInputs, serving: dict[str, Any], why: str = "no kernel rows from this source"
) -> EvaluateResult:
    report = {
        "model": inputs.model,
        "source": inputs.source,
        "n": 0,
        "targets": {},
        "excluded_seen": 0,
        "note": f"deployments answered by the composition; {why}",
        "serving": serving,
    }
    out = Path(inputs.out_file)
    text = json.dumps(report, indent=2, sort_keys=False) + "\n"
    atomic_write(out, lambda tmp: tmp.write_text(text))
    return EvaluateResult(report, out, None, None, None)
