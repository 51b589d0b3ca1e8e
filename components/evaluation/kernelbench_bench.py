"""KernelBench whole-program benchmark: leave-one-GPU-out per level and per run config.

For every run config (``eager``; each torch.compile mode as its own target) and every GPU with
timings in it, the program model (``components.programs``) is fitted on the OTHER GPUs' rows of
that config (all levels) and scores the held-out GPU's rows per level. Beside it, the number a
user would compute by hand: the roofline of the trace (sum of per-op roofline times, no
overheads). Nothing is tuned on a held-out GPU: the model's form and hyper-parameters are fixed
in code.

Each figure is a bench row with target ``duration_us[level=L,device=D]`` (eager) or
``duration_us[level=L,device=D,mode=M]``; rows that cannot be predicted (module not bundled,
untraceable) count in ``n_asked`` (coverage < 100%) and in the notes, with the reason.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.bench_rows import bench_row

SPLIT = "kernelbench"
FAMILY_MODEL = "programs"  # the program model (roofline-basis op times + learned overheads)
FAMILY_ROOFLINE = "roofline"  # sum of per-op roofline times of the trace
MIN_HELD_OUT_ROWS = 20  # a GPU with fewer rows in a config is not a fold of that config
MIN_TRAIN_GPUS = 2  # leave-one-GPU-out needs at least this many other GPUs to learn a config from


@dataclass
class KernelBenchBench:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions: pd.DataFrame | None = None  # every scored row: keys, target, both predictions
    reasons: pd.DataFrame | None = None  # timing rows without a prediction, and why


def _row(family: str, scope: str, metric: str, value: float | None, n: int, n_asked: int) -> dict[str, Any]:
    return bench_row(SPLIT, family, f"duration_us[{scope}]", scope, metric, value, n, n_asked)


def _errors(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    from components.common.metrics import regression_report

    report = regression_report(true, pred)
    return report["mape"], report["within_10"]


def mode_label(config: str) -> str:
    return config.removeprefix("inductor-")


def scope_of(level: str, device: str, config: str) -> str:
    return f"level={level},device={device}" + ("" if config == "eager" else f",mode={mode_label(config)}")


def run_kernelbench_bench(
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    cache_dir: Path,
    *,
    configs: list[str] | None = None,
    kernel_ids: list[str] | None = None,
    min_held_out_rows: int = MIN_HELD_OUT_ROWS,
    min_train_rows: int = 50,
    op_predictor: Any = None,
    log: Callable[[str], None] = lambda _: None,
) -> KernelBenchBench:
    """Leave-one-GPU-out per (config, GPU), scored per level; see the module docstring. ``op_predictor``:
    fit the program model in its basis (the op engine's answers for the families it covers, which stand, as
    a module answer uses them) instead of the roofline basis."""
    from components.devices import load_catalog
    from components.programs.engine_ops import engine_kinds
    from components.programs.kernelbench_data import load_kernelbench
    from components.programs.kernelbench_model import fit_program_model, program_table

    result = KernelBenchBench()
    data = load_kernelbench(measurements, kernels, cache_dir, log=log, kernel_ids=kernel_ids)
    catalog = load_catalog()
    table = program_table(data, catalog, op_predictor)
    stands = engine_kinds(op_predictor)
    result.reasons = data.reasons
    asked = pd.concat(
        [
            data.rows[["kernel_id", "device_id", "config", "level"]],
            data.reasons[["kernel_id", "device_id", "config", "level"]],
        ],
        ignore_index=True,
    )
    n_rows, n_reasons = len(asked), len(data.reasons)
    reasons = Counter(reason_class(r) for r in data.reasons["reason"])
    result.notes.append(
        f"{SPLIT}: {n_rows} (program, GPU, config) timings (mean over repeated files); "
        f"{len(table)} in scope (traced), {n_reasons} with a stated reason: "
        + "; ".join(f"{n} {why}" for why, n in reasons.most_common())
    )
    scored = []
    wanted = configs or sorted(table["config"].unique(), key=lambda c: (c != "eager", c))
    for config in wanted:
        rows = table[table["config"] == config]
        counts = rows.groupby("device_id").size()
        held = sorted(counts[counts >= min_held_out_rows].index)
        if rows["device_id"].nunique() < 2 or not held:
            result.notes.append(
                f"{SPLIT} {config}: skipped ({len(rows)} rows on {rows['device_id'].nunique()} GPUs)"
            )
            continue
        for device in held:
            train = rows[rows["device_id"] != device]
            train_gpus = int((train["device_id"].value_counts() >= min_held_out_rows).sum())
            if train_gpus < MIN_TRAIN_GPUS or len(train) < min_train_rows:
                result.notes.append(
                    f"{SPLIT} {mode_label(config)} held out {device}: not scored, {train_gpus} other "
                    f"GPU(s) with {min_held_out_rows}+ rows to learn from (needs {MIN_TRAIN_GPUS})"
                )
                continue
            model = fit_program_model(
                train.assign(config="eager"), "roofline", min_rows=min_train_rows, stands=stands
            )
            test = rows[rows["device_id"] == device].reset_index(drop=True)
            scored.append(
                test.assign(
                    pred_model=model.predict(test),
                    pred_ops=model.config().ops(test, "pred"),  # the ops' GPU time inside pred_model
                    pred_roofline=test["roof_sum_us"].to_numpy(),
                )
            )
            log(
                f"{SPLIT} {config} held out {device}: trained on {len(train)} rows "
                f"({train['device_id'].nunique()} GPUs), {len(test)} test rows"
            )
    if not scored:
        return result
    frame = pd.concat(scored, ignore_index=True)
    result.predictions = frame[
        [
            "kernel_id",
            "device_id",
            "config",
            "level",
            "duration_us",
            "pred_model",
            "pred_ops",
            "pred_roofline",
            "n_kernels",
        ]
    ]
    asked_counts = asked.groupby(["config", "level", "device_id"]).size()
    per_level: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (config, level, device), part in frame.groupby(["config", "level", "device_id"], sort=True):
        true = part["duration_us"].to_numpy("float64")
        n_asked = int(asked_counts.get((config, level, device), len(part)))
        scope = scope_of(level, device, config)
        for family, column in ((FAMILY_MODEL, "pred_model"), (FAMILY_ROOFLINE, "pred_roofline")):
            mape, within = _errors(part[column].to_numpy("float64"), true)
            result.rows.append(_row(family, scope, "mape", mape, len(part), n_asked))
            result.rows.append(_row(family, scope, "within_10", within, len(part), n_asked))
            per_level.setdefault((config, level), {}).setdefault(family, []).append(mape)
    for (config, level), families in sorted(per_level.items()):
        scope = f"level={level}" + ("" if config == "eager" else f",mode={mode_label(config)}")
        for family, values in families.items():
            result.rows.append(
                _row(
                    family, f"{scope},median GPU", "mape", statistics.median(values), len(values), len(values)
                )
            )
            result.rows.append(
                _row(family, f"{scope},worst GPU", "mape", max(values), len(values), len(values))
            )
    return result


def reason_class(reason: str) -> str:
    """``cannot trace: forward failed: ModuleNotFoundError: No module named 'einops'`` -> a short class
    (``cannot trace (No module named 'einops')``); other reasons as they are."""
    if not reason.startswith("cannot trace"):
        return reason
    text = reason.removeprefix("cannot trace: ")
    return "cannot trace (" + text.split(":", 2)[-1].strip()[:60] + ")"


def summary_lines(bench: KernelBenchBench) -> list[str]:
    """Per level and config: median/worst GPU MAPE of both families (for logs and the report)."""
    out = []
    for row in bench.rows:
        if row["metric"] == "mape" and ("median GPU" in row["scope"] or "worst GPU" in row["scope"]):
            out.append(f"{row['family']:9s} {row['scope']:45s} {100 * (row['ours'] or float('nan')):6.1f}%")
    return out


def read_program_tables(canonical_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measurements, kernels) of the canonical tables with the columns the bench reads; a
    FileNotFoundError saying what is missing (a table, or KernelBench rows in it)."""
    canonical_dir = Path(canonical_dir)
    paths = [canonical_dir / "measurements.parquet", canonical_dir / "kernels.parquet"]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no {missing[0].name} in {canonical_dir}")
    measurements = pd.read_parquet(
        paths[0], columns=["measurement_id", "kernel_id", "device_id", "source", "params_json", "duration_us"]
    )
    kernels = pd.read_parquet(paths[1], columns=["kernel_id", "source", "program", "source_text"])
    kernels = kernels[kernels["source"] == "kernelbench"]
    if not (measurements["source"] == "kernelbench").any():
        raise FileNotFoundError(f"no KernelBench rows in {paths[0]}")
    return measurements, kernels


def extend_result(
    result: Any, canonical_dir: Path, cache_dir: Path, *, log: Callable[[str], None] = lambda _: None
) -> KernelBenchBench:
    """Run the KernelBench bench on ``canonical_dir``'s tables; append its rows and notes to
    ``result`` (a ``bench.BenchResult``)."""
    try:
        measurements, kernels = read_program_tables(canonical_dir)
    except FileNotFoundError as exc:
        result.notes.append(f"{SPLIT}: skipped ({exc})")
        return KernelBenchBench()
    bench = run_kernelbench_bench(measurements, kernels, cache_dir, log=log)
    result.rows += bench.rows
    result.notes += bench.notes
    for line in summary_lines(bench):
        log(line)
    return bench
