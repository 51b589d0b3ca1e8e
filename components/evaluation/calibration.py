"""The calibration tier, measured: leave one GPU out, give the model K of its calibration rows.

The calibration suite is a fixed set of kernels, the same for every GPU: each source's kernels
whose hash (``kernel_id``, salt ``calibration-suite``) falls below ``suite_share``. A new GPU runs
the suite; on the bundled data its calibration rows are its measurements of suite kernels. The
rows scored are the held-out GPU's rows of every OTHER kernel: disjoint from the suite, and the
same rows for every K, so the curve K = 0, 25, 100, 400 compares like with like.

K rows are drawn deterministically: round-robin over (source, op family), each group in hash
order of kernel_id, so a short sweep covers every family the GPU has rather than the largest.

Candidates (``components.models.calibration``): no correction, one GPU-wide factor, factors per op
family and bound, those plus a small residual tree, and a refit of the model with the K rows added
at weight ``refit_weight``. Which one a fold uses at each K is chosen by the same measurement on
the TRAIN side only (nested: ``inner_gpus`` training GPUs, each held out in turn of the fold's
training rows and calibrated with its own K suite rows); the held-out GPU's error never chooses.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from components.common.bench_rows import bench_row
from components.common.sampling import unit_hash
from components.models.calibration import METHODS, fit_correction

SUITE_SALT = "calibration-suite"
REFIT = "refit"
CANDIDATES: tuple[str, ...] = (*METHODS, REFIT)
# Simplest first: on a tie the fold keeps the simpler correction.
_ORDER = {m: i for i, m in enumerate(CANDIDATES)}


@dataclass(frozen=True)
class CalibrationParams:
    """params.yaml ``calibration:`` (nothing here is chosen on a test GPU)."""

    suite_share: float = 0.2  # share of each source's kernels in the calibration suite
    methods: tuple[str, ...] = CANDIDATES
    refit_weight: float = 10.0  # each calibration row counts this many times in the refit
    shrink: float = 20.0  # pseudo-rows pulling a family's factor to the GPU-wide one
    inner_gpus: int = 2  # training GPUs held out in turn to choose the method (nested)
    inner_max_test_rows: int = 3000  # scored rows per inner GPU (hash cap)
    seed: int = 17

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", tuple(self.methods))
        if not 0 < self.suite_share < 1:
            raise ValueError(f"calibration.suite_share must be in (0, 1), got {self.suite_share}")
        unknown = [m for m in self.methods if m not in CANDIDATES]
        if unknown or not self.methods:
            raise ValueError(
                f"calibration.methods: unknown {', '.join(unknown) or '(empty)'}; "
                f"choose from {', '.join(CANDIDATES)}"
            )
        if self.refit_weight < 1 or self.shrink < 0 or self.inner_gpus < 1 or self.inner_max_test_rows < 10:
            raise ValueError(
                "calibration: refit_weight >= 1, shrink >= 0, inner_gpus >= 1 and "
                "inner_max_test_rows >= 10 are required"
            )

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> CalibrationParams:
        from dataclasses import fields

        from components.platform.config import ParamsError

        raw = params.get("calibration") or {}
        if not isinstance(raw, dict):
            raise ParamsError(f"params.yaml calibration: must be a mapping, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ParamsError(
                f"params.yaml calibration: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
            )
        try:
            return cls(**raw)
        except (TypeError, ValueError) as exc:
            raise ParamsError(f"params.yaml calibration: {exc}") from None


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """The K values, sorted and distinct; a ValueError for a negative one."""
    bad = [k for k in ks if int(k) != k or k < 0]
    if bad:
        raise ValueError(f"--calibration-rows must be whole numbers >= 0, got {bad[0]}")
    return tuple(sorted({int(k) for k in ks}))


# ---------------------------------------------------------------------- the suite and the draw


def suite_mask(table: pd.DataFrame, share: float) -> np.ndarray:
    """True for rows of calibration-suite kernels (the same kernels on every GPU)."""
    return unit_hash(table["kernel_id"].astype(str), SUITE_SALT) < share


def measured_mask(rows: pd.DataFrame) -> np.ndarray:
    """Rows with a measured, positive runtime."""
    y = pd.to_numeric(rows["duration_us"], errors="coerce").to_numpy(dtype="float64")
    return np.isfinite(y) & (y > 0)


def draw_calibration_rows(
    device_rows: pd.DataFrame, k: int, share: float, exclude_families: Sequence[str] = ()
) -> pd.Index:
    """K suite rows of one GPU (fewer when it has fewer), in a fixed order.

    Only suite kernels with a measured runtime in the model's scope; round-robin over (source,
    family), each in hash order of kernel_id then measurement_id: K + 1 rows extend the K rows.
    """
    if k <= 0:
        return device_rows.index[:0]
    pool = device_rows[suite_mask(device_rows, share) & measured_mask(device_rows)]
    if exclude_families and "family" in pool.columns:
        pool = pool[~pool["family"].astype(str).isin(list(exclude_families))]
    if pool.empty:
        return pool.index
    order = pd.DataFrame(
        {
            "group": pool["source"].astype(str) + "|" + pool["family"].astype(str),
            "h": unit_hash(pool["kernel_id"].astype(str), SUITE_SALT + "-draw"),
            "m": pool["measurement_id"].astype(str).to_numpy(),
        },
        index=pool.index,
    ).sort_values(["group", "h", "m"], kind="mergesort")
    order["turn"] = order.groupby("group", sort=False).cumcount()
    order = order.sort_values(["turn", "h", "m"], kind="mergesort")
    return order.index[:k]


def scored_rows(device_rows: pd.DataFrame, share: float, max_rows: int | None = None) -> pd.Index:
    """The GPU's rows of non-suite kernels (what a user asks about), optionally hash-capped."""
    from components.evaluation.harness import capped_rows

    index = device_rows.index[~suite_mask(device_rows, share)]
    return capped_rows(index, device_rows, max_rows, salt="calibration-scored")


