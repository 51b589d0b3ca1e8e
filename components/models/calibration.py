"""Per-GPU corrections fitted on a few calibration rows of a new GPU (few-shot adaptation).

A model trained without a GPU predicts it from its spec alone; a short calibration sweep on that GPU
(the fixed calibration suite, ``components.evaluation.calibration``) gives K measured rows. A
``Correction`` learns from those rows how the model's runtime errs on that GPU and multiplies
every later prediction for it by the learned factor:

- ``none``: no change (the spec-only model);
- ``global``: one factor, the median log-ratio measured/predicted over the K rows;
- ``group``: that factor refined per op family and per (family, roofline bound), each level shrunk
  towards its parent by its row count (``shrink`` pseudo-rows), so a family seen twice moves little;
- ``residual``: ``group`` plus a small, heavily regularised boosted tree on the remaining log-ratio
  over the GPU-independent kernel features (size, intensity, shape ratios).

A re-weighted refit of the whole model with the K rows is the fourth candidate; it is a training
run, not a correction object, and lives in ``components.evaluation.calibration``.

Corrections are plain data (JSON; the tree as LightGBM's model text) so ``kernelcast calibrate``
can store one per GPU under KERNELCAST_HOME and the predictor apply it at serving time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.models import CORRECTIONS_DIR

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

METHODS: tuple[str, ...] = ("none", "global", "group", "residual")
DEFAULT_SHRINK = 20.0  # pseudo-rows pulling a family's factor towards the GPU-wide one
# GPU-independent kernel features the residual tree may split on (when present in the table).
RESIDUAL_PREFIXES: tuple[str, ...] = ("f_",)
RESIDUAL_MAX_FEATURES = 40
RESIDUAL_MIN_ROWS = 50  # fewer rows: the residual step is skipped (the group factors stay)
_BOUND_COLUMNS: tuple[str, ...] = ("pred_roofline_class", "roofline_class_predicted")


class CalibrationError(ValueError):
    """A correction cannot be fitted or read (the message names the input and what is wrong)."""


def log_ratios(measured: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(measured / predicted) and the mask of rows where both are finite and positive."""
    measured = np.asarray(measured, dtype="float64")
    predicted = np.asarray(predicted, dtype="float64")
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0) & (predicted > 0)
    out = np.full(measured.shape, np.nan)
    out[ok] = np.log(measured[ok] / predicted[ok])
    return out, ok


