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

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.deployments.compose import (
    OVERHEADS,
    DoesNotFit,
    FrameworkCost,
    compose_many,
    memory_check,
    overhead_counts,
    steady_features,
)
from components.deployments.config import Deployment, DeploymentError, model_shape
from components.deployments.data import (
    AllReduceTable,
    read_allreduce_tables,
    read_pipeweave_runs,
    read_published,
    read_silicon_runs,
)
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    Timed,
    engine_op_time,
    has_data,
    roofline_op_time,
)

SPLIT_PIPEWEAVE = "llm-serving-pipeweave"
SPLIT_SILICON = "llm-serving-silicon"
SPLITS = (SPLIT_PIPEWEAVE, SPLIT_SILICON)
FAMILY = "deployment"  # the composition with the learned framework cost
FAMILY_ROOFLINE = "roofline-composition"  # sum of speed-of-light op times
FAMILY_ROOF_OPS = "deployment:roofline-ops"  # op times from the fixed-efficiency roofline (ops.EFFICIENCY)
FAMILY_ENGINE = "deployment:engine"  # the op engine as the product answers (measured tier where stored)
FAMILY_UNSEEN = "deployment:unseen-gpu"  # the chosen composition with the held-out GPU's kernels withheld


def with_allreduce(base: OpTimeFn, tables: Mapping[str, AllReduceTable]) -> OpTimeFn:
    """``base`` with the all-reduce answered from a GPU's measured collective table where there is one."""

    def op_time(family: str, dtype: str, shape: Mapping[str, Any], spec: Any, **kw: Any) -> np.ndarray:
        if family == "allreduce" and spec.id in tables:
            return Timed(tables[spec.id](shape["bytes"], shape["gpus"]), "measured")
        return base(family, dtype, shape, spec, **kw) if kw else base(family, dtype, shape, spec)

    op_time.__signature__ = None  # type: ignore[attr-defined]
    return op_time


@dataclass
class Composed:
    """Kernel-only and roofline step times of every run (microseconds), plus why a run has none."""

    frame: pd.DataFrame
    reasons: Counter = field(default_factory=Counter)


def _design(layers: np.ndarray, tokens: np.ndarray, kernels: np.ndarray, overheads: np.ndarray) -> np.ndarray:
    """Columns of a step's framework cost: 1, layers, tokens, kernels, launches, all-reduces, x GPUs."""
    return np.c_[np.ones(len(layers)), layers, tokens, kernels, overheads]


def fit_step_cost(
    measured_us: np.ndarray,
    kernels_us: np.ndarray,
    layers: np.ndarray,
    tokens: np.ndarray,
    overheads: np.ndarray,
) -> tuple[float, ...]:
    """Least absolute relative error of ``measured = kernels + design @ c`` (see ``FrameworkCost``): the fit
    minimises the training runs' MAPE, the figure the benches report.

    Every overhead (constant, per layer, per token, per launch, per all-reduce) is bounded at >= 0 (a
    framework never makes a step faster than its kernels; a negative intercept fitted on 16k-90k-token
    batches would make a short prompt's prefill negative); the efficiency correction c3 stays within
    (-0.5, 1): kernels at most 2x faster than the op predictor says.
    """
    x = _design(layers, tokens, kernels_us, overheads)
    lower = [0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0]
    upper = [None, None, None, 1.0, None, None, None]
    coef = relative_l1(x, measured_us - kernels_us, measured_us, list(zip(lower, upper, strict=True)))
    return tuple(float(c) for c in _unseen_to_zero(coef, x))


