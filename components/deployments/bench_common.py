"""Shared parts of the deployment benches: split and family names, the relative-L1 fit, bench rows, the op
sources (roofline, op engine, op engine blind to a GPU), the inner choice of op source per part."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from components.common.bench_rows import bench_row
from components.common.metrics import mape
from components.deployments.compose import OVERHEADS, DoesNotFit
from components.deployments.data import (
    AllReduceTable,
)
from components.deployments.framework_cost import FrameworkCost
from components.deployments.op_limits import limited, limits_of
from components.deployments.ops import (
    ENGINE_SOURCE,
    ROOFLINE_SOURCE,
    OpTimeFn,
    Timed,
    engine_op_time,
    has_data,
    roofline_op_time,
)
from components.physics.limits import GpuLimits

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
    return limited(op_time, limits_of(base) or GpuLimits())  # base's reachable rates bound these too


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
    name = f"{target}[{scope}]" if scope else target
    pub = None if published is None else round(float(published), 4)
    return bench_row(split, family, name, scope, "mape", value, n, n_asked, published=pub, published_by=by)


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


def _silent(_: str) -> None:
    return None


@dataclass(frozen=True)
class BenchInputs:
    """What a serving bench entry reads besides the datasets and the catalog (the keyword arguments of
    ``run_pipeweave_bench`` and ``run_silicon_bench``): a fixed op-time function (else the op sources of
    ``engine``), a log, the runs (else the source's own), and whether to score the unseen-GPU variant."""

    op_time: OpTimeFn | None = None
    log: Callable[[str], None] = _silent
    runs: pd.DataFrame | None = None
    engine: Any = None
    variants: bool = True

    def sources(self) -> dict[str, Any]:
        if self.op_time is not None:
            return {ROOFLINE_SOURCE: self.op_time}
        return op_sources(self.engine, self.variants)


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
    runs: pd.DataFrame,
    compose: Callable[[pd.DataFrame, OpTimeFn], pd.DataFrame],
    key: str,
    log: Callable[[str], None],
) -> pd.DataFrame:
    """The unseen-GPU frame with the rows of each GPU that trained the spec model recomposed (``compose`` of
    the asked ``runs``, keyed by ``key``) by the engine refitted without that GPU (``unseen_engine``): its
    kernel tables inform nothing of its own answers."""
    trained = spec_trained_on(engine)
    asked = runs.set_index(key)
    parts = [frame[~frame["device_id"].isin(trained)]]
    for held in sorted(trained & set(frame["device_id"])):
        log(f"unseen-GPU variant: spec tier refitted without {held}")
        blind = engine_op_time(unseen_engine(engine, held, datasets_dir), unseen=_EVERY_GPU)
        rows = frame.loc[frame["device_id"] == held, key]
        parts.append(compose(asked.loc[rows].reset_index(), blind))
    return pd.concat(parts, ignore_index=True).sort_values(key).reset_index(drop=True)


def source_frames(
    composed: dict[str, pd.DataFrame],
    key: str,
    runs: pd.DataFrame,
    recompose: Callable[[pd.DataFrame, OpTimeFn], pd.DataFrame],
    engine: Any,
    datasets_dir: Path,
    log: Callable[[str], None],
) -> dict[str, pd.DataFrame]:
    """Each op source's composed runs, aligned on ``key``; the unseen-GPU source's rows of the GPUs that
    trained the spec model recomposed blind to them (``_blind_refit``)."""
    frames = _aligned(composed, key)
    if UNSEEN in frames:
        frames[UNSEEN] = _blind_refit(frames[UNSEEN], engine, datasets_dir, runs, recompose, key, log)
    return frames


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
    scored: set[str] | None = None,
    blend: bool = False,
) -> dict[str, str]:
    """Per target (``{name: column of the truth}``; e.g. prefill and decode): the op source (roofline, or the
    engine as the product answers) with the lower mean error over an inner leave-one-``group``-out of
    ``frames`` -- which hold a fold's TRAINING runs only. Each phase's framework cost is fitted on its own
    op times, so each phase may take its own source. ``scored``: the groups whose inner folds are scored
    (each still fitted on every other group; ``tier_matched``); None: every group. ``blend``: the mean of
    the two sources' predictions (each on its own fit) is a third candidate, scored on the same inner folds
    (frames are aligned row by row)."""
    errors: dict[str, dict[str, float]] = defaultdict(dict)
    inner: dict[str, list[pd.DataFrame]] = {}
    for source in (ROOFLINE_SOURCE, ENGINE_SOURCE):
        frame = frames.get(source)
        if frame is None or frame[group].nunique() < 2:
            continue
        preds = [
            predict(frame[frame[group] == g], fit(frame[frame[group] != g]))
            for g in sorted(frame[group].unique())
            if scored is None or g in scored
        ]
        if preds:
            inner[source] = preds
    if blend and len(inner) == 2:
        inner[BLEND] = [
            _combine({ROOFLINE_SOURCE: r, ENGINE_SOURCE: e}, dict.fromkeys(targets, BLEND), osl=False)
            for r, e in zip(inner[ROOFLINE_SOURCE], inner[ENGINE_SOURCE], strict=True)
        ]
    for source, preds in inner.items():
        for target, truth in targets.items():
            errors[target][source] = float(
                np.mean([mape(p[truth].to_numpy(), p[f"{target}_pred_ms"].to_numpy()) for p in preds])
            )
    return {t: min(errors[t], key=errors[t].__getitem__) if errors[t] else ROOFLINE_SOURCE for t in targets}