def _groups(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Op family and (family, bound) keys per row; bound from the predicted roofline class."""
    family = (
        rows["family"].astype("string").fillna("?")
        if "family" in rows.columns
        else pd.Series("?", index=rows.index, dtype="string")
    )
    bound = pd.Series("?", index=rows.index, dtype="string")
    for column in _BOUND_COLUMNS:
        if column in rows.columns:
            bound = rows[column].astype("string").fillna("?")
            break
    return family.astype(str), (family + "|" + bound).astype(str)


def _shrunk_medians(
    keys: pd.Series, values: np.ndarray, parent: np.ndarray, shrink: float
) -> dict[str, float]:
    """Per key: the parent's value plus the median deviation from it, shrunk by n / (n + shrink)."""
    out: dict[str, float] = {}
    frame = pd.DataFrame({"key": keys.to_numpy(), "dev": values - parent})
    for key, part in frame.groupby("key", sort=True):
        n = len(part)
        out[str(key)] = float(np.median(part["dev"].to_numpy())) * n / (n + shrink)
    return out


def residual_columns(rows: pd.DataFrame) -> list[str]:
    """The numeric GPU-independent kernel features present, in a stable order (capped)."""
    columns = [
        c
        for c in rows.columns
        if str(c).startswith(RESIDUAL_PREFIXES) and pd.api.types.is_numeric_dtype(rows[c])
    ]
    return sorted(columns)[:RESIDUAL_MAX_FEATURES]


def _matrix(rows: pd.DataFrame, columns: list[str]) -> np.ndarray:
    data = (
        np.column_stack(
            [
                pd.to_numeric(rows[c], errors="coerce").astype("float64").to_numpy()
                if c in rows.columns
                else np.full(len(rows), np.nan)
                for c in columns
            ]
        )
        if columns
        else np.empty((len(rows), 0))
    )
    # Signed log: sizes span ten decades; trees only need the order, but it keeps the JSON readable.
    return np.sign(data) * np.log1p(np.abs(data))


@dataclass
class Correction:
    """A fitted per-GPU runtime correction: ``apply`` multiplies predictions by exp(log factor)."""

    method: str
    device_id: str = ""
    n_rows: int = 0
    global_log: float = 0.0
    family_log: dict[str, float] = field(default_factory=dict)
    bound_log: dict[str, float] = field(default_factory=dict)
    residual_columns: list[str] = field(default_factory=list)
    residual_model: str | None = None  # LightGBM model text
    _booster: Any = field(default=None, repr=False, compare=False)

    def log_factor(self, rows: pd.DataFrame) -> np.ndarray:
        """The log multiplier per row of ``rows`` (feature-table rows of this GPU)."""
        factor = np.full(len(rows), self.global_log if self.method != "none" else 0.0)
        if self.method in ("group", "residual"):
            family, bound = _groups(rows)
            factor += family.map(self.family_log).fillna(0.0).to_numpy(dtype="float64")
            factor += bound.map(self.bound_log).fillna(0.0).to_numpy(dtype="float64")
        if self.method == "residual" and self.residual_model:
            factor += self.booster().predict(_matrix(rows, self.residual_columns))
        return factor

    def apply(self, rows: pd.DataFrame, predicted: np.ndarray | pd.Series) -> np.ndarray:
        """Corrected runtime predictions for ``rows`` (NaN stays NaN)."""
        return np.asarray(predicted, dtype="float64") * np.exp(self.log_factor(rows))

    def booster(self) -> Any:
        if self._booster is None and self.residual_model:
            import lightgbm as lgb

            self._booster = lgb.Booster(model_str=self.residual_model)
        return self._booster

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "device_id": self.device_id,
            "n_rows": self.n_rows,
            "global_log": self.global_log,
            "family_log": self.family_log,
            "bound_log": self.bound_log,
            "residual_columns": self.residual_columns,
            "residual_model": self.residual_model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "correction") -> Correction:
        if not isinstance(data, dict) or data.get("method") not in METHODS:
            raise CalibrationError(
                f"{where}: not a calibration correction (needs method one of {', '.join(METHODS)})"
            )
        try:
            return cls(
                method=str(data["method"]),
                device_id=str(data.get("device_id", "")),
                n_rows=int(data.get("n_rows", 0)),
                global_log=float(data.get("global_log", 0.0)),
                family_log={str(k): float(v) for k, v in (data.get("family_log") or {}).items()},
                bound_log={str(k): float(v) for k, v in (data.get("bound_log") or {}).items()},
                residual_columns=[str(c) for c in data.get("residual_columns") or []],
                residual_model=data.get("residual_model"),
            )
        except (TypeError, ValueError) as exc:
            raise CalibrationError(f"{where}: malformed correction ({exc})") from None

    def save(self, path: Path) -> None:
        from components.common.atomic import atomic_write_text

        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> Correction:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CalibrationError(f"{path}: cannot read the correction ({exc})") from None
        return cls.from_dict(data, str(path))