def relative_l1(
    x: np.ndarray, target: np.ndarray, scale: np.ndarray, bounds: list[tuple[float | None, float | None]]
) -> np.ndarray:
    """``c`` within ``bounds`` minimising sum |x @ c - target| / scale: a linear program (HiGHS) with one
    slack per run. Least absolute relative error is the estimator of the MAPE the benches score; relative
    least squares pulls the fit towards the runs with the largest relative residuals."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, identity, vstack

    n, k = x.shape
    a = csr_matrix(x / scale[:, None])
    b = target / scale
    eye = identity(n, format="csr")
    result = linprog(
        np.r_[np.zeros(k), np.ones(n)],
        A_ub=vstack([hstack([a, -eye]), hstack([-a, -eye])]),
        b_ub=np.r_[b, -b],
        bounds=[*bounds, *[(0.0, None)] * n],
        method="highs",
    )
    if not result.success:  # infeasible cannot happen (slacks absorb any residual); say so if it does
        raise ValueError(f"framework-cost fit failed: {result.message}")
    return np.asarray(result.x[:k], dtype="float64")


def _apply(
    coef: tuple[float, ...],
    layers: np.ndarray,
    tokens: np.ndarray,
    kernels: np.ndarray,
    overheads: np.ndarray,
) -> np.ndarray:
    return kernels + _design(layers, tokens, kernels, overheads) @ np.asarray(coef)


def _overheads(frame: pd.DataFrame, prefix: str) -> np.ndarray:
    return frame[[f"{prefix}_{name}" for name in OVERHEADS]].to_numpy(float)


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


# ---------------------------------------------------------------- PipeWeave ----------------------------


def compose_pipeweave(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None = None,
    allreduce: Mapping[str, AllReduceTable] | None = None,
    refused: list[dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """Per run: kernel and roofline times of one prefill (the whole batch) and one decode step (all runs of
    a GPU timed in one batch per kind of op).

    With ``refused`` (a list), a run without an answer is appended there with its reason and skipped;
    without, its error propagates."""
    tables = read_allreduce_tables(datasets_dir) if allreduce is None else allreduce
    fn = with_allreduce(op_time or roofline_op_time, tables)
    kept, deployments = [], []
    for run in runs.itertuples():
        try:
            model = model_shape(run.model, datasets_dir)
            spec = catalog.resolve(run.device_id)
            d = Deployment(
                model=model, gpu=spec, isl=round(run.isl), osl=int(run.osl), concurrency=run.batch, tp=run.tp
            )
        except (DeploymentError, LookupError) as exc:
            if refused is None:
                raise
            refused.append(
                {
                    "id": f"{run.gpu}/tp{run.tp}/{run.model}-{run.workload}",
                    "device_id": run.device_id,
                    "reason": _reason(exc),
                }
            )
            continue
        kept.append(run)
        deployments.append(d)
    phases = compose_many(deployments, fn, [float(run.isl) for run in kept])
    out = [
        {
            **run._asdict(),
            "layers": d.model.layers,
            "prefill_tokens": run.batch * run.isl,
            "prefill_kernels_us": ph.prefill_kernels_us,
            "decode_kernels_us": ph.decode_kernels_us,
            "prefill_roof_us": sum(x.floor_us for x in ph.prefill),
            "decode_roof_us": sum(x.floor_us for x in ph.decode),
            **_named("prefill", overhead_counts(ph.prefill)),
            **_named("decode", overhead_counts(ph.decode)),
            **_tier_shares(ph.prefill + ph.decode),
        }
        for run, d, ph in zip(kept, deployments, phases, strict=True)
    ]
    frame = pd.DataFrame(out)
    return frame.drop(columns=["Index"], errors="ignore")


def _tier_shares(lines: list[Any]) -> dict[str, float]:
    """Share of the kernel time each tier answered (``tier_measured``, ``tier_spec``, ``tier_roofline``)."""
    total = sum(x.time_us for x in lines) or 1.0
    shares: dict[str, float] = {}
    for x in lines:
        for name in x.tier.split("+"):
            key = f"tier_{name}"
            shares[key] = shares.get(key, 0.0) + x.time_us / total / len(x.tier.split("+"))
    return shares


def _named(prefix: str, counts: np.ndarray) -> dict[str, float]:
    return {f"{prefix}_{name}": float(v) for name, v in zip(OVERHEADS, counts, strict=True)}


def fit_pipeweave(train: pd.DataFrame) -> FrameworkCost:
    pre = fit_step_cost(
        train["prefill_ms"].to_numpy() * 1e3,
        train["prefill_kernels_us"].to_numpy(),
        train["layers"].to_numpy(float),
        train["prefill_tokens"].to_numpy(float),
        _overheads(train, "prefill"),
    )
    dec = fit_step_cost(
        train["decode_ms"].to_numpy() * 1e3,
        train["decode_kernels_us"].to_numpy(),
        train["layers"].to_numpy(float),
        train["batch"].to_numpy(float),
        _overheads(train, "decode"),
    )
    fw = FrameworkCost(
        prefill=pre, decode=dec, source=f"PipeWeave runs on {', '.join(sorted(train['gpu'].unique()))}"
    )
    pred = predict_pipeweave(train, fw)
    mape = {
        "prefill": _mape(pred["prefill_pred_ms"].to_numpy(), train["prefill_ms"].to_numpy()),
        "decode": _mape(pred["decode_pred_ms"].to_numpy(), train["decode_ms"].to_numpy()),
    }
    return FrameworkCost(prefill=pre, decode=dec, source=fw.source, train_mape=mape)


def predict_pipeweave(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    layers = frame["layers"].to_numpy(float)
    out = frame.copy()
    out["prefill_pred_ms"] = (
        _apply(
            fw.prefill,
            layers,
            frame["prefill_tokens"].to_numpy(float),
            frame["prefill_kernels_us"].to_numpy(),
            _overheads(frame, "prefill"),
        )
        / 1e3
    )
    out["decode_pred_ms"] = (
        _apply(
            fw.decode,
            layers,
            frame["batch"].to_numpy(float),
            frame["decode_kernels_us"].to_numpy(),
            _overheads(frame, "decode"),
        )
        / 1e3
    )
    # never below the roofline: a negative efficiency correction cannot take a step under its floor
    out["prefill_pred_ms"] = np.maximum(out["prefill_pred_ms"], frame["prefill_roof_us"] / 1e3)
    out["decode_pred_ms"] = np.maximum(out["decode_pred_ms"], frame["decode_roof_us"] / 1e3)
    out["total_pred_ms"] = out["prefill_pred_ms"] + out["osl"] * out["decode_pred_ms"]
    out["prefill_roof_ms"] = frame["prefill_roof_us"] / 1e3
    out["decode_roof_ms"] = frame["decode_roof_us"] / 1e3
    out["total_roof_ms"] = out["prefill_roof_ms"] + out["osl"] * out["decode_roof_ms"]
    return out


def _row(
    split: str,
    family: str,
    target: str,
    scope: str,
    value: float | None,
    n: int,
    n_asked: int,
    published: float | None = None,
    by: str | None = None,
) -> dict[str, Any]:
    ok = value is not None and np.isfinite(value)
    return {
        "split": split,
        "family": family,
        "target": f"{target}[{scope}]" if scope else target,
        "scope": scope,
        "metric": "mape",
        "ours": round(float(value), 4) if ok else None,
        "n": int(n),
        "n_asked": int(n_asked),
        "coverage": round(n / n_asked, 4) if n_asked else None,
        "published": None if published is None else round(float(published), 4),
        "published_by": by,
    }


@dataclass
class ServingBench:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions: pd.DataFrame | None = None
    variants: dict[str, pd.DataFrame] = field(default_factory=dict)  # family -> predictions


def op_sources(engine: Any, unseen: bool = True) -> dict[str, Any]:
    """The op-time functions a bench composes with: the fixed-efficiency roofline always; with an engine that
    has data, the engine as the product answers (measured tier on GPUs in its store) and the engine blind
    to every GPU's own kernels (spec tier only: the GPU treated as one no file has)."""
    sources: dict[str, Any] = {ROOFLINE_SOURCE: roofline_op_time}
    if has_data(engine):
        sources[ENGINE_SOURCE] = engine_op_time(engine)
        if unseen:
            sources[UNSEEN] = engine_op_time(engine, unseen=_EVERY_GPU)
    return sources


class _Every(frozenset):
    """Every GPU id (``engine_op_time``'s ``unseen``): the spec tier answers for all."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERY_GPU = _Every()
UNSEEN = "engine-unseen"  # the op engine without the held-out GPU's measured kernels (spec tier)
# Bench families per op source (FAMILY is the composition chosen per fold on its training side)
SOURCE_FAMILY = {ROOFLINE_SOURCE: FAMILY_ROOF_OPS, ENGINE_SOURCE: FAMILY_ENGINE}


_UNSEEN_ENGINES: dict[tuple[str, str], Any] = {}


def unseen_engine(engine: Any, held: str, datasets_dir: Path) -> Any:
    """``engine`` as it would be had no file measured ``held``: no measured tables, and the spec model (GEMM
    and attention boosters, MoE and all-reduce priors) refitted without ``held``'s kernel rows, at the
    production caps (``opmodel.train.PER_GROUP``, ``spec.ROUNDS``). Cached per (store, GPU)."""
    from components.devices.catalog import load_catalog
    from components.opmodel import spec as spec_tier
    from components.opmodel.engine import OpEngine
    from components.opmodel.store import load_store
    from components.opmodel.train import PER_GROUP

    key = (str(engine.store_dir), held)
    if key not in _UNSEEN_ENGINES:
        catalog = load_catalog()
        store = load_store(Path(engine.store_dir), spec_tier.SPEC_FAMILIES)
        rows = spec_tier.training_rows(store, Path(datasets_dir), per_group=PER_GROUP)
        rows = {f: r[r["device_id"] != held] for f, r in rows.items()}
        others = load_store(Path(engine.store_dir), spec_tier.PRIOR_ONLY_FAMILIES)
        others = {f: r[r["device_id"] != held] for f, r in others.items()}
        frames = (*rows.values(), *others.values())
        devices = {str(d) for frame in frames for d in frame["device_id"].unique()}
        specs = {d: catalog.get(d) for d in devices if d in catalog}
        model = spec_tier.fit_priors(spec_tier.fit(rows, specs), others, specs)
        _UNSEEN_ENGINES[key] = OpEngine(
            None, model, None, engine.intervals, engine.meta, None, engine.fallback_util
        )
    return _UNSEEN_ENGINES[key]


def spec_trained_on(engine: Any) -> set[str]:
    """GPUs whose kernel rows trained the engine's spec model (its refit for an unseen fold drops them)."""
    if engine is None or getattr(engine, "spec_model", None) is None or engine.store_dir is None:
        return set()
    return {str(d) for d in (engine.meta or {}).get("devices", [])}


