"""Tabular predictor: one gradient-boosted (LightGBM) or MLP model per target on the feature table.

Inputs are the analytical ``f_*``, device ``dev_*`` and static ``s_*`` columns (``m_*`` measured
counters only with ``use_measured=True``) plus the kernel family and dtype as categorical codes.
Device names/ids and kernel ids are never inputs, so a GPU or kernel the model never saw is just
another point in spec/feature space.

Targets are learned relative to a physical normaliser, in log space, the way PipeWeave learns
efficiency instead of raw time: runtime as ``log(duration_us / f_roofline_time_us)``, bandwidth as
``log(achieved_gbps / dev_dram_gbps)``, GFLOP/s against the op's peak, arithmetic intensity
against the analytical one. A normaliser that is missing on a row falls back to 1 (the raw log
value) and the row carries a ``k_norm_<target>`` flag so the trees can tell the two regimes apart.
Hit rates are fractions, regressed directly and clipped to [0, 1]; the roofline class is a
classifier. Runtime gets split-conformal intervals (``pred_duration_us_lo/hi``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.common.sampling import subsample, unit_hash
from components.features.arrays import map_labels
from components.models import transfer
from components.models.base import CLASS_TARGET, NUMERIC_TARGETS
from components.models.tabular_config import TabularConfig
from components.models.tabular_fit import TargetJob, fit_job, predict_raw

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

# Internal target of the transfer model: measured DRAM traffic over the analytical minimum bytes.
TRAFFIC_TARGET = "traffic_ratio"
CALIBRATION_JOB = "duration_us@calibration"
CATEGORICAL: tuple[str, ...] = ("family", "dtype")
SOURCE_PREFIXES: tuple[str, ...] = ("f_", "dev_", "s_")
MEASURED_PREFIX = "m_"
# Targets that are fractions: regressed as-is and clipped, never logged.
FRACTION_TARGETS: frozenset[str] = frozenset({"l1_hit_rate", "l2_hit_rate"})
# target -> (normaliser column, scale to the target's unit); first available wins per row.
NORMALISERS: dict[str, tuple[tuple[str, float], ...]] = {
    "duration_us": (("f_roofline_time_us", 1.0),),
    "achieved_gbps": (("dev_dram_gbps", 1.0),),
    "gflops": (("f_peak_compute_flops", 1e-9),),
    "arith_intensity": (("f_arith_intensity", 1.0),),
}
MEASURED_NORMALISERS: dict[str, tuple[tuple[str, float], ...]] = {
    "duration_us": (("m_roofline_time_us", 1.0),),
    "arith_intensity": (("m_arith_intensity", 1.0),),
}


def subsample_rows(
    features: pd.DataFrame, max_rows: int | None, salt: str = "tabular-subsample"
) -> pd.DataFrame:
    """At most ``max_rows`` rows, chosen by hash of measurement_id (same rows on every run)."""
    return subsample(features, max_rows, salt)


def _signed_log(values: np.ndarray) -> np.ndarray:
    # Features span 1e-3..1e15; a monotone squash leaves trees unchanged and makes MLPs trainable.
    return np.sign(values) * np.log1p(np.abs(values))


def _numeric(features: transfer.Columns, column: str) -> np.ndarray:
    return transfer.numeric(features, column)


def select_feature_columns(features: pd.DataFrame, use_measured: bool) -> list[str]:
    """Numeric f_/dev_/s_ (and m_ when allowed) columns with at least two distinct values."""
    prefixes = SOURCE_PREFIXES + ((MEASURED_PREFIX,) if use_measured else ())
    columns = []
    for column in features.columns:
        if not column.startswith(prefixes):
            continue
        values = features[column]
        if not pd.api.types.is_numeric_dtype(values):
            continue  # labels such as f_bound: their numeric twin (f_compute_bound) is already a feature
        if values.nunique(dropna=True) < 2:
            continue  # all-NaN or constant on the training side: carries nothing
        columns.append(column)
    return sorted(columns)


def _normaliser(features: transfer.Columns, target: str, use_measured: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-row normaliser (1 where none is known) and the index of the normaliser used (-1 none)."""
    options = NORMALISERS.get(target, ()) + (MEASURED_NORMALISERS.get(target, ()) if use_measured else ())
    n = transfer.n_rows(features)
    base = np.ones(n)
    kind = np.full(n, -1.0)
    for position, (column, scale) in enumerate(options):
        values = _numeric(features, column) * scale
        usable = (kind < 0) & np.isfinite(values) & (values > 0)
        base[usable] = values[usable]
        kind[usable] = position
    return base, kind


