"""Deployment benchmark: the composition scored on measured serving runs, one GPU held out at a time.

Splits:
- ``llm-serving-pipeweave``: PipeWeave's offline runs (11 GPUs, TP 1-8). For each held-out GPU the
  framework cost is fitted on the OTHER GPUs' runs; MAPE of prefill, decode step and total per GPU and
  per TP, beside PipeWeave's, NeuSight's, Habitat's and the roofline's published rows and beside our own
  roofline composition (sum of speed-of-light op times, no framework cost).
- ``llm-serving-silicon``: AIConfigurator's steady-serving runs on H100 and H200, each held out of a
  fit on the other; TTFT and TPOT MAPE per model, precision and mode; every run answered or its reason
  counted.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.deployments.compose import BATCH, STEADY, FrameworkCost, compose_phases, memory_check
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.data import (
    AllReduceTable,
    read_allreduce_tables,
    read_pipeweave_runs,
    read_published,
    read_silicon_runs,
)
from components.deployments.ops import OpTimeFn, roofline_op_time

SPLIT_PIPEWEAVE = "llm-serving-pipeweave"
SPLIT_SILICON = "llm-serving-silicon"
SPLITS = (SPLIT_PIPEWEAVE, SPLIT_SILICON)
FAMILY = "deployment"  # the composition with the learned framework cost
FAMILY_ROOFLINE = "roofline-composition"  # sum of speed-of-light op times


def with_allreduce(base: OpTimeFn, tables: Mapping[str, AllReduceTable]) -> OpTimeFn:
    """``base`` with the all-reduce answered from a GPU's measured collective table where there is one."""

    def op_time(family: str, dtype: str, shape: Mapping[str, Any], spec: Any, **kw: Any) -> np.ndarray:
        if family == "allreduce" and spec.id in tables:
            return tables[spec.id](shape["bytes"], shape["gpus"])
        return base(family, dtype, shape, spec, **kw) if kw else base(family, dtype, shape, spec)

    op_time.__signature__ = None  # type: ignore[attr-defined]
    return op_time


@dataclass
class Composed:
    """Kernel-only and roofline step times of every run (microseconds), plus why a run has none."""

    frame: pd.DataFrame
    reasons: Counter = field(default_factory=Counter)


def _features(layers: float, tokens: float, kernels: float) -> list[float]:
    return [1.0, layers, tokens, kernels]


def fit_step_cost(measured_us: np.ndarray, kernels_us: np.ndarray, layers: np.ndarray,
                  tokens: np.ndarray) -> tuple[float, float, float, float]:
    """Least squares on relative error of ``measured = kernels + c0 + c1*layers + c2*tokens + c3*kernels``."""
    x = np.array([_features(a, b, c) for a, b, c in zip(layers, tokens, kernels_us, strict=True)])
    w = 1.0 / measured_us
    coef, *_ = np.linalg.lstsq(x * w[:, None], (measured_us - kernels_us) * w, rcond=None)
    return tuple(float(c) for c in coef)  # type: ignore[return-value]