# ---------------------------------------------------------------------- one held-out GPU


# (train rows) -> fitted predictor; the caller decides the config and where the fit runs.
FitFn = Callable[[pd.DataFrame], Any]


def tabular_fit(config: Any, max_train_rows: int | None, executor: Any = None) -> FitFn:
    """Fit the tabular model on a train side capped (by hash, like every bench fit) to
    ``max_train_rows`` in-scope rows; added calibration rows (ids ``...#calN``) are always kept."""
    from dataclasses import replace

    from components.models.tabular import TabularPredictor, subsample_rows

    uncapped = replace(config, max_train_rows=None)

    def fit(train: pd.DataFrame) -> Any:
        added = train["measurement_id"].astype(str).str.contains("#cal", regex=False)
        base = train.loc[~added]
        if config.exclude_families and "family" in base.columns:
            base = base[~base["family"].astype(str).isin(list(config.exclude_families))]
        frame = pd.concat([subsample_rows(base, max_train_rows), train.loc[added]], ignore_index=True)
        return TabularPredictor(uncapped).fit(frame, executor=executor)

    return fit


def _mape(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float, int]:
    from components.common.metrics import regression_report

    report = regression_report(measured, predicted)
    return report["mape"], report["within_10"], report["n"]


def _with_calibration_rows(train: pd.DataFrame, cal: pd.DataFrame, weight: float) -> pd.DataFrame:
    """The train side plus the K rows repeated ``weight`` times (fresh ids, so the leakage guard
    still keys on the originals' absence from the scored rows)."""
    copies = []
    for i in range(max(1, round(weight))):
        part = cal.copy()
        part["measurement_id"] = part["measurement_id"].astype(str) + f"#cal{i}"
        copies.append(part)
    return pd.concat([train, *copies], ignore_index=True)


