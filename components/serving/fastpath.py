"""The transfer tabular model's prediction on numpy columns: no DataFrame per request.

Why: ``TabularPredictor.predict`` works on a feature DataFrame -- right for evaluation, but its
per-column pandas work (two transfer frames, ``to_numeric`` per column, string maps) costs tens of
milliseconds for ONE question, more than the trees. This is the same computation on the arrays of
``featurise.op_feature_columns``: design matrix, runtime = (normaliser + launch floor) x the learned
slowdown clipped to its bounds, derived GFLOP/s / bandwidth / intensity, Mondrian conformal
interval, out-of-range flags, hit rates, class and emulation notes.

Only the transfer feature set is covered (``fast_model`` returns None otherwise, and the caller
uses ``predictor.predict``); ``tests/unit/test_serving_native.py`` checks it against
``TabularPredictor.predict`` on real models.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from components.features.analytical import RATE_FREE_COLUMNS
from components.features.arrays import label_codes, map_labels
from components.models import transfer as tr


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a / b
    return np.where(np.isfinite(out), out, np.nan)


def _get(cols: dict[str, Any], name: str, n: int) -> np.ndarray:
    value = cols.get(name)
    return np.full(n, np.nan) if value is None else np.asarray(value, dtype="float64")


def transfer_columns(cols: dict[str, Any], n: int) -> dict[str, np.ndarray]:
    """``transfer.transfer_frame`` as a dict of arrays (op questions carry no static ``s_*`` columns)."""
    out = {c: _get(cols, c, n) for c in (*RATE_FREE_COLUMNS, *tr.DEVICE_COUNT_COLUMNS)}
    flops, dram, l2_bytes = out["f_flops"], out["f_dram_bytes_min"], out["f_l2_bytes_tiled"]
    sms = _get(cols, "dev_sms", n)
    l2_capacity = _get(cols, "dev_l2_mb", n) * 1e6
    llc = _get(cols, "dev_llc_mb", n)
    llc_capacity = np.where(llc > 0, llc * 1e6 + l2_capacity, l2_capacity)
    out.update(
        {
            "t_flops_per_sm": _ratio(flops, sms),
            "t_bytes_per_sm": _ratio(dram, sms),
            "t_l2_over_dram_bytes": _ratio(l2_bytes, dram),
            "t_footprint_over_l2": _ratio(dram, l2_capacity),
            "t_footprint_over_llc": _ratio(dram, llc_capacity),
            "t_sfu_per_flop": _ratio(out["f_sfu_ops"], flops),
            "t_tensor_share": _ratio(out["f_tensor_flops"], flops),
            "t_flops_per_cta": _ratio(flops, out["f_ctas"]),
            "t_base_over_boost_clock": _ratio(
                _get(cols, "dev_base_clock_mhz", n), _get(cols, "dev_boost_clock_mhz", n)
            ),
            "t_tdp_w_per_peak_tflops": _ratio(
                _get(cols, "dev_tdp_w", n), _get(cols, "f_peak_compute_flops", n) / 1e12
            ),
        }
    )
    return out


class FastTransfer:
    """A fitted transfer ``TabularPredictor``'s arithmetic on arrays."""

    def __init__(self, predictor: Any) -> None:
        self.p = predictor

    def design(self, cols: dict[str, Any], frame: dict[str, np.ndarray], n: int) -> np.ndarray:
        from components.models.tabular import CATEGORICAL, _signed_log

        categorical = [c for c in CATEGORICAL if c in self.p.categories]
        x = np.full((n, len(self.p.feature_columns) + len(categorical)), np.nan)
        for j, c in enumerate(self.p.feature_columns):
            # Absent from the question's columns (the static s_* of a source, for an op question) and not a
            # ratio derived here: NaN, as prefilled -- no signed log of an all-NaN column.
            if c in frame and (c in cols or c in tr.DERIVED_COLUMNS):
                x[:, j] = _signed_log(frame[c])
        for j, name in enumerate(categorical, start=len(self.p.feature_columns)):
            lookup = {value: code for code, value in enumerate(self.p.categories[name])}
            x[:, j] = map_labels(cols[name], lookup, -1.0)
        return x

    def _floor(self, family: np.ndarray) -> np.ndarray:
        floors = self.p.floors
        if not floors:
            return np.zeros(len(family))
        default = floors.get(tr.UNKNOWN_SOURCE_FLOOR, 0.0)
        per_family = {
            key.split("|", 1)[1]: value for key, value in floors.items() if key.startswith("query|")
        }
        return map_labels(family, per_family, default)

    def _normaliser(self, cols: dict[str, Any], n: int) -> np.ndarray:
        which = self.p.config.runtime_normaliser
        values = _get(cols, tr.RUNTIME_NORMALISERS[which], n)
        if which == "pipes-overlap":
            compute = _get(cols, "f_compute_time_us", n) * np.nan_to_num(
                _get(cols, "f_sm_imbalance", n), nan=1.0
            )
            pipes = np.column_stack([compute, _get(cols, "f_dram_time_us", n), _get(cols, "f_l2_time_us", n)])
            combined = np.power(
                np.nansum(np.power(np.nan_to_num(pipes, nan=0.0), tr.OVERLAP_P), axis=1), 1.0 / tr.OVERLAP_P
            )
            values = np.where(np.isfinite(values), combined, np.nan)
        return np.where(np.isfinite(values) & (values > 0), values, np.nan)

    def _ood(self, family: np.ndarray, frame: dict[str, np.ndarray]) -> np.ndarray:
        """Out of the training range: a family never trained on, or a value beyond its family's range by more
        than a quarter of the bound. Bounds looked up per row by family code (one pass per column)."""
        if not self.p.ood:
            return np.zeros(len(family), dtype=bool)
        codes, uniques = label_codes(family)
        entries = [self.p.ood.get(str(u)) for u in uniques]
        flags = np.array([e is None for e in entries], dtype=bool)[codes]
        for column in sorted({c for e in entries if e for c in e}):
            if column not in frame:
                continue  # NaN: never outside
            low = np.array(
                [e[column][0] - 0.25 * abs(e[column][0]) if e and column in e else -np.inf for e in entries]
            )[codes]
            high = np.array(
                [e[column][1] + 0.25 * abs(e[column][1]) if e and column in e else np.inf for e in entries]
            )[codes]
            values = frame[column]
            flags |= np.isfinite(values) & ((values < low) | (values > high))
        return flags

    def _notes(self, cols: dict[str, Any], n: int) -> np.ndarray | None:
        """Emulation notes (a dtype not native on the GPU), or None when no row has one."""
        notes: np.ndarray | None = None
        codes, uniques = label_codes(cols["dtype"])
        for dtype, columns in tr.NATIVE_DTYPE_PEAKS.items():
            wanted = [k for k, u in enumerate(uniques) if str(u) == dtype]
            present = [c for c in columns if c in cols]
            if not wanted or not present:  # no row asks in this dtype: no pass over the rows
                continue
            rows = np.isin(codes, wanted)
            peaks = np.column_stack([_get(cols, c, n) for c in present])
            known = np.isfinite(peaks).any(axis=1)
            native = np.nan_to_num(peaks, nan=0.0).max(axis=1) > 0
            for i in np.flatnonzero(rows & known & ~native):
                if notes is None:
                    notes = np.full(n, None, dtype=object)
                notes[i] = (
                    f"{dtype} is not native on {cols['device_id'][i]}: emulation estimate (converted and "
                    "computed on the FP32 pipe)"
                )
        return notes

    def _walk_order(self, x: np.ndarray) -> np.ndarray | None:
        """One row order for every compiled tree model of the predictor (sorting once, not per model):
        the sort keys of the runtime model's trees, the biggest ensemble."""
        compiled = [m.compiled for m in self.p.models.values() if getattr(m, "compiled", None) is not None]
        if not compiled:
            return None
        from components.serving.compiled import walk_order

        main = getattr(self.p.models.get("duration_us"), "compiled", None) or compiled[0]
        return walk_order(x, main.sort_keys)

    def predict(self, cols: dict[str, Any], stage_s: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """``pred_*`` arrays, as ``TabularPredictor.predict`` would put them in its frame. ``stage_s``: where
        to add the thread CPU seconds of each stage (``design``: transfer columns, design matrix and walk
        order; ``trees``: every tree model; ``derive``: runtime, rates, interval, flags and notes)."""
        import time

        from components.models.tabular import CLASS_TARGET, FRACTION_TARGETS, TRAFFIC_TARGET

        p = self.p
        n = len(cols["family"])
        family = cols["family"]
        started = time.thread_time()
        frame = transfer_columns(cols, n)
        x = self.design(cols, frame, n)
        order = self._walk_order(x)
        designed = time.thread_time()
        # Every tree model first, in one stretch (one walk order for all), then the arithmetic on top.
        used = {"duration_us", TRAFFIC_TARGET, *FRACTION_TARGETS}
        tree_targets = [t for t in p.models if t in used]
        raw = {
            t: np.asarray(
                p.models[t].predict(x, order)
                if order is not None and getattr(p.models[t], "compiled", None) is not None
                else p.models[t].predict(x),
                dtype="float64",
            )
            for t in tree_targets
        }
        walked = time.thread_time()

        def predict(target: str) -> np.ndarray:
            return raw[target]

        out: dict[str, np.ndarray] = {}
        if "duration_us" in p.models:
            low, high = p.target_bounds.get("duration_us", [-np.inf, np.inf])
            base = self._normaliser(cols, n) + self._floor(family)
            runtime = base * np.exp(np.clip(predict("duration_us"), low, high))
            out["pred_duration_us"] = runtime
            flops, bytes_min = _get(cols, "f_flops", n), _get(cols, "f_dram_bytes_min", n)
            with np.errstate(divide="ignore", invalid="ignore"):
                out["pred_gflops"] = flops / (runtime * 1e3)
                if TRAFFIC_TARGET in p.models:
                    low_t, high_t = p.target_bounds.get(TRAFFIC_TARGET, [-np.inf, np.inf])
                    ratio = np.exp(np.clip(predict(TRAFFIC_TARGET), low_t, high_t))
                    traffic = bytes_min * ratio
                    out["pred_achieved_gbps"] = traffic / (runtime * 1e3)
                    out["pred_arith_intensity"] = flops / traffic
            ood = self._ood(family, frame)
            if p.conformal:
                q_global = float(p.conformal["q_log"])
                by_family = p.conformal.get("by_family", {})
                q = map_labels(family, by_family, q_global)
                if p.conformal.get("ood") is not None:
                    q = np.where(ood, np.maximum(q, float(p.conformal["ood"])), q)
                spread = np.exp(q)
                out["pred_duration_us_lo"] = runtime / spread
                out["pred_duration_us_hi"] = runtime * spread
            out["pred_ood"] = ood.astype("float64")
        for target in sorted(FRACTION_TARGETS):
            if target in p.models:
                out[f"pred_{target}"] = np.clip(predict(target), 0.0, 1.0)
        if CLASS_TARGET in p.models:
            proba = np.asarray(p.models[CLASS_TARGET].predict(x), dtype="float64")
            if proba.ndim == 1:
                proba = np.column_stack([1 - proba, proba])
            out[f"pred_{CLASS_TARGET}"] = np.asarray(p.classes, dtype=object)[proba.argmax(axis=1)]
        notes = self._notes(cols, n)
        if notes is not None:
            out["pred_note"] = notes
        if p.config.exclude_families:
            excluded = np.zeros(n, dtype=bool)
            for name in p.config.exclude_families:  # a few labels: one comparison each, no str conversion
                excluded |= family == name
            for key, values in out.items():
                if excluded.any():
                    values = values.astype(object) if values.dtype != object else values
                    values[excluded] = None
                    out[key] = values
        if stage_s is not None:
            done = time.thread_time()
            for stage, seconds in (
                ("design", designed - started),
                ("trees", walked - designed),
                ("derive", done - walked),
            ):
                stage_s[stage] = stage_s.get(stage, 0.0) + seconds
        return out


def fast_model(predictor: Any) -> FastTransfer | None:
    """The array path for a fitted transfer-feature-set TabularPredictor; None for anything else."""
    from components.models.tabular import TabularPredictor

    if not isinstance(predictor, TabularPredictor) or not predictor.transfer or predictor.config.use_measured:
        return None
    cached = getattr(predictor, "_serving_fast", None)
    if cached is None:
        cached = FastTransfer(predictor)
        with contextlib.suppress(AttributeError):
            predictor._serving_fast = cached  # dataclass instance: one FastTransfer per loaded model
    return cached