MIN_SCORED = 2  # inner folds a tier-matched choice needs; with fewer it scores every training GPU


def tier_matched(own: dict[str, bool], held: str) -> set[str] | None:
    """The training GPUs whose inner folds choose the op source for held-out ``held``: those the op engine
    answers as it answers ``held`` (``own``: GPU -> answered from its own measured kernels, else from its
    relatives through the transfer tier). Why: an inner fold of a GPU with its own kernels scores the engine
    at its measured-tier accuracy, which a GPU answered by the transfer tier does not get; choosing on those
    folds picked the engine for prefill where the transfer tier's answers err most (PipeWeave bench: on
    nested train-side folds, prefill 15.4% -> 14.7%, total 11.1% -> 10.4%; decode 9.7% -> 10.5%). None
    (every training GPU) where fewer than ``MIN_SCORED`` match."""
    same = {g for g, mine in own.items() if g != held and mine == own[held]}
    return same if len(same) >= MIN_SCORED else None


BLEND, BLEND_UNSEEN = "blend", "blend-unseen"  # the mean of the roofline's and the engine's predictions
_BLENDED = {BLEND: ENGINE_SOURCE, BLEND_UNSEEN: UNSEEN}  # each blend's engine-side source


def _blind(choice: dict[str, str]) -> dict[str, str]:
    blind = {ENGINE_SOURCE: UNSEEN, BLEND: BLEND_UNSEEN}
    return {t: blind.get(source, source) for t, source in choice.items()}


def _predicted(preds: dict[str, pd.DataFrame], source: str, column: str) -> np.ndarray:
    """``column`` of ``source``'s predictions; a blend's is the mean of the roofline's and its engine's."""
    if source in _BLENDED:
        return (preds[ROOFLINE_SOURCE][column].to_numpy() + preds[_BLENDED[source]][column].to_numpy()) / 2
    return preds[source][column].to_numpy()


def _combine(preds: dict[str, pd.DataFrame], choice: dict[str, str], osl: bool) -> pd.DataFrame:
    """One frame whose ``<target>_pred_ms`` come each from its chosen source (frames are aligned)."""
    first = next(iter(choice.values()))
    out = preds[ROOFLINE_SOURCE if first in _BLENDED else first].copy()
    for target, source in choice.items():
        out[f"{target}_pred_ms"] = _predicted(preds, source, f"{target}_pred_ms")
        out[f"{target}_source"] = source
    if osl:
        out["total_pred_ms"] = out["prefill_pred_ms"] + out["osl"] * out["decode_pred_ms"]
    return out