def _apply(coef: tuple[float, ...], layers: np.ndarray, tokens: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    return kernels + coef[0] + coef[1] * layers + coef[2] * tokens + coef[3] * kernels


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


# ---------------------------------------------------------------- PipeWeave ----------------------------

def compose_pipeweave(runs: pd.DataFrame, catalog: Any, datasets_dir: Path, op_time: OpTimeFn | None = None,
                      allreduce: Mapping[str, AllReduceTable] | None = None) -> pd.DataFrame:
    """Per run: kernel and roofline times of one prefill (the whole batch) and one decode step."""
    tables = read_allreduce_tables(datasets_dir) if allreduce is None else allreduce
    fn = with_allreduce(op_time or roofline_op_time, tables)
    out = []
    for run in runs.itertuples():
        model = model_shape(run.model, datasets_dir)
        spec = catalog.resolve(run.device_id)
        d = Deployment(model=model, gpu=spec, isl=int(round(run.isl)), osl=int(run.osl),
                       concurrency=int(run.batch), tp=int(run.tp))
        ph = compose_phases(d, fn, isl_mean=run.isl)
        out.append({**run._asdict(), "layers": model.layers, "prefill_tokens": run.batch * run.isl,
                    "prefill_kernels_us": ph.prefill_kernels_us, "decode_kernels_us": ph.decode_kernels_us,
                    "prefill_roof_us": sum(x.floor_us for x in ph.prefill),
                    "decode_roof_us": sum(x.floor_us for x in ph.decode)})
    frame = pd.DataFrame(out)
    return frame.drop(columns=["Index"], errors="ignore")


def fit_pipeweave(train: pd.DataFrame) -> FrameworkCost:
    pre = fit_step_cost(train["prefill_ms"].to_numpy() * 1e3, train["prefill_kernels_us"].to_numpy(),
                        train["layers"].to_numpy(float), train["prefill_tokens"].to_numpy(float))
    dec = fit_step_cost(train["decode_ms"].to_numpy() * 1e3, train["decode_kernels_us"].to_numpy(),
                        train["layers"].to_numpy(float), train["batch"].to_numpy(float))
    fw = FrameworkCost(prefill=pre, decode=dec, source=f"PipeWeave runs on {', '.join(sorted(train['gpu'].unique()))}")
    pred = predict_pipeweave(train, fw)
    mape = {"ttft_ms": _mape(pred["prefill_pred_ms"].to_numpy(), train["prefill_ms"].to_numpy()),
            "tpot_ms": _mape(pred["decode_pred_ms"].to_numpy(), train["decode_ms"].to_numpy())}
    return FrameworkCost(prefill=pre, decode=dec, source=fw.source, train_mape=mape)


def predict_pipeweave(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    layers = frame["layers"].to_numpy(float)
    out = frame.copy()
    out["prefill_pred_ms"] = _apply(fw.prefill, layers, frame["prefill_tokens"].to_numpy(float),
                                    frame["prefill_kernels_us"].to_numpy()) / 1e3
    out["decode_pred_ms"] = _apply(fw.decode, layers, frame["batch"].to_numpy(float),
                                   frame["decode_kernels_us"].to_numpy()) / 1e3
    out["total_pred_ms"] = out["prefill_pred_ms"] + out["osl"] * out["decode_pred_ms"]
    out["prefill_roof_ms"] = frame["prefill_roof_us"] / 1e3
    out["decode_roof_ms"] = frame["decode_roof_us"] / 1e3
    out["total_roof_ms"] = out["prefill_roof_ms"] + out["osl"] * out["decode_roof_ms"]
    return out


def _row(split: str, family: str, target: str, scope: str, value: float | None, n: int, n_asked: int,
         published: float | None = None, by: str | None = None) -> dict[str, Any]:
    ok = value is not None and np.isfinite(value)
    return {"split": split, "family": family, "target": f"{target}[{scope}]" if scope else target, "scope": scope,
            "metric": "mape", "ours": round(float(value), 4) if ok else None, "n": int(n), "n_asked": int(n_asked),
            "coverage": round(n / n_asked, 4) if n_asked else None,
            "published": None if published is None else round(float(published), 4), "published_by": by}


@dataclass
class ServingBench:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions: pd.DataFrame | None = None


def run_pipeweave_bench(datasets_dir: Path, catalog: Any, op_time: OpTimeFn | None = None,
                        log: Callable[[str], None] = lambda _: None) -> ServingBench:
    """Leave one GPU out: fit the framework cost on the other GPUs, score the held-out GPU's runs."""
    runs = read_pipeweave_runs(datasets_dir)
    composed = compose_pipeweave(runs, catalog, datasets_dir, op_time)
    folds = []
    for gpu in sorted(composed["gpu"].unique()):
        test = composed["gpu"] == gpu
        fw = fit_pipeweave(composed[~test])
        folds.append(predict_pipeweave(composed[test], fw))
    pred = pd.concat(folds, ignore_index=True)
    bench = ServingBench(predictions=pred)
    published = read_published(datasets_dir)
    targets = ("prefill", "decode", "total")
    for scope_col in ("", "gpu", "tp"):
        groups = [("", pred)] if not scope_col else [(f"{scope_col}={k}", g) for k, g in pred.groupby(scope_col)]
        for scope, g in groups:
            for target in targets:
                ours = _mape(g[f"{target}_pred_ms"].to_numpy(), g[f"{target}_ms"].to_numpy())
                roof = _mape(g[f"{target}_roof_ms"].to_numpy(), g[f"{target}_ms"].to_numpy())
                pub = _published_mape(published, "pipeweave", scope, target)
                bench.rows.append(_row(SPLIT_PIPEWEAVE, FAMILY, f"{target}_ms", scope, ours, len(g), len(g), pub,
                                       "PipeWeave (published)" if pub is not None else None))
                bench.rows.append(_row(SPLIT_PIPEWEAVE, FAMILY_ROOFLINE, f"{target}_ms", scope, roof, len(g), len(g)))
                for method in ("neusight", "habitat", "roofline"):
                    other = _published_mape(published, method, scope, target)
                    if other is not None:
                        bench.rows.append(_row(SPLIT_PIPEWEAVE, f"published:{method}", f"{target}_ms", scope, other,
                                               0, 0))
    worse = [g for g, sub in pred.groupby("gpu")
             if _mape(sub["total_pred_ms"].to_numpy(), sub["total_ms"].to_numpy())
             > _mape(sub["total_roof_ms"].to_numpy(), sub["total_ms"].to_numpy())]
    bench.notes.append(f"{SPLIT_PIPEWEAVE}: {len(pred)} runs on {pred['gpu'].nunique()} GPUs, leave-one-GPU-out "
                       f"(framework cost refitted per fold on the other GPUs); total worse than the roofline "
                       f"composition on: {', '.join(worse) or 'none'}")
    for line in pipeweave_summary(bench):
        log(line)
    return bench


def _published_mape(published: pd.DataFrame, method: str, scope: str, target: str) -> float | None:
    """Mean of a method's published per-run MAPE over the scope's runs (fractions)."""
    if published.empty:
        return None
    rows = published[published["method"] == method]
    if scope.startswith("gpu="):
        rows = rows[rows["gpu"] == scope[4:]]
    elif scope.startswith("tp="):
        rows = rows[rows["tp"] == int(scope[3:])]
    if rows.empty:
        return None
    return float(rows[f"MAPE_{target}(%)"].mean()) / 100.0


def pipeweave_summary(bench: ServingBench) -> list[str]:
    lines = []
    for row in bench.rows:
        if row["family"] == FAMILY:
            roof = next((r["ours"] for r in bench.rows if r["family"] == FAMILY_ROOFLINE
                         and r["target"] == row["target"]), None)
            pub = f"{row['published']:.1%}" if row["published"] is not None else "-"
            lines.append(f"{row['target']:32s} ours {row['ours']:.1%}  roofline-comp {roof:.1%}  pipeweave {pub}  "
                         f"n={row['n']}")
    return lines