def _blind_refit(
    frame: pd.DataFrame,
    engine: Any,
    datasets_dir: Path,
    compose: Callable[[pd.DataFrame, OpTimeFn], pd.DataFrame],
    key: str,
    log: Callable[[str], None],
) -> pd.DataFrame:
    """The unseen-GPU frame with the rows of each GPU that trained the spec model recomposed by the engine
    refitted without that GPU (``unseen_engine``): its kernel tables inform nothing of its own answers."""
    trained = spec_trained_on(engine)
    parts = [frame[~frame["device_id"].isin(trained)]]
    for held in sorted(trained & set(frame["device_id"])):
        log(f"unseen-GPU variant: spec tier refitted without {held}")
        blind = engine_op_time(unseen_engine(engine, held, datasets_dir), unseen=_EVERY_GPU)
        parts.append(compose(frame[frame["device_id"] == held], blind))
    return pd.concat(parts, ignore_index=True).sort_values(key).reset_index(drop=True)


def _aligned(frames: dict[str, pd.DataFrame], key: str) -> dict[str, pd.DataFrame]:
    """The runs every source answered, in one order (a source may refuse a run the others answer)."""
    common = set.intersection(*(set(f[key]) for f in frames.values()))
    return {k: f[f[key].isin(common)].sort_values(key).reset_index(drop=True) for k, f in frames.items()}


def choose_source(
    frames: dict[str, pd.DataFrame],
    group: str,
    fit: Callable[[pd.DataFrame], Any],
    predict: Callable[[pd.DataFrame, Any], pd.DataFrame],
    targets: dict[str, str],
) -> dict[str, str]:
    """Per target (``{name: column of the truth}``; e.g. prefill and decode): the op source (roofline, or the
    engine as the product answers) with the lower mean error over an inner leave-one-``group``-out of
    ``frames`` -- which hold a fold's TRAINING runs only. Each phase's framework cost is fitted on its own
    op times, so each phase may take its own source."""
    errors: dict[str, dict[str, float]] = defaultdict(dict)
    for source in (ROOFLINE_SOURCE, ENGINE_SOURCE):
        frame = frames.get(source)
        if frame is None or frame[group].nunique() < 2:
            continue
        preds = [
            predict(frame[frame[group] == g], fit(frame[frame[group] != g]))
            for g in sorted(frame[group].unique())
        ]
        for target, truth in targets.items():
            errors[target][source] = float(
                np.mean([_mape(p[f"{target}_pred_ms"].to_numpy(), p[truth].to_numpy()) for p in preds])
            )
    return {t: min(errors[t], key=errors[t].__getitem__) if errors[t] else ROOFLINE_SOURCE for t in targets}


def _blind(choice: dict[str, str]) -> dict[str, str]:
    return {t: UNSEEN if source == ENGINE_SOURCE else source for t, source in choice.items()}


def _combine(preds: dict[str, pd.DataFrame], choice: dict[str, str], osl: bool) -> pd.DataFrame:
    """One frame whose ``<target>_pred_ms`` come each from its chosen source (frames are aligned)."""
    first = next(iter(choice.values()))
    out = preds[first].copy()
    for target, source in choice.items():
        out[f"{target}_pred_ms"] = preds[source][f"{target}_pred_ms"].to_numpy()
        out[f"{target}_source"] = source
    if osl:
        out["total_pred_ms"] = out["prefill_pred_ms"] + out["osl"] * out["decode_pred_ms"]
    return out


PW_TARGETS = ("prefill", "decode", "total")