@dataclass
class TabularPredictor:
    """LightGBM/MLP models on analytical, device and static features (see TabularConfig.feature_set)."""

    config: TabularConfig = field(default_factory=TabularConfig)
    family: str = field(default="tabular", init=False)
    feature_columns: list[str] = field(default_factory=list)
    categories: dict[str, list[str]] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)  # target -> lgb.Booster | sklearn estimator
    classes: list[str] = field(default_factory=list)
    # {"alpha", "q_log", "n_cal"} plus, for the transfer model, "by_family" and "ood" quantiles.
    conformal: dict[str, Any] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)  # family -> launch floor (µs), transfer model
    target_bounds: dict[str, list[float]] = field(default_factory=dict)  # learned-space clip range per target
    ood: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # family -> input -> [lo, hi]
    # Roofline class of whole-program (gpuFLOPBench) rows from source: components.models.roofline_class.
    class_model: Any = None
    # kernels other GPUs measured, carried where the training side chose (``kernel_siblings``); None: the
    # learned surface answers every row
    siblings: Any = None
    _trained_on: frozenset[str] = field(default_factory=frozenset)

    @property
    def kernel_columns(self) -> tuple[str, ...]:
        """Canonical kernel columns the harness attaches for the class model (source text)."""
        from components.models.roofline_class import KERNEL_COLUMNS

        return KERNEL_COLUMNS if self.class_model is not None else ()

    @property
    def measurement_columns(self) -> tuple[str, ...]:
        from components.models.roofline_class import MEASUREMENT_COLUMNS

        return MEASUREMENT_COLUMNS if self.class_model is not None else ()

    # ------------------------------------------------------------------ protocol

    @property
    def transfer(self) -> bool:
        return self.config.feature_set == "transfer"

    @property
    def targets(self) -> tuple[str, ...]:
        if self.transfer:
            have = set(self.models)
            derived = {"gflops", "achieved_gbps", "arith_intensity"} if "duration_us" in have else set()
            if TRAFFIC_TARGET not in have:
                derived -= {"achieved_gbps", "arith_intensity"}
            return tuple(t for t in (*NUMERIC_TARGETS, CLASS_TARGET) if t in have or t in derived)
        return tuple(t for t in (*NUMERIC_TARGETS, CLASS_TARGET) if t in self.models)

    @property
    def trained_on(self) -> frozenset[str]:
        return self._trained_on

    def fit(
        self, features: pd.DataFrame, executor: Callable[[Sequence[TargetJob]], list[Any]] | None = None
    ) -> TabularPredictor:
        """Fit every target that has enough labelled rows; ``executor`` maps jobs (Ray or serial)."""
        run = executor or (lambda jobs: [fit_job(job) for job in jobs])
        train = subsample_rows(self._in_scope(features), self.config.max_train_rows).reset_index(drop=True)
        if train.empty:
            raise ValueError("no training rows")
        if "measurement_id" not in train.columns or train["measurement_id"].isna().any():
            # Without ids the evaluation harness cannot exclude rows the model has seen.
            raise ValueError("training rows need a measurement_id (the leakage guard keys on it)")
        if self.transfer:
            self.feature_columns = [
                c for c in select_transfer_columns(train) if c not in self.config.transfer_exclude
            ]
        else:
            self.feature_columns = select_feature_columns(train, self.config.use_measured)
        self.categories = {
            c: sorted(train[c].dropna().astype(str).unique().tolist())
            for c in CATEGORICAL
            if c in train.columns
        }
        in_cal = self._calibration_mask(train)
        if self.transfer and self.config.launch_floor:
            self.floors = transfer.launch_floors(train, _numeric(train, "duration_us"))
        jobs = self._jobs(train, in_cal)
        if not jobs:
            raise ValueError(
                "no target has enough labelled training rows "
                f"(min_rows={self.config.min_rows}); nothing to fit"
            )
        fitted = run(jobs)
        models = {job.target: model for job, model in zip(jobs, fitted, strict=True)}
        auxiliary = models.pop(CALIBRATION_JOB, None)
        self.models = models
        if self.transfer:
            self._calibrate_transfer(train, in_cal, auxiliary)
            from components.models.kernel_siblings import fit_for_tabular as fit_siblings

            self.siblings = fit_siblings(self, self._in_scope(features), train, in_cal, auxiliary)
        else:
            self._calibrate(train.loc[in_cal])
        self._trained_on = frozenset(train["measurement_id"].astype(str))
        from components.models.roofline_class import fit_for_tabular, program_rows

        self.class_model = fit_for_tabular(features, self.config.class_label)
        if self.class_model is not None:  # its rows count as seen (the harness's leakage guard)
            seen = features.loc[
                program_rows(features) & features[self.config.class_label].notna(), "measurement_id"
            ]
            self._trained_on = self._trained_on | frozenset(seen.astype(str))
        return self

    def _calibration_mask(self, train: pd.DataFrame) -> np.ndarray:
        """Rows of the calibration slice: a share of kernels (and, transfer model, of whole GPUs)."""
        group = train["kernel_id"] if "kernel_id" in train.columns else train["measurement_id"]
        in_cal = unit_hash(group.astype(str), "tabular-calibration") < self.config.calibration_share
        if self.transfer and "device_id" in train.columns and self.config.calibration_device_share > 0:
            devices = pd.Series(sorted(train["device_id"].dropna().astype(str).unique()))
            if len(devices) >= 2:
                rank = pd.Series(unit_hash(devices, "tabular-calibration-gpu"), index=devices.to_numpy())
                n_out = max(1, round(self.config.calibration_device_share * len(devices)))
                held = set(rank.sort_values().index[:n_out])
                in_cal = in_cal | train["device_id"].astype(str).isin(held).to_numpy()
        return np.asarray(in_cal, dtype=bool)

    def _in_scope(self, features: pd.DataFrame) -> pd.DataFrame:
        if "family" not in features.columns or not self.config.exclude_families:
            return features
        return features[~features["family"].astype(str).isin(self.config.exclude_families)]

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        """``predict_columns`` as a frame on ``features``' index, plus the whole-program rows' class and
        runtime (the roofline-class model and the static estimate read kernel source, not columns)."""
        columns = self.predict_columns(features)
        out = pd.DataFrame(
            {
                k: pd.Series(v, index=features.index, dtype="string") if v.dtype == object else v
                for k, v in columns.items()
            },
            index=features.index,
        )
        if self.class_model is not None:
            from components.models.roofline_class import predict_for_tabular

            classes = predict_for_tabular(self.class_model, features)
            if len(classes):
                if f"pred_{CLASS_TARGET}" not in out.columns:
                    out[f"pred_{CLASS_TARGET}"] = pd.Series(pd.NA, index=out.index, dtype="string")
                out[f"pred_{CLASS_TARGET}"] = out[f"pred_{CLASS_TARGET}"].astype("string")
                out.loc[classes.index, f"pred_{CLASS_TARGET}"] = classes
        if "program" in self.config.exclude_families and "family" in features.columns:
            # Whole programs: a static estimate or a stated reason per row, never a silent NaN.
            from components.models.cuda_runtime import program_runtime

            runtime = program_runtime(features)
            if len(runtime):
                out["pred_duration_us"] = pd.to_numeric(out.get("pred_duration_us"), errors="coerce")
                out.loc[runtime.index, "pred_duration_us"] = runtime["pred_duration_us"].to_numpy()
                notes = (
                    out["pred_note"].astype("string")
                    if "pred_note" in out.columns
                    else pd.Series(pd.NA, index=out.index, dtype="string")
                )
                notes.loc[runtime.index] = runtime["pred_note"].to_numpy()
                out["pred_note"] = notes
        return out

    def predict_columns(self, features: transfer.Columns) -> dict[str, np.ndarray]:
        """Every ``pred_*`` as an array, from a feature DataFrame (evaluation) or a dict of equal-length
        arrays (serving: no DataFrame per request). The one prediction path: ``predict`` and the server
        both call it. Rows of an excluded family get NaN (None for labels)."""
        out = self._predict_transfer(features) if self.transfer else self._predict_plain(features)
        if "family" in features and self.config.exclude_families:
            family = transfer.labels(features, "family")
            excluded = np.zeros(len(family), dtype=bool)
            for name in self.config.exclude_families:  # a few labels: one comparison each
                excluded |= np.asarray(family == name, dtype=bool)
            if excluded.any():
                for key, values in out.items():
                    values = values.copy() if values.dtype == object else values.astype("float64")
                    values[excluded] = None if values.dtype == object else np.nan
                    out[key] = values
        return out

    def _predict_plain(self, features: transfer.Columns) -> dict[str, np.ndarray]:
        x = self.design_matrix(features)
        out: dict[str, np.ndarray] = {}
        for target in NUMERIC_TARGETS:
            if target not in self.models:
                continue
            out[f"pred_{target}"] = self._predict_target(target, features, x)
            if target == "duration_us" and self.conformal:
                spread = math.exp(self.conformal["q_log"])
                out["pred_duration_us_lo"] = out["pred_duration_us"] / spread
                out["pred_duration_us_hi"] = out["pred_duration_us"] * spread
        self._predict_class(out, x)
        return out

    def _predict_class(self, out: dict[str, np.ndarray], x: np.ndarray) -> None:
        if CLASS_TARGET not in self.models:
            return
        proba = predict_raw(self.models[CLASS_TARGET], x, classification=True)
        if proba.ndim == 1:  # binary booster: probability of classes[1]
            proba = np.column_stack([1 - proba, proba])
        out[f"pred_{CLASS_TARGET}"] = np.asarray(self.classes, dtype=object)[proba.argmax(axis=1)]

    # ------------------------------------------------------------------ transfer model

    def _runtime_base(self, features: transfer.Columns) -> np.ndarray:
        """Roofline time of THIS GPU plus the launch floor (µs): what the learned factor scales.

        Why the floor sits inside: for a tiny kernel the factor is then ~1 on every GPU (the launch
        dominates), for a large one it is the inverse efficiency; either way it transfers, and the
        runtime stays monotone in the GPU's peaks.
        """
        base = transfer.runtime_normaliser(features, self.config.runtime_normaliser)
        return base + transfer.floor_of(features, self.floors)

    def _runtime_from_raw(self, features: transfer.Columns, raw: np.ndarray) -> np.ndarray:
        """Compose: (roofline time of THIS GPU + launch floor) x the learned, bounded slowdown."""
        low, high = self.target_bounds.get("duration_us", [-np.inf, np.inf])
        return self._runtime_base(features) * np.exp(np.clip(raw, low, high))

    def _predict_transfer(self, features: transfer.Columns) -> dict[str, np.ndarray]:
        frame = transfer.transfer_frame(features, self._static_columns())
        x = self.design_matrix(features, frame)
        out: dict[str, np.ndarray] = {}
        if "duration_us" in self.models:
            runtime = self._runtime_from_raw(features, predict_raw(self.models["duration_us"], x, False))
            from components.models.kernel_siblings import apply

            floor = transfer.floor_of(features, self.floors)
            runtime, _ = apply(self.siblings, features, runtime, self._runtime_base(features), floor)
            out["pred_duration_us"] = runtime
            flops, bytes_min = _numeric(features, "f_flops"), _numeric(features, "f_dram_bytes_min")
            # One runtime, one FLOP count, one byte count: rates and intensity cannot contradict it.
            with np.errstate(divide="ignore", invalid="ignore"):
                out["pred_gflops"] = flops / (runtime * 1e3)
                if TRAFFIC_TARGET in self.models:
                    low, high = self.target_bounds.get(TRAFFIC_TARGET, [-np.inf, np.inf])
                    ratio = np.exp(np.clip(predict_raw(self.models[TRAFFIC_TARGET], x, False), low, high))
                    traffic = bytes_min * ratio
                    out["pred_achieved_gbps"] = traffic / (runtime * 1e3)
                    out["pred_arith_intensity"] = flops / traffic
            ood = self._ood(features, frame)
            if self.conformal:
                spread = np.exp(self._interval_q_log(features, ood))
                out["pred_duration_us_lo"] = runtime / spread
                out["pred_duration_us_hi"] = runtime * spread
            out["pred_ood"] = ood.astype("float64")
        for target in sorted(FRACTION_TARGETS):
            if target in self.models:
                out[f"pred_{target}"] = self._predict_target(target, features, x)
        self._predict_class(out, x)
        notes = transfer.emulation_notes(features)
        if notes is not None:
            out["pred_note"] = notes
        return out

    def _ood(self, features: transfer.Columns, frame: dict[str, np.ndarray]) -> np.ndarray:
        if not self.ood:
            return np.zeros(transfer.n_rows(features), dtype=bool)
        return transfer.ood_flags(features, frame, self.ood)

    def _interval_q_log(self, features: transfer.Columns, ood: np.ndarray) -> np.ndarray:
        """Mondrian conformal: the family's quantile; an out-of-range query gets the wider OOD one."""
        q_global = float(self.conformal["q_log"])
        q = map_labels(transfer.labels(features, "family"), self.conformal.get("by_family", {}), q_global)
        q_ood = self.conformal.get("ood")
        if q_ood is not None:
            q = np.where(ood, np.maximum(q, float(q_ood)), q)
        return q

    def _static_columns(self) -> list[str]:
        return [c for c in self.feature_columns if c.startswith("s_")]

    def _calibrate_transfer(self, train: pd.DataFrame, in_cal: np.ndarray, auxiliary: Any) -> None:
        """Residuals of the auxiliary fit (never saw the calibration kernels and GPUs), per family."""
        transfer_train = transfer.transfer_frame(train, self._static_columns())
        self.ood = transfer.ood_ranges(train, transfer_train)
        self.conformal = {}
        if auxiliary is None or not in_cal.any():
            return
        cal = train.loc[in_cal]
        true = _numeric(cal, "duration_us")
        pred = self._runtime_from_raw(cal, predict_raw(auxiliary, self.design_matrix(cal), False))
        keep = np.isfinite(true) & (true > 0) & np.isfinite(pred) & (pred > 0)
        scores = np.abs(np.log(pred[keep] / true[keep]))
        if scores.size < 10:
            return  # too few to calibrate honestly: no interval rather than a wrong one
        alpha = self.config.conformal_alpha
        families = (
            cal["family"].astype(str).to_numpy()[keep]
            if "family" in cal.columns
            else np.full(scores.size, "")
        )
        # Out of range relative to what the auxiliary model trained on.
        aux_ranges = transfer.ood_ranges(
            train.loc[~in_cal], {k: v[~in_cal] for k, v in transfer_train.items()}
        )
        flagged = transfer.ood_flags(cal, {k: v[in_cal] for k, v in transfer_train.items()}, aux_ranges)[keep]
        by_family = {
            f: _conformal_q(scores[families == f], alpha)
            for f in sorted(set(families))
            if (families == f).sum() >= self.config.min_calibration_rows
        }
        q_global = _conformal_q(scores, alpha)
        q_ood = (
            _conformal_q(scores[flagged], alpha)
            if flagged.sum() >= self.config.min_calibration_rows
            else max([q_global, *by_family.values()])
        )
        self.conformal = {
            "alpha": alpha,
            "q_log": q_global,
            "n_cal": int(scores.size),
            "by_family": by_family,
            "ood": q_ood,
            "n_cal_ood": int(flagged.sum()),
        }

    # ------------------------------------------------------------------ design matrix

    def design_matrix(
        self, features: transfer.Columns, frame: dict[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """Signed-log numeric features, normaliser flags, then integer category codes (-1 unseen).
        ``frame``: the transfer inputs of ``features`` when already computed."""
        n = transfer.n_rows(features)
        if self.transfer:
            if frame is None:
                frame = transfer.transfer_frame(features, self._static_columns())
            nan = np.full(n, np.nan)
            columns = [_signed_log(frame[c]) if c in frame else nan for c in self.feature_columns]
        else:
            columns = [_signed_log(_numeric(features, c)) for c in self.feature_columns]
            for target in NORMALISERS:
                columns.append(_normaliser(features, target, self.config.use_measured)[1])
        # Fixed CATEGORICAL order, not dict order: predictor.json is written with sorted keys.
        for name in (c for c in CATEGORICAL if c in self.categories):
            lookup = {value: code for code, value in enumerate(self.categories[name])}
            # An absent column or a missing value is no category: -1, like an unseen one.
            codes = map_labels(transfer.labels(features, name, n), lookup, -1.0) if name in features else None
            columns.append(codes if codes is not None else np.full(n, -1.0))
        return np.column_stack(columns) if columns else np.empty((n, 0))

    def _monotone(self) -> list[int]:
        """LightGBM monotone constraints over the design matrix (0 = free; categories free)."""
        if not self.config.monotone:
            return []
        signs = [transfer.MONOTONE.get(c, 0) for c in self.feature_columns]
        return signs + [0] * len(self.categories) if any(signs) else []

    def _categorical_positions(self) -> list[int]:
        first = len(self.feature_columns) + (0 if self.transfer else len(NORMALISERS))
        return list(range(first, first + len(self.categories)))

    def _encode_target(self, target: str, features: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(y in model space, mask of usable rows)."""
        y = _numeric(features, target)
        if target in FRACTION_TARGETS:
            return y, np.isfinite(y)
        if self.transfer and target == "duration_us":
            base = self._runtime_base(features)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.log(y / base), np.isfinite(y) & (y > 0) & np.isfinite(base)
        if self.transfer and target == TRAFFIC_TARGET:
            gbps, duration = _numeric(features, "achieved_gbps"), _numeric(features, "duration_us")
            bytes_min = _numeric(features, "f_dram_bytes_min")
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = gbps * duration * 1e3 / bytes_min
            return np.log(ratio), np.isfinite(ratio) & (ratio > 0)
        base, _ = _normaliser(features, target, self.config.use_measured)
        usable = np.isfinite(y) & (y > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(y / base), usable

    def _predict_target(self, target: str, features: transfer.Columns, x: np.ndarray) -> np.ndarray:
        raw = predict_raw(self.models[target], x, classification=False)
        if target in FRACTION_TARGETS:
            return np.clip(raw, 0.0, 1.0)
        base, _ = _normaliser(features, target, self.config.use_measured)
        return base * np.exp(raw)

    def _jobs(self, train: pd.DataFrame, in_cal: np.ndarray) -> list[TargetJob]:
        x = self.design_matrix(train)
        categorical = self._categorical_positions()
        jobs = []
        targets = (
            ("duration_us", TRAFFIC_TARGET, *sorted(FRACTION_TARGETS)) if self.transfer else NUMERIC_TARGETS
        )
        for target in targets:
            if target != TRAFFIC_TARGET and target not in train.columns:
                continue
            y, usable = self._encode_target(target, train)
            if self.transfer and target in ("duration_us", TRAFFIC_TARGET) and usable.sum():
                # The learned quantity is bounded: predictions are clipped to the range seen in training.
                self.target_bounds[target] = [
                    float(np.quantile(y[usable], 0.001)),
                    float(np.quantile(y[usable], 0.999)),
                ]
            monotone = self._monotone() if self.transfer and target == "duration_us" else []
            if self.transfer and target == "duration_us":
                aux = usable & ~in_cal
                if aux.sum() >= self.config.min_rows and (usable & in_cal).sum() >= 10:
                    jobs.append(
                        TargetJob(
                            CALIBRATION_JOB,
                            "regression",
                            x[aux],
                            y[aux],
                            categorical,
                            self.config,
                            monotone=monotone,
                        )
                    )
            elif target == "duration_us":
                usable = usable & ~in_cal
            if usable.sum() >= self.config.min_rows:
                jobs.append(
                    TargetJob(
                        target,
                        "regression",
                        x[usable],
                        y[usable],
                        categorical,
                        self.config,
                        monotone=monotone,
                    )
                )
        label_column = self.config.class_label
        if label_column in train.columns:
            labels = train[label_column].astype("string")
            usable = labels.notna().to_numpy()
            classes = sorted(labels[usable].unique().tolist())
            if usable.sum() >= self.config.min_rows and len(classes) >= 2:
                self.classes = classes
                codes = labels[usable].map({c: i for i, c in enumerate(classes)}).to_numpy(dtype="int64")
                jobs.append(
                    TargetJob(
                        CLASS_TARGET, "classification", x[usable], codes, categorical, self.config, classes
                    )
                )
        return jobs

    def _calibrate(self, calibration: pd.DataFrame) -> None:
        """q = the ceil((n+1)(1-alpha))/n quantile of |log(pred/true)| on the held-out slice."""
        self.conformal = {}
        if "duration_us" not in self.models or calibration.empty:
            return
        true = _numeric(calibration, "duration_us")
        pred = self._predict_target("duration_us", calibration, self.design_matrix(calibration))
        keep = np.isfinite(true) & (true > 0) & np.isfinite(pred) & (pred > 0)
        scores = np.abs(np.log(pred[keep] / true[keep]))
        n = scores.size
        if n < 10:
            return  # too few to calibrate honestly: no interval rather than a wrong one
        self.conformal = {
            "alpha": self.config.conformal_alpha,
            "q_log": _conformal_q(scores, self.config.conformal_alpha),
            "n_cal": int(n),
        }

    # ------------------------------------------------------------------ persistence

    def save(self, directory: Path) -> None:
        from components.models import tabular_store

        tabular_store.save(self, directory)

    @classmethod
    def load(cls, directory: Path) -> TabularPredictor:
        from components.models import tabular_store

        return tabular_store.load(cls, directory)


def _conformal_q(scores: np.ndarray, alpha: float) -> float:
    """The ceil((n+1)(1-alpha))/n empirical quantile of the nonconformity scores."""
    n = scores.size
    level = min(1.0, math.ceil((n + 1) * (1 - alpha)) / n)
    return float(np.quantile(scores, level, method="higher"))


def select_transfer_columns(features: pd.DataFrame) -> list[str]:
    """Transferable inputs (components.models.transfer) that vary on the training side."""
    frame = transfer.transfer_frame(features)
    return sorted(c for c, values in frame.items() if pd.Series(values).nunique(dropna=True) >= 2)
