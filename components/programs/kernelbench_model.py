"""Fit the program model on KernelBench timings: the table of traced programs x GPUs, and the fit.

``program_table`` turns ``KernelBenchData`` into one row per (program, GPU, run config) with the
program features in a basis (the op predictor's op times, or the roofline's) and the measured
``duration_us``. ``fit_program_model`` fits one ``ConfigModel`` per config with enough rows.
``fit_for_predictor`` is what the train stage calls: fit on the train side's KernelBench rows and
save under ``models/programs/<basis>.json`` (and a copy in the predictor's folder).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.ingest.kernelbench_profiled import PROFILED
from components.programs.kernelbench_data import SOURCE, KernelBenchData
from components.programs.ops import ProgramOps, program_ops
from components.programs.overheads import (
    HEAD_START,
    MODEL_FILE,
    ConfigModel,
    ProgramModel,
    fit_config,
    gpu_grouped_q_log,
    kind_sums,
)

# The canonical sources whose rows time KernelBench problems: KernelBench's own files, and kernelcast's
# runs of the bundled problems (components.ingest.kernelbench_profiled).
TIMING_SOURCES = (SOURCE, PROFILED)
MIN_CONFIG_ROWS = 100  # a run config with fewer timed rows (or on one GPU only) gets no model
MIN_CONFIG_DEVICES = 2


def program_table(data: KernelBenchData, catalog: Any, op_predictor: Any = None) -> pd.DataFrame:
    """Rows of ``data.rows`` with program features; ``pred_<kind>`` in the op predictor's basis
    (the roofline's when None), ``roof_sum_us`` the trace roofline."""
    from components.programs.program_features import timed_programs

    kernel_ids = sorted(data.traces)
    programs: list[ProgramOps] = [program_ops(data.traces[k].ops) for k in kernel_ids]
    devices = sorted(set(data.rows["device_id"].astype(str)) & set(catalog.ids()))
    times, features = timed_programs(programs, devices, catalog, op_predictor)
    features = features.merge(
        kind_sums(times.frame, "pred_us", "pred"), on=["program", "device_id"], how="left"
    )
    features["kernel_id"] = [kernel_ids[p] for p in features["program"]]
    features = features.drop(columns="program")
    table = data.rows.drop(columns=[c for c in ("program",) if c in data.rows.columns]).merge(
        features, on=["kernel_id", "device_id"], how="inner"
    )
    table = table.fillna({c: 0.0 for c in table.columns if c.startswith("pred_")})
    return table.assign(**{HEAD_START: head_start_us(table)})


def head_start_us(table: pd.DataFrame) -> np.ndarray:
    """Host time a timing harness lets pass before its first event: kernelcast's events backend zeroes
    ``flush_bytes`` before each timed call without waiting, and the host dispatches the forward while the
    GPU writes them at its DRAM bandwidth (``dram_gbps``); 0 for KernelBench's own files (no flush)."""
    flushed = (
        table["flush_bytes"].to_numpy("float64") if "flush_bytes" in table.columns else np.zeros(len(table))
    )
    gbps = np.clip(table["dram_gbps"].to_numpy("float64"), 1.0, None)
    return np.nan_to_num(flushed) / (gbps * 1e3)


def fit_program_model(
    table: pd.DataFrame,
    basis: str,
    *,
    residual: bool = True,
    min_rows: int = MIN_CONFIG_ROWS,
    interval: bool = False,
    stands: Collection[str] = (),
    log: Callable[[str], None] = lambda _: None,
) -> ProgramModel:
    """One model per config with at least ``min_rows`` rows on MIN_CONFIG_DEVICES GPUs; ``stands``: the op
    kinds whose basis times are the op engine's answers (no factor learned for them)."""
    configs: dict[str, ConfigModel] = {}
    for config, rows in table.groupby("config", sort=True):
        if len(rows) < min_rows or rows["device_id"].nunique() < MIN_CONFIG_DEVICES:
            log(f"program model: {config} skipped ({len(rows)} rows on {rows['device_id'].nunique()} GPUs)")
            continue
        target = rows["duration_us"].to_numpy("float64")
        model = fit_config(rows.reset_index(drop=True), target, residual=residual, stands=stands)
        if interval and config == "eager":  # the answers module questions get (predict_module: eager)
            model.q_log = gpu_grouped_q_log(
                rows.reset_index(drop=True), target, residual=residual, stands=stands
            )
        configs[str(config)] = model
    if "eager" not in configs:
        raise ValueError("no eager KernelBench timings to fit the program model on")
    return ProgramModel(basis, configs)


def fit_for_predictor(
    predictor: Any,
    measurements: pd.DataFrame,
    kernels: pd.DataFrame,
    settings: Any,
    *,
    train_ids: Collection[str] | None = None,
    predictor_dir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    roofline: bool = True,
) -> list[Path]:
    """Fit the program model for ``predictor`` (and, with ``roofline``, the roofline basis) on the KernelBench
    rows whose measurement ids are in ``train_ids`` (the fold's train side; all when None); save both under
    ``models/programs/`` and the predictor's own one in ``predictor_dir``. Returns the files written."""
    from components.devices import load_catalog
    from components.programs.engine_ops import engine_kinds
    from components.programs.kernelbench_data import load_kernelbench
    from components.programs.module_predict import ROOFLINE_BASIS, basis_id, program_model_path

    rows = measurements[measurements["source"] == "kernelbench"]
    if train_ids is not None:
        rows = rows[rows["measurement_id"].isin(set(train_ids))]
    if rows.empty:
        log("program model: no KernelBench rows on the train side; not fitted")
        return []
    data = load_kernelbench(rows, kernels, settings.cache_dir, log=log)
    catalog = load_catalog()
    written: list[Path] = []
    bases: list[tuple[str, Any]] = [(ROOFLINE_BASIS, None)] if roofline else []
    if predictor is not None and basis_id(predictor) != ROOFLINE_BASIS:
        # The id of the predictor as it will be loaded (from its folder: MLflow copy, serving flat
        # trees), which is what a module question sees.
        reloaded = predictor
        if predictor_dir is not None:
            from components.models import load_predictor

            reloaded = load_predictor(Path(predictor_dir))
        bases.append((basis_id(reloaded), predictor))
    for basis, op_predictor in bases:
        table = program_table(data, catalog, op_predictor)
        model = fit_program_model(table, basis, interval=True, stands=engine_kinds(op_predictor), log=log)
        written.append(model.save(program_model_path(settings.models_dir, basis)))
        if predictor_dir is not None and op_predictor is predictor:
            written.append(model.save(Path(predictor_dir) / MODEL_FILE))
        log(
            f"program model ({basis}): {', '.join(f'{k} {v.n_train} rows' for k, v in model.configs.items())}"
        )
    return written


def fit_after_training(
    predictor: Any,
    train_side: pd.DataFrame,
    settings: Any,
    predictor_dir: Path | None,
    log: Callable[[str], None] = lambda _: None,
    roofline: bool = True,
) -> list[Path]:
    """The train stage's hook: fit the program models on the KernelBench rows of the fold's train
    side (canonical tables under ``settings.data_dir``). A missing table or KernelBench source is
    said and skipped -- module questions then answer with the roofline-basis or untrained model.
    ``roofline=False``: the predictor's basis only (the stage fits the roofline basis beside it,
    :func:`fit_roofline_basis`); ``predictor=None``: the roofline basis only."""
    tables = _train_side_tables(train_side, settings, log)
    if tables is None:
        return []
    measurements, kernels, ids = tables
    try:
        return fit_for_predictor(
            predictor,
            measurements,
            kernels,
            settings,
            train_ids=ids,
            predictor_dir=predictor_dir,
            log=log,
            roofline=roofline,
        )
    except ValueError as exc:  # e.g. no eager timings on this side: say so, the op model stands
        log(f"program model: not fitted ({exc})")
        return []


def _train_side_tables(
    train_side: pd.DataFrame, settings: Any, log: Callable[[str], None]
) -> tuple[pd.DataFrame, pd.DataFrame, set[str]] | None:
    """(KernelBench timings, KernelBench kernels, their train-side measurement ids), or None (said) when there
    are none. The timings are the canonical ``kernelbench`` rows and the KernelBench problems kernelcast timed
    itself (``ingest.kernelbench_profiled.kernelbench_timings``: the problem's kernel id, the harness's flush
    in the params). A profiled timing joins when its own row is on the train side and its problem is too (a
    held-out problem is held out on every GPU)."""
    from components.ingest.kernelbench_profiled import kernelbench_timings

    canonical = Path(settings.data_dir) / "canonical"
    paths = [canonical / "measurements.parquet", canonical / "kernels.parquet"]
    if not all(p.is_file() for p in paths) or "measurement_id" not in train_side.columns:
        log(f"program model: skipped (no canonical tables in {canonical})")
        return None
    sides = train_side[train_side["source"].isin(TIMING_SOURCES)]
    ids = set(sides.loc[sides["source"] == SOURCE, "measurement_id"].astype(str))
    if not ids:
        log("program model: skipped (no KernelBench rows on the train side)")
        return None
    read = ["measurement_id", "kernel_id", "device_id", "source", "profiler", "params_json", "duration_us"]
    measurements = pd.read_parquet(paths[0], columns=read, filters=[("source", "in", list(TIMING_SOURCES))])
    kernels = pd.read_parquet(
        paths[1],
        columns=["kernel_id", "source", "family", "program", "source_text"],
        filters=[("source", "in", list(TIMING_SOURCES))],
    )
    own = measurements[measurements["source"] == SOURCE]
    profiled, unrecorded = kernelbench_timings(measurements, kernels)
    if unrecorded:
        log(
            f"program model: {unrecorded} profiled KernelBench timings without their flush recorded: left out"
        )
    train_problems = set(own.loc[own["measurement_id"].isin(ids), "kernel_id"])
    joins = profiled["measurement_id"].isin(set(sides["measurement_id"].astype(str))) & profiled[
        "kernel_id"
    ].isin(train_problems)
    devices = sorted(profiled.loc[joins, "device_id"].astype(str).unique())
    log(
        f"program model: {int(joins.sum())} of {len(profiled)} profiled KernelBench timings on the train "
        f"side ({', '.join(devices) or 'none'})"
    )
    columns = own.columns.drop("profiler")
    timings = pd.concat([own[columns], profiled[columns]], ignore_index=True)
    return timings, kernels[kernels["source"] == SOURCE], ids | set(profiled.loc[joins, "measurement_id"])


def trace_train_side(
    train_side: pd.DataFrame, settings: Any, log: Callable[[str], None] = lambda _: None
) -> None:
    """Trace into the cache the KernelBench modules :func:`fit_after_training` will read (those of the train
    side's rows), so that it finds them cached: the train stage does this while the op engine, which the
    program model waits for, fits in a process of its own. The fit's answers are the same either way."""
    from components.programs.kernelbench_data import cached_traces, module_texts

    tables = _train_side_tables(train_side, settings, lambda _: None)
    if tables is None:
        return
    measurements, kernels, ids = tables
    rows = measurements[(measurements["source"] == "kernelbench") & measurements["measurement_id"].isin(ids)]
    texts = module_texts(
        rows["kernel_id"].unique(), kernels.drop_duplicates("kernel_id").set_index("kernel_id")
    )
    cached_traces(texts, settings.cache_dir, log=log)


def fit_roofline_basis(
    train_side: pd.DataFrame, settings: Any, log: Callable[[str], None] = lambda _: None
) -> list[Path]:
    """The roofline basis's program model of :func:`fit_after_training` alone (it reads no predictor): the
    train stage fits it in the traces' process, once they are cached, beside the predictor's basis."""
    return fit_after_training(None, train_side, settings, None, log)