def fit_correction(
    method: str,
    rows: pd.DataFrame,
    predicted: np.ndarray | pd.Series,
    *,
    target: str = "duration_us",
    shrink: float = DEFAULT_SHRINK,
    seed: int = 17,
    device_id: str = "",
) -> Correction:
    """Fit ``method`` on calibration ``rows`` (measured ``target``) and the model's ``predicted`` runtimes.

    Rows without a finite positive measurement or prediction are not used; with none left the
    correction is the identity (``n_rows`` = 0 says so).
    """
    if method not in METHODS:
        raise CalibrationError(f"unknown calibration method {method!r}; choose from {', '.join(METHODS)}")
    if target not in rows.columns:
        raise CalibrationError(f"calibration rows have no {target!r} column")
    if shrink < 0 or not math.isfinite(shrink):
        raise CalibrationError(f"shrink must be a finite number >= 0, got {shrink}")
    ratios, ok = log_ratios(
        pd.to_numeric(rows[target], errors="coerce").to_numpy(dtype="float64"),
        np.asarray(predicted, dtype="float64"),
    )
    used = rows.loc[ok]
    values = ratios[ok]
    correction = Correction(method=method, device_id=device_id, n_rows=int(ok.sum()))
    if method == "none" or not len(values):
        return correction
    correction.global_log = float(np.median(values))
    if method == "global":
        return correction
    family, bound = _groups(used)
    correction.family_log = _shrunk_medians(
        family, values, np.full(len(values), correction.global_log), shrink
    )
    level1 = correction.global_log + family.map(correction.family_log).to_numpy(dtype="float64")
    correction.bound_log = _shrunk_medians(bound, values, level1, shrink)
    if method == "residual" and len(values) >= RESIDUAL_MIN_ROWS:
        columns = residual_columns(used)
        if columns:
            remaining = values - correction.log_factor(used)
            correction.residual_columns = columns
            correction.residual_model = _fit_residual(_matrix(used, columns), remaining, seed)
    return correction


def _fit_residual(x: np.ndarray, y: np.ndarray, seed: int) -> str:
    """A small tree ensemble on the leftover log-ratio: few, shallow, shrunk trees (K is small)."""
    import lightgbm as lgb

    n = len(y)
    model = lgb.LGBMRegressor(
        n_estimators=60,
        learning_rate=0.05,
        num_leaves=4,
        max_depth=2,
        min_child_samples=max(10, n // 20),
        reg_lambda=5.0,
        subsample=0.8,
        subsample_freq=1,
        colsample_bytree=0.8,
        objective="huber",
        alpha=0.3,
        random_state=seed,
        n_jobs=1,
        verbose=-1,
        deterministic=True,
        force_col_wise=True,
    )
    model.fit(x, y)
    return model.booster_.model_to_string()


# ---------------------------------------------------------------------- serving: a stored correction per GPU

# under KERNELCAST_HOME (and a logged model's folder): <device_id>.json per calibrated GPU
CALIBRATION_DIR = CORRECTIONS_DIR


def correction_path(home: Any, device_id: str) -> Path:
    return Path(home) / CALIBRATION_DIR / f"{device_id}.json"


def load_corrections(home: Any) -> dict[str, Any]:
    """Every stored correction under ``home`` by device id (none stored: an empty dict)."""
    folder = Path(home) / CALIBRATION_DIR
    if not folder.is_dir():
        return {}
    return {path.stem: Correction.load(path) for path in sorted(folder.glob("*.json"))}


def apply_corrections(
    rows: pd.DataFrame, predictions: pd.DataFrame, corrections: dict[str, Any]
) -> pd.DataFrame:
    """``predictions`` with each calibrated GPU's runtime (and interval) multiplied by its factor,
    and the rates derived from the runtime (GFLOP/s, GB/s) divided by it."""
    if not corrections or "device_id" not in rows.columns or "pred_duration_us" not in predictions.columns:
        return predictions
    out = predictions.copy()
    factor = np.ones(len(rows))
    devices = rows["device_id"].astype(str).to_numpy()
    inputs = rows.join(predictions.drop(columns=["pred_duration_us"], errors="ignore"), rsuffix="_pred")
    for device_id, correction in corrections.items():
        on = devices == device_id
        if on.any():
            factor[on] = np.exp(correction.log_factor(inputs.loc[on]))
    for column in ("pred_duration_us", "pred_duration_us_lo", "pred_duration_us_hi"):
        if column in out.columns:
            out[column] = pd.to_numeric(out[column], errors="coerce").to_numpy(dtype="float64") * factor
    for column in ("pred_gflops", "pred_achieved_gbps"):
        if column in out.columns:
            out[column] = pd.to_numeric(out[column], errors="coerce").to_numpy(dtype="float64") / factor
    return out