def run_pipeweave_bench(
    datasets_dir: Path,
    catalog: Any,
    op_time: OpTimeFn | None = None,
    log: Callable[[str], None] = lambda _: None,
    runs: pd.DataFrame | None = None,
    engine: Any = None,
    variants: bool = True,
) -> ServingBench:
    """Leave one GPU out: per fold, choose the op source (roofline or engine) by an inner leave-one-GPU-out
    on the training GPUs, fit the framework cost on the training GPUs with those op times, score the
    held-out GPU's runs. Also scored per fold: each source on its own, and the engine blind to the held-out
    GPU's kernels (spec tier) with the framework cost fitted on the engine's training-side times."""
    runs = read_pipeweave_runs(datasets_dir) if runs is None else runs
    runs = runs.assign(
        run_id=[f"{r.gpu}/tp{r.tp}/{r.model}/{r.workload}/{i}" for i, r in enumerate(runs.itertuples())]
    )
    sources = {ROOFLINE_SOURCE: op_time} if op_time is not None else op_sources(engine, variants)
    frames = _aligned(
        {k: compose_pipeweave(runs, catalog, datasets_dir, fn) for k, fn in sources.items()}, "run_id"
    )
    if UNSEEN in frames:
        asked = runs.set_index("run_id")

        def recompose(part: pd.DataFrame, fn: OpTimeFn) -> pd.DataFrame:
            return compose_pipeweave(asked.loc[part["run_id"]].reset_index(), catalog, datasets_dir, fn)

        frames[UNSEEN] = _blind_refit(frames[UNSEEN], engine, datasets_dir, recompose, "run_id", log)
    folds: dict[str, list[pd.DataFrame]] = defaultdict(list)
    chosen: dict[str, str] = {}
    base = frames[ROOFLINE_SOURCE]
    for gpu in sorted(base["gpu"].unique()):
        test = base["gpu"] == gpu
        fitted = {k: fit_pipeweave(f[~test]) for k, f in frames.items() if k != UNSEEN}
        held = {}
        for k, f in frames.items():
            held[k] = predict_pipeweave(f[test], fitted[ENGINE_SOURCE if k == UNSEEN else k])
            if k in SOURCE_FAMILY:
                folds[SOURCE_FAMILY[k]].append(held[k])
        choice = choose_source(
            {k: f[~test] for k, f in frames.items()},
            "gpu",
            fit_pipeweave,
            predict_pipeweave,
            {"prefill": "prefill_ms", "decode": "decode_ms"},
        )
        chosen[gpu] = f"prefill {choice['prefill']}, decode {choice['decode']}"
        folds[FAMILY].append(_combine(held, choice, osl=True))
        if UNSEEN in held:  # the same choice, the held-out GPU's own kernels withheld (same framework fit)
            folds[FAMILY_UNSEEN].append(_combine(held, _blind(choice), osl=True))
    preds = {family: pd.concat(parts, ignore_index=True) for family, parts in folds.items()}
    pred = preds[FAMILY]
    bench = ServingBench(predictions=pred, variants=preds)
    published = read_published(datasets_dir)
    for scope_col in ("", "gpu", "tp"):
        groups = (
            [("", pred)] if not scope_col else [(f"{scope_col}={k}", g) for k, g in pred.groupby(scope_col)]
        )
        for scope, g in groups:
            for target in PW_TARGETS:
                ours = _mape(g[f"{target}_pred_ms"].to_numpy(), g[f"{target}_ms"].to_numpy())
                roof = _mape(g[f"{target}_roof_ms"].to_numpy(), g[f"{target}_ms"].to_numpy())
                pub = _published_mape(published, "pipeweave", scope, target)
                bench.rows.append(
                    _row(
                        SPLIT_PIPEWEAVE,
                        FAMILY,
                        f"{target}_ms",
                        scope,
                        ours,
                        len(g),
                        len(g),
                        pub,
                        "PipeWeave (published)" if pub is not None else None,
                    )
                )
                bench.rows.append(
                    _row(SPLIT_PIPEWEAVE, FAMILY_ROOFLINE, f"{target}_ms", scope, roof, len(g), len(g))
                )
                for method in ("neusight", "habitat", "roofline"):
                    other = _published_mape(published, method, scope, target)
                    if other is not None:
                        bench.rows.append(
                            _row(SPLIT_PIPEWEAVE, f"published:{method}", f"{target}_ms", scope, other, 0, 0)
                        )
    bench.rows += _variant_rows(SPLIT_PIPEWEAVE, preds, PW_TARGETS, ("", "gpu"), lambda col, k, g: len(g))
    worse = {
        family: [
            g
            for g, sub in p.groupby("gpu")
            if _mape(sub["total_pred_ms"].to_numpy(), sub["total_ms"].to_numpy())
            > _mape(sub["total_roof_ms"].to_numpy(), sub["total_ms"].to_numpy())
        ]
        for family, p in preds.items()
    }
    picks = Counter(chosen.values())
    bench.notes.append(
        f"{SPLIT_PIPEWEAVE}: {len(pred)} runs on {pred['gpu'].nunique()} GPUs, leave-one-GPU-out (op source "
        "per phase chosen by inner leave-one-GPU-out and framework cost refitted per fold on the other GPUs "
        f"only: {'; '.join(f'{k} in {n} folds' for k, n in sorted(picks.items()))}); total worse "
        f"than the roofline composition on: {', '.join(worse[FAMILY]) or 'none'}"
        + "".join(f"; {family}: {', '.join(w) or 'none'}" for family, w in worse.items() if family != FAMILY)
    )
    for line in summary(bench, SPLIT_PIPEWEAVE):
        log(line)
    return bench


def _variant_rows(
    split: str,
    preds: dict[str, pd.DataFrame],
    targets: Sequence[str],
    scope_cols: Sequence[str],
    asked: Callable[[str, Any, pd.DataFrame], int],
) -> list[dict[str, Any]]:
    """MAPE rows of each op-source variant (every family but the chosen one), overall and per scope."""
    rows = []
    for family, pred in preds.items():
        if family == FAMILY:
            continue
        for col in scope_cols:
            groups = (
                [("", None, pred)]
                if not col
                else [(f"{_scope_name(col)}={k}", k, g) for k, g in pred.groupby(col)]
            )
            for scope, key, g in groups:
                for target in targets:
                    value = _mape(g[f"{target}_pred_ms"].to_numpy(), g[f"{_true(split, target)}"].to_numpy())
                    rows.append(_row(split, family, f"{target}_ms", scope, value, len(g), asked(col, key, g)))
    return rows


def _scope_name(col: str) -> str:
    return col.replace("_path", "").replace("_id", "")


def _true(split: str, target: str) -> str:
    return f"silicon_{target}_ms" if split == SPLIT_SILICON else f"{target}_ms"


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


# ---------------------------------------------------------------- AIConfigurator silicon ---------------

