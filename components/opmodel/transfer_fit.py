"""Fit the transfer tier on the measured GPUs, leave-one-GPU-out, choosing only on the training GPUs.

Pairs: every measured GPU X of the training set, a hash sample of its rows per (family, dtype[, kv dtype]),
and every other training GPU Y's answer there carried over by physics (``TransferTier.carried``). From them:

- the correction (ridge on ``transfer.correction_features``, target ``log(actual_X / carried_X<-Y)``) is
  fitted on pairs whose target and relative are both training GPUs;
- the settings of a family (relatives blended ``k``, temperature ``tau``, the correction's ridge or none) are
  chosen by inner leave-one-GPU-out over the training GPUs: each in turn is answered from the others with a
  correction fitted without it (neither as target nor as relative), the per-GPU MAPEs averaged; plain sibling
  physics (no correction, the nearest relative) wins ties, so a correction is kept only where it helps;
- each relative's own transfer error (median |log ratio| when it answers the other training GPUs) weighs it in
  the blend;
- the achievable share of each pipe's peak, pooled and per architecture (``achievable.py``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from components.opmodel.l2_resident import carry_times, choose_capacity
from components.opmodel.pipe_overlap import choose_overlap
from components.opmodel.transfer import (
    CURVE_FAMILIES,
    Carried,
    TransferModel,
    TransferSettings,
    TransferTier,
    blend,
    regime_key,
)
from components.physics import roofline as physics

TRANSFER_FAMILIES: tuple[str, ...] = ("gemm", "attention", "moe")
PAIR_ROWS = 300  # rows per (target GPU, family, dtype[, kv]) in the pairs: the selection's cost stays small
GRID_K: tuple[int, ...] = (1, 2, 3)
GRID_TAU: tuple[float, ...] = (0.5, 2.0)
GRID_RIDGE: tuple[float | None, ...] = (None, 0.03, 0.3, 3.0)  # per-row ridge strength; None = plain physics
GRID_NEAR: tuple[bool, ...] = (False, True)  # a relative of the asked GPU's generation answers alone
INCONSISTENT_LOG = 0.3  # a regime erring this much (log) beyond the pair's best regime: another kernel
INTERVAL_QUANTILES = (0.05, 0.95)  # the engine's other tiers' interval (``engine.DEFAULT_INTERVALS``)
INTERVAL_MIN_ROWS = 50  # fewer inner residuals: the engine's default interval stays


@dataclass
class PairGroup:
    """One (target GPU, family, dtype[, kv]) group: its measured times and every relative's carried answer."""

    target: str
    family: str
    actual: np.ndarray
    carried: list[Carried]
    regime: str = ""  # dtype[|kv dtype]: ``transfer.regime_key`` with the family
    shape: dict[str, np.ndarray] | None = None  # the rows asked (the far choice's spec answers)
    dtype: str = ""
    kv: str | None = None


def asked_rows(family: str, frame: pd.DataFrame, per_group: int | None, salt: str = "") -> pd.DataFrame:
    """Rows of one GPU the transfer tier is asked (GEMM M >= 1; attention prefill or decode), capped by hash
    per (dtype[, kv dtype])."""
    from components.opmodel.spec import hash_fraction

    if family == "gemm":
        frame = frame[(frame[["M", "N", "K"]] >= 1).all(axis=1)]
    elif family == "attention":
        frame = frame[(frame["S"] == 1) | (frame["S"] == frame["KV"])]
    else:
        frame = frame[frame["T"] >= 1]
    if per_group is None or frame.empty:
        return frame
    keys = ["dtype"] + (["kv_dtype"] if family == "attention" else [])
    dims = [c for c in frame.columns if c not in ("latency_us", "latency_min_us", "latency_max_us")]
    h = pd.Series(hash_fraction(frame.assign(_salt=salt), [*dims, "_salt"]), index=frame.index)
    rank = h.groupby([frame[k] for k in keys], observed=True).rank(method="first")
    return frame[rank.to_numpy() <= per_group]