def leave_one_out(
    frames: dict[str, pd.DataFrame],
    column: str,
    group: str,
    fit: Callable[..., Any],
    predict: Callable[[pd.DataFrame, Any], pd.DataFrame],
    targets: dict[str, str],
    osl: bool,
    label: Callable[[str], str] = str,
    own: dict[str, bool] | None = None,
    blend: bool = False,
) -> tuple[dict[str, list[pd.DataFrame]], dict[str, str]]:
    """Hold out each ``column`` value (a GPU) in turn: per fold, the op source per target chosen on the
    training runs (``choose_source`` by inner leave-one-``group``-out; with ``own``, GPU -> answered from its
    own kernels, on the inner folds of the GPUs answered like the held-out one: ``tier_matched``), the
    framework cost fitted on them, the held-out runs predicted. Returns the predicted folds per family and
    the choice per held-out value."""
    folds: dict[str, list[pd.DataFrame]] = defaultdict(list)
    chosen: dict[str, str] = {}
    base = frames[ROOFLINE_SOURCE]
    for value in sorted(base[column].unique()):
        test = base[column] == value
        if test.all():  # nothing left to train on
            continue
        held = held_out_fold(frames, test, fit, predict, folds)
        scored = None if own is None else tier_matched(own, value)
        train = {k: f[~test] for k, f in frames.items()}
        choice = choose_source(train, group, fit, predict, targets, scored, blend)
        chosen[value] = ", ".join(f"{label(t)} {choice[t]}" for t in targets)
        folds[FAMILY].append(_combine(held, choice, osl=osl))
        if UNSEEN in held:  # the same choice, the held-out GPU's own kernels withheld (same framework fit)
            folds[FAMILY_UNSEEN].append(_combine(held, _blind(choice), osl=osl))
    return folds, chosen


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
            for scope, key, g in scope_groups(pred, col):
                for target in targets:
                    value = mape(g[f"{_true(split, target)}"].to_numpy(), g[f"{target}_pred_ms"].to_numpy())
                    rows.append(_row(split, family, f"{target}_ms", scope, value, len(g), asked(col, key, g)))
    return rows


def scope_groups(pred: pd.DataFrame, col: str) -> list[tuple[str, Any, pd.DataFrame]]:
    """(scope, value, rows) of each value of ``col`` (``gpu=H100``); one ("", None, every row) for ``""``."""
    if not col:
        return [("", None, pred)]
    return [(f"{_scope_name(col)}={k}", k, g) for k, g in pred.groupby(col)]


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
        elif (
            row["split"] == split
            and row["family"].startswith(f"{FAMILY}:")
            and not row["scope"]
            and row["ours"] is not None
        ):
            lines.append(f"{split} {row['target']:44s} {row['family']} {row['ours']:.1%}  n={row['n']}")
    return lines


def _unseen_to_zero(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A term the training runs never exercise (e.g. physics all-reduces where every TP run had a measured
    table) gets no cost: its coefficient is otherwise arbitrary within its bounds."""
    return np.where(np.any(x != 0, axis=0), coef, 0.0)


def _reason(exc: Exception) -> str:
    """The reason without the run-specific figures, so reasons count across runs."""
    text = str(exc)
    if isinstance(exc, DoesNotFit):
        return "does not fit: weights + activations + one request's KV cache exceed 0.9 x GPU memory"
    return text.split(":")[0] + ": " + text.split(":", 1)[1].split(";")[0].strip() if ":" in text else text


PW_TARGETS = ("prefill", "decode", "total")


SI_TARGETS = ("ttft", "tpot")


def _named(prefix: str, counts: np.ndarray) -> dict[str, float]:
    return {f"{prefix}_{name}": float(v) for name, v in zip(OVERHEADS, counts, strict=True)}


def _tier_shares(lines: list[Any]) -> dict[str, float]:
    """Share of the kernel time each tier answered (``tier_measured``, ``tier_spec``, ``tier_roofline``)."""
    total = sum(x.time_us for x in lines) or 1.0
    shares: dict[str, float] = {}
    for x in lines:
        for name in x.tier.split("+"):
            key = f"tier_{name}"
            shares[key] = shares.get(key, 0.0) + x.time_us / total / len(x.tier.split("+"))
    return shares


def held_out_fold(
    frames: dict[str, pd.DataFrame],
    test: pd.Series,
    fit: Callable[[pd.DataFrame], FrameworkCost],
    predict: Callable[[pd.DataFrame, FrameworkCost], pd.DataFrame],
    folds: dict[str, list[pd.DataFrame]],
) -> dict[str, pd.DataFrame]:
    """Each op source's predictions of the ``test`` rows from a fit on the others (the blind engine on the
    engine's fit); the sources' own families collect their fold in ``folds``."""
    fitted = {k: fit(f[~test]) for k, f in frames.items() if k != UNSEEN}
    held = {}
    for k, f in frames.items():
        held[k] = predict(f[test], fitted[ENGINE_SOURCE if k == UNSEEN else k])
        if k in SOURCE_FAMILY:
            folds[SOURCE_FAMILY[k]].append(held[k])
    return held