SILICON_DTYPES = {"fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "int4_wo": "int4_wo"}


def _num(value: Any, default: int = 1) -> int:
    return default if value is None or (isinstance(value, float) and not np.isfinite(value)) else int(value)


def silicon_deployments(
    row: Mapping[str, Any], catalog: Any, datasets_dir: Path
) -> tuple[Deployment, Deployment]:
    """(prefill worker, decode worker) deployments of one silicon run; DeploymentError says why none."""
    model = model_shape(str(row["model_path"]), datasets_dir)
    spec = catalog.resolve(str(row["device_id"]))
    quant = row.get("gemm_quant_mode")
    dtype = SILICON_DTYPES.get(str(quant), "bf16") if isinstance(quant, str) else "bf16"
    kv = "fp8" if str(row.get("precision")) in ("fp8", "fp4") else "bf16"
    common = {
        "model": model,
        "gpu": spec,
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "weight_dtype": dtype,
        "kv_dtype": kv,
        "mode": str(row["mode"]),
    }

    def worker(prefix: str, concurrency: Any) -> Deployment:
        dp = _num(row.get(f"{prefix}attention_dp_size"))
        if dp > 1:
            raise DeploymentError(f"attention_dp_size {dp}: attention data parallelism is not modelled")
        pp = _num(row.get(f"{prefix}pp_size"))
        ep = _num(row.get(f"{prefix}moe_ep_size")) if model.is_moe else 1
        tp = _num(row.get(f"{prefix}tp_size"))
        moe_world = _num(row.get(f"{prefix}moe_tp_size")) * ep if model.is_moe else tp
        if moe_world > tp:  # e.g. tp 1 with moe_tp 2: the attention runs data-parallel over the 2 GPUs
            raise DeploymentError(
                f"moe_tp_size x moe_ep_size {moe_world} > tp_size {tp}: attention data parallelism is not "
                "modelled"
            )
        return Deployment(
            **common,
            concurrency=_num(concurrency),
            tp=tp,
            pp=pp,
            ep=max(ep, 1),
        )

    if row["mode"] == "disagg":
        if not np.isfinite(float(row.get("decode_batch_size") or np.nan)):
            # only the total concurrency is recorded: how it splits over the decode workers is unknown
            raise DeploymentError(
                "decode_batch_size: missing for a disaggregated run (the per-worker concurrency is unknown)"
            )
        return worker("prefill_", row.get("prefill_batch_size")), worker(
            "decode_", row.get("decode_batch_size")
        )
    agg = worker("", row.get("batch_size"))
    return agg, agg


def compose_silicon(
    runs: pd.DataFrame,
    catalog: Any,
    datasets_dir: Path,
    op_time: OpTimeFn | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kernel times per answerable run, and (id, reason) of the runs without an answer. Each distinct
    (prefill worker, decode worker) pair is composed once; all of a GPU's in one batch per kind of op."""
    fn = op_time or roofline_op_time
    keys: dict[tuple, int] = {}
    pairs: list[tuple[Deployment, Deployment]] = []
    kept: list[tuple[dict[str, Any], int]] = []
    refused = []
    for row in runs.to_dict("records"):
        try:
            pre, dec = silicon_deployments(row, catalog, datasets_dir)
            memory_check(dec)
        except (DeploymentError, LookupError) as exc:
            refused.append(
                {
                    "id": row["id"],
                    "model_path": row["model_path"],
                    "device_id": row["device_id"],
                    "reason": _reason(exc),
                }
            )
            continue
        key = (
            pre.model.name,
            pre.gpu.id,
            pre.isl,
            pre.osl,
            pre.weight_dtype,
            pre.kv_dtype,
            pre.tp,
            pre.ep,
            pre.concurrency,
            dec.concurrency,
            dec.tp,
            dec.ep,
        )
        if key not in keys:
            keys[key] = len(pairs)
            pairs.append((pre, dec))
        kept.append((row, keys[key]))
    phases = compose_many([d for pair in pairs for d in pair], fn)
    answered = []
    for row, k in kept:
        pre, dec = pairs[k]
        ph_p, ph_d = phases[2 * k], phases[2 * k + 1]
        answered.append(
            {
                **row,
                "layers": pre.model.layers,
                "c": dec.concurrency,
                "prefill_c": pre.concurrency,
                "one_prefill_us": ph_p.prefill_one_us,
                "batch_prefill_us": ph_p.prefill_kernels_us,
                "decode_step_us": ph_d.decode_kernels_us,
                "one_prefill_roof_us": ph_p.floor_us(ph_p.one),
                "decode_roof_us": ph_d.floor_us(ph_d.decode),
                **_named("one", overhead_counts(ph_p.one)),
                **_named("step", overhead_counts(ph_d.decode)),
                **_tier_shares(ph_p.one + ph_d.decode),
            }
        )
    log(f"silicon: {len(answered)} runs composed, {len(refused)} without an answer")
    return pd.DataFrame(answered), pd.DataFrame(refused)


def _reason(exc: Exception) -> str:
    """The reason without the run-specific figures, so reasons count across runs."""
    text = str(exc)
    if isinstance(exc, DoesNotFit):
        return "does not fit: weights + activations + one request's KV cache exceed 0.9 x GPU memory"
    return text.split(":")[0] + ": " + text.split(":", 1)[1].split(";")[0].strip() if ":" in text else text


def _steady_design(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return steady_features(
        frame["one_prefill_us"].to_numpy(),
        frame["batch_prefill_us"].to_numpy(),
        frame["decode_step_us"].to_numpy(),
        frame["c"].to_numpy(float),
        frame["osl"].to_numpy(float),
        (frame["mode"] == "agg").to_numpy(),
        _overheads(frame, "one"),
        _overheads(frame, "step"),
    )


def _relative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least absolute relative error (``relative_l1``) with every coefficient >= 0 (each term is a cost:
    none makes serving faster)."""
    return _unseen_to_zero(relative_l1(x, y, y, [(0.0, None)] * x.shape[1]), x)


def _unseen_to_zero(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A term the training runs never exercise (e.g. physics all-reduces where every TP run had a measured
    table) gets no cost: its coefficient is otherwise arbitrary within its bounds."""
    return np.where(np.any(x != 0, axis=0), coef, 0.0)


def fit_steady(train: pd.DataFrame, base: FrameworkCost | None = None) -> FrameworkCost:
    """The steady-serving TTFT/TPOT regressions fitted on ``train``'s silicon runs (least absolute
    relative error)."""
    x_ttft, x_tpot = _steady_design(train)
    ttft, tpot = train["silicon_ttft_ms"].to_numpy() * 1e3, train["silicon_tpot_ms"].to_numpy() * 1e3
    c_ttft, c_tpot = _relative_lstsq(x_ttft, ttft), _relative_lstsq(x_tpot, tpot)
    base = base or FrameworkCost()
    mape = {
        **base.train_mape,
        "steady_ttft": _mape(x_ttft @ c_ttft, ttft),
        "steady_tpot": _mape(x_tpot @ c_tpot, tpot),
    }
    source = (
        f"AIConfigurator silicon runs on {', '.join(sorted(train['device_id'].unique()))} ({len(train)} runs)"
    )
    return FrameworkCost(
        prefill=base.prefill,
        decode=base.decode,
        steady_ttft=tuple(float(c) for c in c_ttft),
        steady_tpot=tuple(float(c) for c in c_tpot),
        steady_source=source,
        source=base.source,
        train_mape=mape,
    )


def predict_steady(frame: pd.DataFrame, fw: FrameworkCost) -> pd.DataFrame:
    x_ttft, x_tpot = _steady_design(frame)
    out = frame.copy()
    floor_ttft, floor_tpot = frame["one_prefill_roof_us"].to_numpy(), frame["decode_roof_us"].to_numpy()
    out["ttft_pred_ms"] = np.maximum(x_ttft @ np.asarray(fw.steady_ttft), floor_ttft) / 1e3
    out["tpot_pred_ms"] = np.maximum(x_tpot @ np.asarray(fw.steady_tpot), floor_tpot) / 1e3
    out["ttft_roof_ms"], out["tpot_roof_ms"] = floor_ttft / 1e3, floor_tpot / 1e3
    return out


SI_TARGETS = ("ttft", "tpot")
SI_SCOPES = ("", "device_id", "model_path", "precision", "mode", "backend")


def run_silicon_bench(
    datasets_dir: Path,
    catalog: Any,
    op_time: OpTimeFn | None = None,
    log: Callable[[str], None] = lambda _: None,
    runs: pd.DataFrame | None = None,
    engine: Any = None,
    variants: bool = True,
) -> ServingBench:
    """H100 and H200 each held out of a fit on the other; TTFT/TPOT MAPE per GPU, model, precision, mode.
    The op source is chosen per fold by an inner leave-one-model-out on the training GPU's runs (one
    training GPU: no inner leave-one-GPU-out)."""
    runs = read_silicon_runs(datasets_dir) if runs is None else runs
    sources = {ROOFLINE_SOURCE: op_time} if op_time is not None else op_sources(engine, variants)
    composed_by, refused_by = {}, {}
    for k, fn in sources.items():
        composed_by[k], refused_by[k] = compose_silicon(runs, catalog, datasets_dir, fn, log=log)
    frames = _aligned(composed_by, "id")
    if UNSEEN in frames:
        asked = runs.set_index("id")

        def recompose(part: pd.DataFrame, fn: OpTimeFn) -> pd.DataFrame:
            return compose_silicon(asked.loc[part["id"]].reset_index(), catalog, datasets_dir, fn)[0]

        frames[UNSEEN] = _blind_refit(frames[UNSEEN], engine, datasets_dir, recompose, "id", log)
    refused = refused_by[ROOFLINE_SOURCE]
    folds: dict[str, list[pd.DataFrame]] = defaultdict(list)
    chosen: dict[str, str] = {}
    base = frames[ROOFLINE_SOURCE]
    for device in sorted(base["device_id"].unique()):
        test = base["device_id"] == device
        if test.all():
            continue
        fitted = {k: fit_steady(f[~test]) for k, f in frames.items() if k != UNSEEN}
        held = {}
        for k, f in frames.items():
            held[k] = predict_steady(f[test], fitted[ENGINE_SOURCE if k == UNSEEN else k])
            if k in SOURCE_FAMILY:
                folds[SOURCE_FAMILY[k]].append(held[k])
        choice = choose_source(
            {k: f[~test] for k, f in frames.items()},
            "model_path",
            fit_steady,
            predict_steady,
            {t: f"silicon_{t}_ms" for t in SI_TARGETS},
        )
        chosen[device] = f"TTFT {choice['ttft']}, TPOT {choice['tpot']}"
        folds[FAMILY].append(_combine(held, choice, osl=False))
        if UNSEEN in held:
            folds[FAMILY_UNSEEN].append(_combine(held, _blind(choice), osl=False))
    preds = {}
    for family, parts in folds.items():
        frame = pd.concat(parts, ignore_index=True)
        preds[family] = frame.assign(precision=frame["precision"].fillna("bf16"))
    pred = preds[FAMILY]
    asked = runs.assign(precision=runs["precision"].fillna("bf16"))
    bench = ServingBench(predictions=pred, variants=preds)

    def n_asked(col: str, key: Any, g: pd.DataFrame) -> int:
        return len(asked) if not col else int((asked[col] == key).sum())

    for scope_col in SI_SCOPES:
        groups = (
            [("", None, pred)]
            if not scope_col
            else [(f"{_scope_name(scope_col)}={k}", k, g) for k, g in pred.groupby(scope_col)]
        )
        for scope, key, g in groups:
            for target in SI_TARGETS:
                true = g[f"silicon_{target}_ms"].to_numpy()
                for family, column in ((FAMILY, f"{target}_pred_ms"), (FAMILY_ROOFLINE, f"{target}_roof_ms")):
                    bench.rows.append(
                        _row(
                            SPLIT_SILICON,
                            family,
                            f"{target}_ms",
                            scope,
                            _mape(g[column].to_numpy(), true),
                            len(g),
                            n_asked(scope_col, key, g),
                        )
                    )
    bench.rows += _variant_rows(SPLIT_SILICON, preds, SI_TARGETS, ("", "device_id", "mode"), n_asked)
    reasons = refused["reason"].value_counts() if not refused.empty else pd.Series(dtype=int)
    bench.notes.append(
        f"{SPLIT_SILICON}: {len(pred)} of {len(runs)} runs answered (each GPU held out of a fit on the "
        "other; "
        "op source chosen by leave-one-model-out on the training GPU: "
        + ", ".join(f"{d} held out: {c}" for d, c in sorted(chosen.items()))
        + "); not answered: "
        + "; ".join(f"{n} x {r}" for r, n in reasons.items())
    )
    for line in summary(bench, SPLIT_SILICON):
        log(line)
    return bench


def summary(bench: ServingBench, split: str) -> list[str]:
    lines = []
    for row in bench.rows:
        if row["family"] == FAMILY and row["split"] == split:
            roof = next(
                (
                    r["ours"]
                    for r in bench.rows
                    if r["family"] == FAMILY_ROOFLINE and r["target"] == row["target"] and r["split"] == split
                ),
                None,
            )
            pub = f"  published {row['published']:.1%}" if row["published"] is not None else ""
            lines.append(
                f"{split} {row['target']:44s} ours {row['ours']:.1%}  roofline-comp {roof:.1%}{pub}  "
                f"n={row['n']}/{row['n_asked']}"
            )
        elif row["split"] == split and row["family"].startswith(f"{FAMILY}:") and not row["scope"]:
            lines.append(f"{split} {row['target']:44s} {row['family']} {row['ours']:.1%}  n={row['n']}")
    return lines


def bench_engine(predictor: Any = None) -> Any:
    """The op engine of ``predictor`` (or the state folder's), None when there is none to load."""
    from components.opmodel.loading import engine_for

    try:
        return engine_for(predictor)
    except (OSError, ValueError) as exc:  # a broken engine folder: the bench says so and uses the roofline
        return _Broken(str(exc))


class _Broken:
    measured = spec_model = None

    def __init__(self, why: str) -> None:
        self.why = why


def fit_framework(
    pipeweave: dict[str, pd.DataFrame], silicon: dict[str, pd.DataFrame], sources: dict[str, str]
) -> FrameworkCost:
    """A framework cost whose parts are each fitted on their source's op times (``sources``: part ->
    roofline | engine, for prefill, decode, steady_ttft, steady_tpot)."""
    pre = fit_pipeweave(pipeweave[sources["prefill"]])
    dec = fit_pipeweave(pipeweave[sources["decode"]])
    ttft = fit_steady(silicon[sources["steady_ttft"]])
    tpot = fit_steady(silicon[sources["steady_tpot"]])
    return FrameworkCost(
        prefill=pre.prefill,
        decode=dec.decode,
        steady_ttft=ttft.steady_ttft,
        steady_tpot=tpot.steady_tpot,
        steady_source=ttft.steady_source,
        source=pre.source,
        train_mape={
            "prefill": pre.train_mape["prefill"],
            "decode": dec.train_mape["decode"],
            "steady_ttft": ttft.train_mape["steady_ttft"],
            "steady_tpot": tpot.train_mape["steady_tpot"],
        },
        sources=dict(sources),
    )


def fit_production(
    datasets_dir: Path, catalog: Any, engine: Any = None
) -> tuple[FrameworkCost, FrameworkCost]:
    """(the production framework cost on the op sources chosen by inner cross-validation -- leave one
    PipeWeave GPU out, leave one silicon model out -- and the one on the roofline alone, for a state
    folder without an engine)."""
    sources = {k: fn for k, fn in op_sources(engine).items() if k != UNSEEN}
    runs = read_pipeweave_runs(datasets_dir)
    pw = {k: compose_pipeweave(runs, catalog, datasets_dir, fn) for k, fn in sources.items()}
    si_runs = read_silicon_runs(datasets_dir)
    si = {k: compose_silicon(si_runs, catalog, datasets_dir, fn)[0] for k, fn in sources.items()}
    pw_choice = choose_source(
        pw, "gpu", fit_pipeweave, predict_pipeweave, {"prefill": "prefill_ms", "decode": "decode_ms"}
    )
    si_choice = choose_source(
        si, "model_path", fit_steady, predict_steady, {t: f"silicon_{t}_ms" for t in SI_TARGETS}
    )
    chosen = {**pw_choice, "steady_ttft": si_choice["ttft"], "steady_tpot": si_choice["tpot"]}
    roofline = dict.fromkeys(("prefill", "decode", "steady_ttft", "steady_tpot"), ROOFLINE_SOURCE)
    return fit_framework(pw, si, chosen), fit_framework(pw, si, roofline)


def predict_frames(kind: str, frames: dict[str, pd.DataFrame], fw: FrameworkCost) -> pd.DataFrame:
    """Predictions of composed runs (``kind``: pipeweave | silicon) with each part on its own source's
    frame (frames aligned on the same runs)."""
    if kind == "pipeweave":
        held = {s: predict_pipeweave(f, fw) for s, f in frames.items()}
        choice = {"prefill": fw.source_of("prefill"), "decode": fw.source_of("decode")}
        return _combine(held, choice, osl=True)
    held = {s: predict_steady(f, fw) for s, f in frames.items()}
    choice = {"ttft": fw.source_of("steady_ttft"), "tpot": fw.source_of("steady_tpot")}
    return _combine(held, choice, osl=False)


def extend_result(
    result: Any,
    splits: Sequence[str],
    datasets_dir: Path,
    catalog: Any,
    *,
    log: Callable[[str], None] = lambda _: None,
    engine: Any = None,
) -> list[ServingBench]:
    """Run the asked serving splits; append their rows and notes to ``result`` (a ``bench.BenchResult``).
    ``engine``: the op engine to compose with (default: the state folder's, ``opmodel.loading``)."""
    engine = bench_engine() if engine is None else engine
    if not has_data(engine):
        result.notes.append(
            "serving splits: no op engine with data in the state folder: roofline op times only"
        )
    benches = []
    for split in splits:
        runner = {SPLIT_PIPEWEAVE: run_pipeweave_bench, SPLIT_SILICON: run_silicon_bench}[split]
        try:
            bench = runner(Path(datasets_dir), catalog, log=log, engine=engine)
        except (OSError, KeyError, ValueError) as exc:  # the datasets lack this source: say so, go on
            result.notes.append(f"{split}: skipped ({exc})")
            continue
        result.rows += bench.rows
        result.notes += bench.notes
        benches.append(bench)
    return benches


GATE_METRICS = {
    SPLIT_PIPEWEAVE: ("prefill_ms", "decode_ms", "total_ms"),
    SPLIT_SILICON: ("ttft_ms", "tpot_ms"),
}


def gate_entry(split: str, datasets_dir: Path, catalog: Any, engine: Any = None) -> dict[str, Any]:
    """One gate-report entry (status ok + metrics) for a serving split: the bench as above, without the
    per-source variants (the composition the product answers with only). Metrics: ``<target>_mape``,
    ``worst_gpu_<target>_mape`` and ``coverage``."""
    import time

    started = time.perf_counter()
    runner = {SPLIT_PIPEWEAVE: run_pipeweave_bench, SPLIT_SILICON: run_silicon_bench}.get(split)
    if runner is None:
        raise ValueError(f"unknown serving split {split!r}; choose one of {', '.join(SPLITS)}")
    bench = runner(Path(datasets_dir), catalog, engine=engine, variants=False)
    rows = [r for r in bench.rows if r["family"] == FAMILY]
    metrics: dict[str, float] = {}
    for target in GATE_METRICS[split]:
        name = target.removesuffix("_ms")
        overall = next(r for r in rows if r["target"] == target)
        metrics[f"{name}_mape"] = float(overall["ours"])
        per_gpu = [
            r["ours"]
            for r in rows
            if r["target"].startswith(f"{target}[") and r["scope"].split("=")[0] in ("gpu", "device")
        ]
        metrics[f"worst_gpu_{name}_mape"] = float(max(per_gpu))
        metrics["coverage"] = float(overall["coverage"])
        metrics["n"] = float(overall["n"])
    return {
        "status": "ok",
        "mode": "refit",
        "n": int(metrics["n"]),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
        "report": {"notes": bench.notes},
        "timings": [],
        "note": None,
    }


# ---------------------------------------------------------------- README section (its own marked block)

SERVING_START = "<!-- serving:start -->"
SERVING_END = "<!-- serving:end -->"
_COLUMNS = (
    (FAMILY, "kernelcast"),
    (FAMILY_UNSEEN, "kernelcast, GPU unseen"),
    (FAMILY_ENGINE, "engine ops"),
    (FAMILY_ROOF_OPS, "roofline ops"),
    (FAMILY_ROOFLINE, "roofline composition"),
)
_TITLES = {
    SPLIT_PIPEWEAVE: "PipeWeave runs, leave-one-GPU-out",
    SPLIT_SILICON: "AIConfigurator silicon runs (H100 <-> H200)",
}


def is_serving_note(note: str) -> bool:
    return note.startswith((SPLIT_PIPEWEAVE, SPLIT_SILICON, "serving splits"))


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1%}"


def _index(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    return {(r["split"], r["family"], r["target"]): r for r in rows}


def serving_markdown(rows: Sequence[Mapping[str, Any]], notes: Sequence[str], command: str) -> str:
    """The README's deployment tables from the serving splits' bench rows: the headline per split and
    target, the PipeWeave runs per held-out GPU, the silicon runs per GPU, model, precision, mode and
    backend; then the splits' notes."""
    at = _index(rows)
    splits = [s for s in SPLITS if any(r["split"] == s for r in rows)]
    families = [(f, name) for f, name in _COLUMNS if any(r["family"] == f for r in rows)]
    out = [
        f"Generated by `{command}` (MAPE; per fold the op source of each phase is chosen and the framework "
        'cost fitted on the training GPUs only; "GPU unseen": the held-out GPU\'s own kernel tables '
        "withheld, spec tier only).",
        "",
    ]
    header = ["split (held out)", "target", *(name for _, name in families), "published", "answered"]
    out += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for split in splits:
        targets = PW_TARGETS if split == SPLIT_PIPEWEAVE else SI_TARGETS
        for i, target in enumerate(targets):
            key = f"{target}_ms"
            main = at.get((split, FAMILY, key), {})
            pub = main.get("published")
            cells = [
                _TITLES[split] if i == 0 else "",
                target.upper() if split == SPLIT_SILICON else target,
                *(_pct(at.get((split, f, key), {}).get("ours")) for f, _ in families),
                f"{_pct(pub)} ({main.get('published_by', '').split(' ')[0]})" if pub is not None else "-",
                f"{main.get('n', 0):,}/{main.get('n_asked', 0):,}",
            ]
            out.append("| " + " | ".join(cells) + " |")
    if SPLIT_PIPEWEAVE in splits:
        gpus = sorted(
            {r["scope"][4:] for r in rows if r["split"] == SPLIT_PIPEWEAVE and r["scope"].startswith("gpu=")}
        )
        head = [
            "held-out GPU",
            "runs",
            "prefill",
            "decode",
            "total",
            "total, GPU unseen",
            "total, roofline ops",
            "total, roofline composition",
            "total, PipeWeave (published)",
        ]
        out += ["", "PipeWeave runs per held-out GPU (kernelcast unless named):", ""]
        out += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for gpu in gpus:

            def get(family: str, target: str) -> Mapping[str, Any]:
                return at.get((SPLIT_PIPEWEAVE, family, f"{target}_ms[gpu={gpu}]"), {})

            total = get(FAMILY, "total")
            cells = [
                gpu,
                str(total.get("n", 0)),
                _pct(get(FAMILY, "prefill").get("ours")),
                _pct(get(FAMILY, "decode").get("ours")),
                _pct(total.get("ours")),
                _pct(get(FAMILY_UNSEEN, "total").get("ours")),
                _pct(get(FAMILY_ROOF_OPS, "total").get("ours")),
                _pct(get(FAMILY_ROOFLINE, "total").get("ours")),
                _pct(total.get("published")),
            ]
            out.append("| " + " | ".join(cells) + " |")
    if SPLIT_SILICON in splits:
        scopes = [
            r["scope"]
            for r in rows
            if r["split"] == SPLIT_SILICON and r["family"] == FAMILY and r["target"].startswith("ttft_ms[")
        ]
        head = [
            "scope",
            "answered",
            "TTFT",
            "TPOT",
            "TTFT, GPU unseen",
            "TPOT, GPU unseen",
            "TTFT, roofline composition",
            "TPOT, roofline composition",
        ]
        summary_line = "<details><summary>silicon runs per GPU, model, precision, mode and backend</summary>"
        out += ["", summary_line, ""]
        out += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for scope in scopes:

            def cell(family: str, target: str) -> str:
                return _pct(at.get((SPLIT_SILICON, family, f"{target}_ms[{scope}]"), {}).get("ours"))

            main = at[(SPLIT_SILICON, FAMILY, f"ttft_ms[{scope}]")]
            out.append(
                "| "
                + " | ".join(
                    [
                        scope,
                        f"{main['n']:,}/{main['n_asked']:,}",
                        cell(FAMILY, "ttft"),
                        cell(FAMILY, "tpot"),
                        cell(FAMILY_UNSEEN, "ttft"),
                        cell(FAMILY_UNSEEN, "tpot"),
                        cell(FAMILY_ROOFLINE, "ttft"),
                        cell(FAMILY_ROOFLINE, "tpot"),
                    ]
                )
                + " |"
            )
        out += ["", "</details>"]
    if notes:
        out += [""] + [f"- {note}" for note in notes]
    return "\n".join(out)


def check_serving_target(path: Path) -> None:
    """ValueError naming ``path`` when it exists without one serving block (checked before the run)."""
    text = Path(path).read_text() if Path(path).is_file() else ""
    start, end = text.find(SERVING_START), text.find(SERVING_END)
    if text and (start < 0 or end < start or text.count(SERVING_START) > 1):
        raise ValueError(
            f"{path} has no single {SERVING_START} ... {SERVING_END} section: add both markers (on their own "
            "lines, in that order) where the deployment table goes"
        )


def write_serving_markdown(path: Path, section: str) -> None:
    """Write ``section`` between the serving markers of ``path`` (atomically); ValueError naming the file
    when it lacks them (the bench block's markers are another section)."""
    from components.common.atomic import atomic_write

    check_serving_target(path)
    text = Path(path).read_text() if Path(path).is_file() else ""
    start, end = text.find(SERVING_START), text.find(SERVING_END)
    block = f"{SERVING_START}\n{section.rstrip()}\n{SERVING_END}"
    new = block + "\n" if not text else text[:start] + block + text[end + len(SERVING_END) :]
    atomic_write(Path(path), lambda tmp: tmp.write_text(new))


def write_readme(
    path: Path,
    result: Any,
    command: str,
    render: Callable[[Any, str], str],
    write_bench: Callable[[Path, str], None],
) -> None:
    """Write a bench run into a README: the serving splits' rows into the serving block, every other row
    into the bench block (``render``/``write_bench``: ``evaluation.bench_markdown``'s); a run of serving
    splits alone leaves the bench block as it is."""
    serving = [r for r in result.rows if r["split"] in SPLITS]
    others = [r for r in result.rows if r["split"] not in SPLITS]
    if others or not serving:
        rest = type(result)(
            rows=others,
            notes=[n for n in result.notes if not is_serving_note(n)],
            timings=getattr(result, "timings", []),
        )
        write_bench(path, render(rest, command))
    if serving:
        notes = [n for n in result.notes if is_serving_note(n)]
        write_serving_markdown(path, serving_markdown(serving, notes, command))