def device_rows(
    family: str, frame: pd.DataFrame, device: str, per_group: int | None, salt: str, memo: dict | None
) -> pd.DataFrame:
    """``asked_rows`` of one GPU of ``frame``, kept in ``memo`` when given (leave-one-GPU-out benches: each
    GPU's rows are the same in every fold, and hashing them each time cost a tenth of the bench)."""
    key = (family, device, per_group, salt)
    if memo is not None and key in memo:
        return memo[key]
    rows = asked_rows(family, frame[frame["device_id"] == device], per_group, salt)
    if memo is not None:
        memo[key] = rows
    return rows


def shape_of(family: str, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    keys = [*physics.SHAPE_KEYS[family][0], *physics.SHAPE_KEYS[family][1]]
    out: dict[str, Any] = {k: frame[k].to_numpy(dtype="float64") for k in keys if k in frame}
    if family in CURVE_FAMILIES and "distribution" in frame:
        out["distribution"] = frame["distribution"].to_numpy(dtype=object)
    return out


def groups_of(family: str, frame: pd.DataFrame):
    keys = ["dtype"] + (["kv_dtype"] if family == "attention" else [])
    for key, part in frame.groupby(keys, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        yield str(key[0]), (str(key[1]) if family == "attention" else None), part


def pair_groups(
    tier: TransferTier,
    store: dict[str, pd.DataFrame],
    targets: list[str],
    per_group: int | None = PAIR_ROWS,
    relatives: set[str] | None = None,
    memo: dict | None = None,
) -> list[PairGroup]:
    """For each target GPU and group of its rows: every relative's carried answer (relatives: store GPUs other
    than the target, within ``relatives`` when given; ``memo``: ``device_rows``')."""
    out = []
    for family in TRANSFER_FAMILIES:
        frame = store.get(family)
        if frame is None:
            continue
        for target in targets:
            spec = tier.measured.specs.get(target)
            if spec is None:
                continue
            rows = device_rows(family, frame, target, per_group, "", memo)
            for dtype, kv, part in groups_of(family, rows):
                shape = shape_of(family, part)
                numeric = {k: v for k, v in shape.items() if k != "distribution"}
                roof = physics.roofline(family, dtype, numeric, spec, kv)
                if roof.choice.dtype != dtype:
                    continue
                found = [
                    (d, dist)
                    for d, dist in tier.relatives(family, dtype, kv, spec)
                    if d != target and (relatives is None or d in relatives)
                ]
                if not found:
                    continue
                carried = [tier.carried(family, dtype, shape, spec, roof, kv, d, dist) for d, dist in found]
                actual = part["latency_us"].to_numpy(dtype="float64")
                regime = regime_key("", dtype, kv)
                out.append(PairGroup(target, family, actual, carried, regime, shape, dtype, kv))
    return out


def pair_errors(groups: list[PairGroup], allowed: set[str]) -> dict[tuple[str, str, frozenset], float]:
    """Per (family, regime, GPU pair) inside ``allowed``: the median |log(actual / carried)| of plain physics,
    both directions pooled."""
    logs: dict[tuple[str, str, frozenset], list[np.ndarray]] = {}
    for g in groups:
        if g.target not in allowed:
            continue
        for c in g.carried:
            carried = c.by_ratio()
            ok = np.isfinite(carried)
            if c.device in allowed and ok.any():
                key = (g.family, g.regime, frozenset((g.target, c.device)))
                logs.setdefault(key, []).append(np.abs(np.log(g.actual[ok] / carried[ok])))
    return {k: float(np.median(np.concatenate(v))) for k, v in logs.items()}


def inconsistent_relatives(groups: list[PairGroup], allowed: set[str]) -> dict[str, list[str]]:
    """Per ``family|regime``: the GPUs whose table of the regime measured another kernel than the others'.

    A pair's physics error in the regime where the two GPUs agree best (their bf16 GEMMs: H100 <-> H200 3%
    median) is what the roofline ratio misses between them; a regime erring ``INCONSISTENT_LOG`` more says one
    of the two tables is another kernel. A GPU is set apart when it is so against every other GPU of the
    regime (at least two) while some pair of those others agrees (H100's int8_wo GEMMs, measured by
    SGLang 0.5.6 where A100, H200 and L40S ran TensorRT-LLM's weight-only plugin: 90% median from H100,
    13% between A100 and H200)."""
    errors = pair_errors(groups, allowed)
    best: dict[tuple[str, frozenset], float] = {}
    for (family, _, pair), err in errors.items():
        best[(family, pair)] = min(err, best.get((family, pair), np.inf))
    excess = {(f, r, pair): err - best[(f, pair)] for (f, r, pair), err in errors.items()}
    out: dict[str, list[str]] = {}
    for family, regime in sorted({(f, r) for f, r, _ in excess}):
        pairs = {pair: e for (f, r, pair), e in excess.items() if (f, r) == (family, regime)}
        gpus = sorted(set().union(*pairs))
        for gpu in gpus:
            mine = [e for pair, e in pairs.items() if gpu in pair]
            others_agree = any(e <= INCONSISTENT_LOG for pair, e in pairs.items() if gpu not in pair)
            if len(mine) >= 2 and min(mine) > INCONSISTENT_LOG and others_agree:
                out.setdefault(regime_key(family, regime, None), []).append(gpu)
    return out


def fit_ridge(groups: list[PairGroup], allowed: set[str], strength: float) -> list[float] | None:
    """Ridge coefficients of log(actual / carried) on the correction features over pairs inside
    ``allowed``."""
    xs, ys = [], []
    for g in groups:
        if g.target not in allowed:
            continue
        for c in g.carried:
            if c.device not in allowed:
                continue
            carried = c.by_ratio()  # what the correction corrects (a twin is never corrected)
            ok = np.isfinite(carried)
            xs.append(c.features[ok])
            ys.append(np.log(g.actual[ok] / carried[ok]))
    if not xs or sum(len(y) for y in ys) < 20:
        return None
    x, y = np.vstack(xs), np.concatenate(ys)
    gram = x.T @ x + strength * len(y) * np.eye(x.shape[1])
    return [float(v) for v in np.linalg.solve(gram, x.T @ y)]


def relative_errors(groups: list[PairGroup], allowed: set[str]) -> dict[str, float]:
    """Per relative: median |log(actual / carried)| over the other allowed GPUs it answers (plain physics:
    the roofline ratio, as a blend carries it; a twin answers alone)."""
    logs: dict[str, list[np.ndarray]] = {}
    for g in groups:
        if g.target not in allowed:
            continue
        for c in g.carried:
            if c.device in allowed:
                carried = c.by_ratio()
                ok = np.isfinite(carried)
                logs.setdefault(c.device, []).append(np.abs(np.log(g.actual[ok] / carried[ok])))
    return {d: float(np.median(np.concatenate(v))) for d, v in logs.items() if sum(map(len, v))}


def answer(
    group: PairGroup,
    allowed: set[str],
    settings: TransferSettings,
    coefficients: list[float] | None,
    errors: dict[str, float],
) -> np.ndarray:
    """The transfer tier's answer for a group from relatives inside ``allowed`` only (NaN where none
    answers)."""
    carried = [c for c in group.carried if c.device in allowed and c.device != group.target]
    if not carried:
        return np.full(len(group.actual), np.nan)
    return blend(carried, settings, coefficients, errors)[0]


def has_near(group: PairGroup, allowed: set[str]) -> bool:
    """The group's GPU has a relative of its generation among ``allowed`` (its standing: near)."""
    return any(c.near and c.device in allowed and c.device != group.target for c in group.carried)


def gpu_mape(
    groups: list[PairGroup], target: str, family: str, predict: Any, near: bool | None = None
) -> float | None:
    """MAPE of ``predict`` over ``target``'s groups of ``family`` (``near``: only those of that standing,
    ``predict``'s allowed relatives deciding it)."""
    apes = []
    for g in groups:
        if g.target == target and g.family == family:
            got = predict(g, near)
            if got is None:
                continue
            ok = np.isfinite(got)
            apes.append(np.abs(got[ok] - g.actual[ok]) / g.actual[ok])
    total = np.concatenate(apes) if apes else np.zeros(0)
    return float(total.mean()) if len(total) else None


def choose_settings(
    groups: list[PairGroup], train: list[str], family: str
) -> tuple[TransferSettings, TransferSettings | None, dict]:
    """Inner leave-one-GPU-out over ``train``, per standing: the settings with the lowest mean per-GPU MAPE
    over the inner answers whose GPU has no relative of its generation (far), and apart over those that have
    one (near: H200 from H100 with A100 beside it). Plain physics of the nearest relative first in the grid,
    so it wins ties. Near settings are plain physics (no correction: a near pair's peaks, SMs and L2 agree,
    H100 and H200 but for DRAM, so a correction chosen there extrapolates where they do not, MI300X from
    MI308X's 80 CUs: MI300X fp8_block 28.6 -> 36.6%), None where no inner answer is of that standing (the
    model's default, the near relative alone, stands)."""
    grid = [
        TransferSettings(k, tau, ridge, own)
        for own, ridge, k, tau in itertools.product(GRID_NEAR, GRID_RIDGE, GRID_K, GRID_TAU)
    ]
    fits: dict[tuple[str, float], list[float] | None] = {}
    errors = {g: relative_errors(groups, set(train) - {g}) for g in train}
    scores: dict[str, dict[str, float]] = {"far": {}, "near": {}}
    best: dict[str, tuple[TransferSettings | None, float]] = {"far": (TransferSettings(), np.inf)}
    best["near"] = (None, np.inf)
    expected: dict[str, int] = {}
    for settings in grid:
        per_gpu: dict[str, list[float]] = {"far": [], "near": []}
        for held in train:
            allowed = set(train) - {held}
            coefficients = None
            if settings.ridge is not None:
                key = (held, settings.ridge)
                if key not in fits:
                    fits[key] = fit_ridge([g for g in groups if g.family == family], allowed, settings.ridge)
                coefficients = fits[key]
                if coefficients is None:
                    continue

            def predict(g, near, a=allowed, s=settings, c=coefficients, e=errors[held]):
                return answer(g, a, s, c, e) if has_near(g, a) == near else None

            for standing in per_gpu:
                if standing == "near" and settings.ridge is not None:
                    continue  # near pairs share the spec ratios the correction reads: none to learn there
                mape = gpu_mape(groups, held, family, predict, standing == "near")
                if mape is not None:
                    per_gpu[standing].append(mape)
        for standing, values in per_gpu.items():
            # every GPU plain physics scores (the grid's first: it needs no fit) must be scored: a setting
            # without a correction for some GPU is not compared on fewer. (The count was of the GPUs with a
            # group of any family, so a family some GPU lacks -- attention, which no AMD GPU measured -- had
            # no setting scored and always took the default.)
            expected.setdefault(standing, len(values))
            if not values or len(values) < expected[standing]:
                continue
            score = float(np.mean(values))
            name = f"k={settings.k},tau={settings.tau},ridge={settings.ridge}" + (",near" * settings.near)
            scores[standing][name] = round(score, 4)
            if score < best[standing][1] - 1e-9:
                best[standing] = (settings, score)
    return best["far"][0] or TransferSettings(), best["near"][0], scores


def inner_predictor(groups: list[PairGroup], train: list[str], model: TransferModel) -> Any:
    """``(group, *held) -> answer``: the transfer tier's answer of a pair group from the training GPUs but
    ``held`` (the target, and for a kin case its generation's other GPUs: ``tier_choice.kin_cases``), with
    the family's chosen settings and its correction and relative errors fitted without ``held`` (the inner
    leave-one-GPU-out, as ``choose_settings`` scores it)."""
    fits: dict[tuple[str, frozenset[str]], Any] = {}

    def predict_without(group: PairGroup, *held: str, only: set[str] | None = None) -> np.ndarray:
        """``only``: the relatives that may answer (the fits stay those without ``held``)."""
        allowed = set(train) - set(held)
        near = has_near(group, allowed)
        settings = model.settings_of(group.family, near)
        key = (group.family, frozenset(held), near)
        if key not in fits:
            family = [g for g in groups if g.family == group.family]
            coefficients = None if settings.ridge is None else fit_ridge(family, allowed, settings.ridge)
            fits[key] = (coefficients, relative_errors(groups, allowed))
        coefficients, errors = fits[key]
        return answer(group, allowed if only is None else allowed & only, settings, coefficients, errors)

    return predict_without


def inner_intervals(
    groups: list[PairGroup], predict_without: Any, quantiles: tuple[float, float] = INTERVAL_QUANTILES
) -> dict[str, list[float]]:
    """Per family: the (low, high) quantiles of log(actual / answer) of the inner leave-one-GPU-out answers
    (each training GPU answered from the others): the transfer tier's interval, learned where the default
    was a guess. Each GPU weighs alike (its residuals resampled to one count), so the GPU with most rows
    does not set the interval."""
    residuals: dict[str, dict[str, list[np.ndarray]]] = {}
    for g in groups:
        got = predict_without(g, g.target)
        ok = np.isfinite(got)
        if ok.any():
            logs = np.log(g.actual[ok] / got[ok])
            residuals.setdefault(g.family, {}).setdefault(g.target, []).append(logs)
    out = {}
    for family, per_gpu in sorted(residuals.items()):
        values = [np.sort(np.concatenate(v)) for v in per_gpu.values()]
        if sum(map(len, values)) < INTERVAL_MIN_ROWS:
            continue
        grid = np.linspace(0.0, 1.0, 101)
        pooled = np.concatenate([np.quantile(v, grid) for v in values])
        out[family] = [float(np.quantile(pooled, quantiles[0])), float(np.quantile(pooled, quantiles[1]))]
    return out


def far_choice(
    groups: list[PairGroup],
    train: list[str],
    specs: dict[str, Any],
    model: TransferModel,
    spec_without: Any,
    kin: bool = False,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``tier_choice.choose_far`` (and with ``kin``, ``choose_kin``: a record, not applied) with the transfer
    tier's inner answers (``inner_predictor``)."""
    from components.opmodel.tier_choice import choose_far, choose_kin

    predict_without = inner_predictor(groups, train, model)
    fits: dict[frozenset[str], Any] = {}

    def spec_once(*held: str) -> Any:  # A100's far and kin cases share its fold's spec fit
        key = frozenset(held)
        if key not in fits:
            fits[key] = spec_without(*held)
        return fits[key]

    far = choose_far(groups, train, specs, predict_without, spec_once)
    return far, (choose_kin(groups, train, specs, predict_without, spec_once, far) if kin else {})


def reference_clock(specs: dict[str, Any]) -> float | None:
    """The median boost clock (MHz) of the GPUs with one: the clock the learned floors are stated at."""
    clocks = [float(s.boost_clock_mhz) for s in specs.values() if getattr(s, "boost_clock_mhz", None)]
    return float(np.median(clocks)) if clocks else None


def at_clock(rows: pd.DataFrame, specs: dict[str, Any], clock_mhz: float | None) -> pd.DataFrame:
    """``rows`` with each GPU's latencies restated at ``clock_mhz`` (times its boost clock / that): a
    kernel's fixed cost is a count of cycles, so floors learned from GPUs of several clocks are one figure
    (``TransferModel.floor_clock_mhz``). A GPU without a clock is left as measured."""
    if not clock_mhz or rows.empty:
        return rows
    scale = {d: float(s.boost_clock_mhz) / clock_mhz for d, s in specs.items() if s.boost_clock_mhz}
    factor = rows["device_id"].astype(str).map(scale).fillna(1.0).to_numpy(dtype="float64")
    return rows.assign(latency_us=rows["latency_us"].to_numpy(dtype="float64") * factor)


def fit_transfer(
    measured: Any,
    store: dict[str, pd.DataFrame],
    devices: list[str],
    per_group: int = PAIR_ROWS,
    floors: dict[str, float] | None = None,
    memo: dict | None = None,
    spec_without: Any = None,
    kin: bool = False,
) -> TransferModel:
    """The transfer model of the GPUs ``devices`` (the training side): floors, settings chosen by inner
    leave-one-GPU-out, corrections and relative errors over all of them, achievable peaks. ``memo``: kept
    across calls whose GPUs' rows are the same (a leave-one-GPU-out bench's folds): sampled rows and curve
    tables, so the answers are those of a fresh fit. ``spec_without``: training GPUs -> the spec model
    fitted without them; given, the far choice is made (``tier_choice.choose_far``), and with ``kin`` the
    kin choice is measured and recorded (``TransferModel.kin``)."""
    from components.opmodel.achievable import achievable_peaks
    from components.opmodel.spec import latency_floors

    specs = {d: measured.specs[d] for d in devices if d in measured.specs}
    model = TransferModel()
    if floors is None:
        model.floor_clock_mhz = reference_clock(specs)
        floors = {}
        for family in TRANSFER_FAMILIES:
            frame = store.get(family)
            if frame is not None:
                devices_here = sorted(set(map(str, frame["device_id"].unique())))
                rows = pd.concat([device_rows(family, frame, d, 3000, "floor", memo) for d in devices_here])
                rows = at_clock(rows[rows["device_id"].isin(specs)], specs, model.floor_clock_mhz)
                floors.update(latency_floors(family, rows, specs))
    model.floors = floors
    curve_tables = None if memo is None else memo.setdefault("curve_tables", {})
    curves = {f: store[f] for f in CURVE_FAMILIES if f in store}
    # pairs where a relative measured near the row: what is learned is how a measurement carries over
    tier = TransferTier(measured, curves, model, curve_tables, hold=False)
    if memo is not None:  # the pairs' relative answers read no model: a later fold reuses an earlier one's
        tier.share_answers(memo.setdefault("pair_answers", {}))
    train = sorted(specs)
    groups = pair_groups(tier, store, train, per_group, relatives=set(train), memo=memo)
    model.inconsistent = inconsistent_relatives(groups, set(train))
    for g in groups:  # a relative set apart in a regime answers nothing there, in the fit as in the engine
        apart = model.inconsistent.get(regime_key(g.family, g.regime, None), ())
        g.carried = [c for c in g.carried if c.device not in apart]
    # the L2's usable share, chosen first: the other settings are chosen on answers carried with it
    model.l2_capacity, l2_scores = choose_capacity(groups, train, specs, model)
    model.overlap, overlap_scores = choose_overlap(groups, train, specs, model)  # carried with the L2
    recarry(groups, specs, model)
    model.relative_error = relative_errors(groups, set(train))
    scores = {}
    for family in TRANSFER_FAMILIES:
        settings, near_settings, scores[family] = choose_settings(groups, train, family)
        chosen = {family: settings, **({f"{family}|near": near_settings} if near_settings else {})}
        for key, value in chosen.items():
            if value.ridge is not None:
                coefficients = fit_ridge([g for g in groups if g.family == family], set(train), value.ridge)
                if coefficients is not None:
                    model.corrections[key] = coefficients
                else:
                    chosen[key] = TransferSettings(value.k, value.tau, None, value.near)
        model.settings[family] = chosen[family]
        if near_settings:
            model.near_settings[family] = chosen[f"{family}|near"]
    model.intervals = inner_intervals(groups, inner_predictor(groups, train, model))
    if spec_without is not None:
        model.far, model.kin = far_choice(groups, train, specs, model, spec_without, kin)
    model.achievable = achievable_peaks(store, specs, memo=memo)  # per pipe and per (architecture, pipe)
    model.meta = {"devices": train, "pair_rows": per_group, "inner_scores": scores, "l2_scores": l2_scores}
    model.meta["overlap_scores"] = overlap_scores
    return model


def recarry(groups: list[PairGroup], specs: dict[str, Any], model: TransferModel) -> None:
    """Every carried answer of ``groups`` (carried with the DRAM alone) carried again with the model's L2
    capacity and its families' overlap (in place; nothing to do without either)."""
    from components.opmodel.spec import regime

    if not model.l2_capacity and not model.overlap:
        return
    for g in groups:
        if g.shape is None:
            continue
        numeric = {k: v for k, v in g.shape.items() if k != "distribution"}
        x = specs[g.target]
        roof_x = physics.roofline(g.family, g.dtype, numeric, x, g.kv)
        floor_x = model.floor_of(regime(g.family, g.dtype, x), x)
        for c in g.carried:
            y = specs.get(c.device)
            if y is None or c.own_us is None:
                continue
            roof_y = physics.roofline(g.family, g.dtype, numeric, y, g.kv)
            floors = (floor_x, model.floor_of(regime(g.family, g.dtype, y), y))
            c.duration_us, c.ratio_us, _ = carry_times(
                c.own_us,
                (roof_x, roof_y),
                (x, y),
                floors,
                model.l2_capacity,
                True,
                model.overlap.get(g.family),
            )