def gpu_curve(
    train: pd.DataFrame,
    device_rows: pd.DataFrame,
    ks: Sequence[int],
    fit: FitFn,
    params: CalibrationParams,
    *,
    base: Any = None,
    exclude_families: Sequence[str] = (),
    max_test_rows: int | None = None,
    methods: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every candidate at every K on one held-out GPU.

    Returns {"scored": index, "measured": array, "pred": {(k, method): array}, "n_cal": {k: n}}.
    ``base`` is the model fitted on ``train`` (fitted here when None).
    """
    methods = tuple(methods or params.methods)
    base = base if base is not None else fit(train)
    scored = scored_rows(device_rows, params.suite_share, max_test_rows)
    scored_frame = device_rows.loc[scored]
    measured = pd.to_numeric(scored_frame["duration_us"], errors="coerce").to_numpy(dtype="float64")
    base_scored = base.predict(scored_frame)
    base_pred = pd.to_numeric(base_scored["pred_duration_us"], errors="coerce").to_numpy(dtype="float64")
    scored_input = scored_frame.join(base_scored.drop(columns=["pred_duration_us"], errors="ignore"))
    out: dict[str, Any] = {"scored": scored, "measured": measured, "pred": {}, "n_cal": {}}
    for k in ks:
        cal_index = draw_calibration_rows(device_rows, k, params.suite_share, exclude_families)
        out["n_cal"][k] = len(cal_index)
        if k == 0 or not len(cal_index):
            for method in methods:
                out["pred"][(k, method)] = base_pred
            continue
        cal = device_rows.loc[cal_index]
        cal_pred_frame = base.predict(cal)
        cal_input = cal.join(cal_pred_frame.drop(columns=["pred_duration_us"], errors="ignore"))
        cal_pred = pd.to_numeric(cal_pred_frame["pred_duration_us"], errors="coerce").to_numpy(
            dtype="float64"
        )
        for method in methods:
            if method == REFIT:
                refitted = fit(_with_calibration_rows(train, cal, params.refit_weight))
                pred = refitted.predict(scored_frame)["pred_duration_us"]
                out["pred"][(k, method)] = pd.to_numeric(pred, errors="coerce").to_numpy(dtype="float64")
                continue
            correction = fit_correction(method, cal_input, cal_pred, shrink=params.shrink, seed=params.seed)
            out["pred"][(k, method)] = correction.apply(scored_input, base_pred)
    return out


def inner_devices(
    train: pd.DataFrame,
    outer: str,
    params: CalibrationParams,
    k_max: int,
    exclude_families: Sequence[str] = (),
) -> list[str]:
    """Training GPUs to hold out for the choice: enough suite rows for the largest K and scored
    rows in scope; ``inner_gpus`` of them in hash order (salted by the outer GPU)."""
    rows = train
    if exclude_families and "family" in rows.columns:
        rows = rows[~rows["family"].astype(str).isin(list(exclude_families))]
    rows = rows[measured_mask(rows)]
    in_suite = suite_mask(rows, params.suite_share)
    stats = pd.DataFrame({"device": rows["device_id"].astype(str).to_numpy(), "suite": in_suite})
    counts = stats.groupby("device")["suite"].agg(["sum", "size"])
    eligible = counts[(counts["sum"] >= max(k_max, 25)) & (counts["size"] - counts["sum"] >= 200)].index
    # A source with a single training GPU would lose its only GPU: not a fair inner fold.
    per_source = rows.groupby("source")["device_id"].nunique()
    sources_of = rows.groupby("device_id")["source"].unique()
    fair = [d for d in eligible if all(per_source[s] >= 2 for s in sources_of[d])]
    ranked = sorted(fair, key=lambda d: unit_hash([d], f"calibration-inner-{outer}")[0])
    return ranked[: params.inner_gpus]


def choose_methods(
    curves: Sequence[dict[str, Any]], ks: Sequence[int], methods: Sequence[str]
) -> dict[int, str]:
    """Per K, the candidate with the lowest median (over the inner GPUs) runtime MAPE."""
    chosen: dict[int, str] = {}
    for k in ks:
        scores = {}
        for method in methods:
            values = [
                _mape(c["measured"], c["pred"][(k, method)])[0] for c in curves if (k, method) in c["pred"]
            ]
            values = [v for v in values if math.isfinite(v)]
            if values:
                scores[method] = statistics.median(values)
        chosen[k] = min(scores, key=lambda m: (scores[m], _ORDER[m])) if scores else "none"
    return chosen


@dataclass
class CalibrationBench:
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, dict[int, str]] = field(default_factory=dict)


def _row(
    scope: str, metric: str, value: float, n: int, n_asked: int, family: str = "tabular", **extra: Any
) -> dict[str, Any]:
    return bench_row("unseen-gpu", family, f"duration_us[{scope}]", scope, metric, value, n, n_asked, **extra)


def run_calibration_bench(
    table: pd.DataFrame,
    devices: Sequence[str],
    ks: Sequence[int],
    fit: FitFn,
    params: CalibrationParams,
    *,
    exclude_families: Sequence[str] = (),
    max_test_rows: int | None = None,
    log: Callable[[str], None] = lambda _: None,
    on_progress: Callable[[CalibrationBench], None] | None = None,
) -> CalibrationBench:
    """Leave each of ``devices`` out; per K, score the method chosen on the train side, and every
    candidate (reported, never used to choose)."""
    ks = check_ks(ks)
    result = CalibrationBench()
    result.notes.append(
        f"calibration: suite = kernels with hash(kernel_id) < {params.suite_share} "
        "(same kernels on every GPU); "
        "K rows drawn from the held-out GPU's suite rows only, scored on its other kernels "
        "(same rows for every K); "
        f"method per K chosen on {params.inner_gpus} training GPUs held out inside each fold (nested), "
        f"candidates {', '.join(params.methods)}; refit weight {params.refit_weight:g}"
    )
    per_gpu: dict[int, dict[str, tuple[float, float, int, int]]] = {k: {} for k in ks}
    k_max = max(ks)
    for device in devices:
        started = time.perf_counter()
        on_device = table["device_id"].astype(str) == device
        train, device_rows = table.loc[~on_device], table.loc[on_device]
        in_scope = (
            ~device_rows["family"].astype(str).isin(list(exclude_families))
            if exclude_families
            else pd.Series(True, index=device_rows.index)
        )
        if not (in_scope & pd.Series(measured_mask(device_rows), index=device_rows.index)).any():
            result.notes.append(f"calibration {device}: no runtime rows in the model's scope, not scored")
            continue
        inner = inner_devices(train, device, params, k_max, exclude_families)
        multi = [m for m in params.methods if m != "none"]
        curves = []
        for g in inner:
            on_g = train["device_id"].astype(str) == g
            curves.append(
                gpu_curve(
                    train.loc[~on_g],
                    train.loc[on_g],
                    ks,
                    fit,
                    params,
                    exclude_families=exclude_families,
                    max_test_rows=params.inner_max_test_rows,
                )
            )
        chosen = choose_methods(curves, ks, params.methods) if curves else {k: "none" for k in ks}
        if not multi:
            chosen = {k: "none" for k in ks}
        result.chosen[device] = chosen
        curve = gpu_curve(
            train,
            device_rows,
            ks,
            fit,
            params,
            exclude_families=exclude_families,
            max_test_rows=max_test_rows,
        )
        n_asked = int(np.isfinite(curve["measured"]).sum())
        for k in ks:
            for method in params.methods:
                mape, within, n = _mape(curve["measured"], curve["pred"][(k, method)])
                result.rows.append(
                    _row(f"device={device},calibration={k},method={method}", "mape", mape, n, n_asked)
                )
            mape, within, n = _mape(curve["measured"], curve["pred"][(k, chosen[k])])
            per_gpu[k][device] = (mape, within, n, n_asked)
            scope = f"device={device},calibration={k}"
            result.rows.append(
                _row(scope, "mape", mape, n, n_asked, method=chosen[k], n_cal=curve["n_cal"][k])
            )
            result.rows.append(
                _row(scope, "within_10", within, n, n_asked, method=chosen[k], n_cal=curve["n_cal"][k])
            )
        seconds = time.perf_counter() - started
        result.timings.append(
            {
                "fold": f"unseen-gpu:{device}",
                "inner": inner,
                "seconds": round(seconds, 1),
                "chosen": {str(k): m for k, m in chosen.items()},
            }
        )
        log(
            f"calibration {device}: inner {', '.join(inner) or 'none'}; "
            + "; ".join(f"K={k} {chosen[k]} {100 * per_gpu[k][device][0]:.1f}%" for k in ks)
            + f" ({seconds:.0f} s)"
        )
        if on_progress is not None:  # an hour-long run that dies late keeps the GPUs it measured
            on_progress(result)
    result.rows += median_rows(result.rows)
    return result


def _scope_parts(scope: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in scope.split(",") if "=" in p)


def median_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median-GPU rows per K (method chosen on the train side, and each candidate) from the
    per-GPU rows; also merges the rows of runs over disjoint GPU sets."""
    chosen: dict[tuple[int, str], dict[str, tuple[float | None, int]]] = {}
    method_mape: dict[tuple[int, str], list[float]] = {}
    asked: dict[int, set[str]] = {}
    for row in rows:
        parts = _scope_parts(str(row.get("scope", "")))
        if "device" not in parts or "calibration" not in parts:
            continue
        k = int(parts["calibration"])
        asked.setdefault(k, set()).add(parts["device"])
        if "method" in parts:
            if row["metric"] == "mape" and row["ours"] is not None:
                method_mape.setdefault((k, parts["method"]), []).append(float(row["ours"]))
        else:
            chosen.setdefault((k, row["metric"]), {})[parts["device"]] = (row["ours"], row["n"])
    out = []
    for k in sorted(asked):
        for metric in ("mape", "within_10"):
            values = [float(v) for v, _ in chosen.get((k, metric), {}).values() if v is not None]
            if values:
                out.append(
                    _row(
                        f"median GPU,calibration={k}",
                        metric,
                        statistics.median(values),
                        len(values),
                        len(asked[k]),
                    )
                )
        for (kk, method), values in sorted(
            method_mape.items(), key=lambda i: (i[0][0], _ORDER.get(i[0][1], 99))
        ):
            if kk == k and values:
                out.append(
                    _row(
                        f"median GPU,calibration={k},method={method}",
                        "mape",
                        statistics.median(values),
                        len(values),
                        len(asked[k]),
                    )
                )
    return out


def curve_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The error curve: one line per K, the median GPU under the chosen method and each candidate."""
    medians: dict[int, dict[str, Any]] = {}
    for row in rows:
        scope = str(row.get("scope", ""))
        if not scope.startswith("median GPU,calibration=") or row["metric"] != "mape":
            continue
        parts = dict(p.split("=", 1) for p in scope.split(",")[1:])
        entry = medians.setdefault(int(parts["calibration"]), {})
        entry[parts.get("method", "chosen")] = row["ours"]
        entry["n"] = max(entry.get("n", 0), row["n"])
    methods = sorted(
        {m for e in medians.values() for m in e if m not in ("chosen", "n")}, key=lambda m: _ORDER.get(m, 99)
    )
    header = ["K", "median GPU MAPE (method chosen on train GPUs)", *methods, "GPUs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    pct = lambda v: "\N{EN DASH}" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    for k in sorted(medians):
        e = medians[k]
        lines.append(
            "| "
            + " | ".join(
                [str(k), pct(e.get("chosen")), *(pct(e.get(m)) for m in methods), str(e.get("n", 0))]
            )
            + " |"
        )
    return "\n".join(lines)


def run_cli_bench(
    table: pd.DataFrame,
    ks: Sequence[int],
    params: dict[str, Any],
    config: Any,
    max_train_rows: int,
    min_gpu_rows: int,
    devices: Sequence[str] | None,
    max_test_rows: int | None,
    command: str,
    json_file: Any,
    *,
    echo: Callable[[str], None],
    log: Callable[[str], None],
) -> CalibrationBench:
    """``kernelcast bench accuracy --split unseen-gpu --calibration-rows K ...``: the folds of the
    leave-one-GPU-out bench, the curve printed, the rows written as the bench's JSON."""
    import json
    from pathlib import Path

    from components.common.atomic import atomic_write_text
    from components.evaluation.folds import select_folds

    calibration = CalibrationParams.from_params(params)
    folds = select_folds(table, "unseen-gpu", min_gpu_rows, devices)
    held = [f.name.split(":", 1)[1] for f in folds]
    header = (
        f"train sides subsampled deterministically (hash of measurement_id) to at most "
        f"{max_train_rows} in-scope rows; calibration rows added on top"
    )

    def save(partial: CalibrationBench) -> None:
        if json_file is not None:
            payload = {
                "command": command,
                "rows": partial.rows,
                "notes": [header, *partial.notes],
                "timings": partial.timings,
            }
            atomic_write_text(Path(json_file), json.dumps(payload, indent=2) + "\n")

    result = run_calibration_bench(
        table,
        held,
        ks,
        tabular_fit(config, max_train_rows),
        calibration,
        exclude_families=config.exclude_families,
        max_test_rows=max_test_rows,
        log=log,
        on_progress=save,
    )
    result.notes.insert(0, header)
    echo(curve_markdown(result.rows))
    for note in result.notes:
        echo(f"- {note}")
    if json_file is not None:
        save(CalibrationBench(result.rows, result.notes[1:], result.timings, result.chosen))
        echo(f"wrote {json_file}")
    return result
