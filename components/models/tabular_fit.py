"""Fitting one target of the tabular predictor (pure, single-threaded: Ray runs several side by side): a
LightGBM booster or a scaled sklearn MLP behind one ``predict(x)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from components.models.tabular_config import TabularConfig


@dataclass
class TargetJob:
    """Everything one target's fit needs: picklable, so it can run as a Ray task."""

    target: str
    kind: str  # "regression" | "classification"
    x: np.ndarray
    y: np.ndarray
    categorical: list[int]
    config: TabularConfig
    classes: list[str] = field(default_factory=list)
    monotone: list[int] = field(default_factory=list)  # per design-matrix column, LightGBM's convention


def fit_job(job: TargetJob) -> Any:
    """Fit one target's model; single-threaded (Ray runs several of these side by side)."""
    if job.config.model == "lgbm":
        return _fit_lgbm(job)
    return _fit_mlp(job)


def _fit_lgbm(job: TargetJob) -> Any:
    import lightgbm as lgb

    cfg = job.config
    common = dict(
        n_estimators=cfg.n_estimators,
        learning_rate=cfg.learning_rate,
        num_leaves=cfg.num_leaves,
        min_child_samples=cfg.min_child_samples,
        subsample=cfg.subsample,
        subsample_freq=1,
        colsample_bytree=cfg.colsample,
        random_state=cfg.seed,
        n_jobs=1,
        verbose=-1,
        deterministic=True,
        force_col_wise=True,
    )
    if job.kind == "classification":
        # Balanced weights: the published roofline task scores balanced accuracy on a 50/50 test.
        estimator = lgb.LGBMClassifier(class_weight="balanced", **common)
    elif job.monotone:
        estimator = lgb.LGBMRegressor(
            monotone_constraints=job.monotone, monotone_constraints_method="advanced", **common
        )
    else:
        estimator = lgb.LGBMRegressor(**common)
    estimator.fit(job.x, job.y, categorical_feature=job.categorical or "auto")
    return estimator.booster_


def _mlp_matrix(x: np.ndarray, categorical: list[int], n_codes: list[int]) -> np.ndarray:
    """Numeric columns (NaN -> 0 plus a missing flag) and one-hot categories, for the MLP."""
    numeric_idx = [i for i in range(x.shape[1]) if i not in categorical]
    numeric = x[:, numeric_idx]
    missing = np.isnan(numeric).astype("float64")
    parts = [np.nan_to_num(numeric, nan=0.0), missing]
    for position, count in zip(categorical, n_codes, strict=True):
        codes = x[:, position]
        parts.append(
            np.column_stack([(codes == c).astype("float64") for c in range(count)])
            if count
            else np.empty((len(x), 0))
        )
    return np.column_stack(parts)


class MLPModel:
    """Scaler + sklearn MLP behind the same ``predict(x)`` as a LightGBM booster."""

    def __init__(
        self, categorical: list[int], n_codes: list[int], estimator: Any, scaler: Any, classification: bool
    ) -> None:
        self.categorical, self.n_codes = categorical, n_codes
        self.estimator, self.scaler, self.classification = estimator, scaler, classification

    def predict(self, x: np.ndarray) -> np.ndarray:
        design = self.scaler.transform(_mlp_matrix(x, self.categorical, self.n_codes))
        if self.classification:
            return self.estimator.predict_proba(design)
        return self.estimator.predict(design)


def _fit_mlp(job: TargetJob) -> MLPModel:
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.preprocessing import StandardScaler

    cfg = job.config
    n_codes = [
        int(np.nanmax(job.x[:, i])) + 1 if np.isfinite(job.x[:, i]).any() else 0 for i in job.categorical
    ]
    design = _mlp_matrix(job.x, job.categorical, n_codes)
    scaler = StandardScaler().fit(design)
    kwargs = dict(
        hidden_layer_sizes=cfg.mlp_hidden,
        alpha=cfg.mlp_alpha,
        max_iter=cfg.mlp_max_iter,
        early_stopping=True,
        validation_fraction=0.1,
        n_iter_no_change=15,
        random_state=cfg.seed,
    )
    estimator = MLPClassifier(**kwargs) if job.kind == "classification" else MLPRegressor(**kwargs)
    estimator.fit(scaler.transform(design), job.y)
    return MLPModel(job.categorical, n_codes, estimator, scaler, job.kind == "classification")


def predict_raw(model: Any, x: np.ndarray, classification: bool) -> np.ndarray:
    """Booster.predict and MLPModel.predict share one signature; classifiers return probabilities."""
    return np.asarray(model.predict(x), dtype="float64")
