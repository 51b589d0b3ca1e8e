"""Roofline class (compute- vs bandwidth-bound) of a whole-program kernel from its source, no profiling.

Inputs per kernel (none measured on a GPU):
- the kernel's own text (CUDA ``__global__`` body, or the OpenMP ``target`` region the offload
  symbol's ``_l<line>`` names): arithmetic and memory tokens, FP64/FP32 types, math calls, loops;
- static SASS features (``s_*``: instruction mix, loop bodies, registers) where NVRTC compiled it;
- the launch configuration the data gives (grid and block: total threads bound the problem size,
  so how much of it fits in L2 and how much DRAM traffic there is);
- the GPU's ridge points (FP32, FP64) and L2 size, as ratios with the estimates above.
Estimated intensities follow the label's own definition (Bolet et al.: bandwidth-bound iff
spAI < ridge_fp32, dpAI < ridge_fp64 and intAI < ridge_int): per-thread FP32/FP64/integer
instructions over per-thread global-memory bytes, from SASS when compiled, from tokens otherwise.

Learner: logistic regression or small LightGBM (balanced class weights), optionally with the labels
of the most similar training kernels by code (TF-IDF kNN, never from the same program). Chosen by grouped
cross-validation INSIDE the train side (folds by program, so a program's kernels never sit on both
sides of a fold); the test side is never looked at (``select_params``). Protocol written down in
``PROTOCOL``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from components.common.lazy import lazy_module
from components.common.metrics import balanced_accuracy
from components.models.roofline_class_features import (
    LAUNCH_DIMS,
    class_feature_frame,
    kernel_text,
    strip_comments,
)

pd = lazy_module("pandas")  # tables only: a single question's arrays load no pandas

PROTOCOL = (
    "Learner and inputs chosen among CANDIDATES (logistic regression or small LightGBM, with or without the "
    "code-similarity kNN inputs) by balanced accuracy of 2-fold GroupKFold by program, repeated 3 times "
    "with hashed group orders, on the split's TRAIN side only (2 folds: a held-out program has its "
    "-cuda/-omp sibling in training about half the time, as the bolet test side does for 51% of its "
    "kernels). Best mean wins (ties within 0.001: the earlier, simpler candidate). Refit on the whole "
    "train side; the test side is scored once, by the bench."
)
KERNEL_COLUMNS: tuple[str, ...] = ("source_text", "language", "program")
MEASUREMENT_COLUMNS: tuple[str, ...] = (*LAUNCH_DIMS, "params_json")
LABELS: tuple[str, str] = ("bandwidth", "compute")
MODEL_FILE = "roofline_class.json"

# ---------------------------------------------------------------------- model


@dataclass
class ClassParams:
    learner: str = "logreg"  # "logreg" (standardised, L2) | "lgbm" (small trees)
    knn: bool = True  # add the labels of the most similar training kernels (code TF-IDF) as inputs
    c: float = 0.1  # logreg inverse regularisation
    num_leaves: int = 4
    n_estimators: int = 200
    min_child_samples: int = 40
    learning_rate: float = 0.03
    seed: int = 17


KNN_K = 5
MAX_TEXT_CHARS = 6000


def _squash(x: np.ndarray) -> np.ndarray:
    # Counts span 0..1e9: a signed log makes them usable by a linear model (trees do not care).
    return np.sign(x) * np.log1p(np.abs(x))


def _vectorizer() -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(token_pattern=r"[A-Za-z_]\w*|\d+|[^\sA-Za-z_\d]", sublinear_tf=True, min_df=2)


def knn_inputs(
    query: list[str],
    query_programs: list[str],
    texts: list[str],
    labels: np.ndarray,
    programs: list[str],
    vectorizer: Any,
) -> np.ndarray:
    """Per query kernel: nearest training kernel's label and similarity, the similarity-weighted
    label of the ``KNN_K`` nearest, their mean similarity. Kernels of the query's own program are
    never neighbours (at fit time that mimics a program never seen)."""
    if not texts:
        return np.full((len(query), 4), np.nan)
    sims = (vectorizer.transform(query) @ vectorizer.transform(texts).T).toarray()
    return knn_from_similarities(sims, query_programs, labels, programs)


def knn_from_similarities(
    sims: np.ndarray, query_programs: list[str], labels: np.ndarray, programs: list[str]
) -> np.ndarray:
    """``knn_inputs`` from the (query x training kernel) code similarities."""
    same = np.asarray(query_programs, dtype=object)[:, None] == np.asarray(programs, dtype=object)[None, :]
    sims[same] = -1.0
    k = min(KNN_K, sims.shape[1])
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(sims, order, 1)
    lab = labels[order].astype("float64")
    weight = np.clip(top, 0, None) + 1e-6
    return np.column_stack([lab[:, 0], top[:, 0], (lab * weight).sum(1) / weight.sum(1), top.mean(1)])


KNN_COLUMNS = ("k_nn1_label", "k_nn1_sim", "k_nn_label", "k_nn_sim")


def knn_key(
    query: list[str], query_programs: list[str], texts: list[str], labels: list[int], programs: list[str]
) -> str:
    """A digest of everything ``knn_inputs`` reads (the TF-IDF is fitted on ``texts``): the memo's key."""
    import hashlib

    digest = hashlib.sha256()
    for part in (query, query_programs, texts, programs):
        digest.update(f"{len(part)}\x1e".encode())
        for item in part:
            digest.update(item.encode("utf-8", "surrogatepass") + b"\x1f")
    digest.update(np.asarray(labels, dtype="int64").tobytes())
    return digest.hexdigest()


def _column_reader(features: pd.DataFrame | list[dict]) -> tuple[int, Any]:
    """(rows, column name -> float64 array, NaN where absent) of a feature frame or a list of row dicts."""
    if isinstance(features, list):
        return len(features), lambda c: np.asarray([r.get(c, np.nan) for r in features], dtype="float64")
    n = len(features)
    return n, lambda c: features[c].to_numpy("float64") if c in features.columns else np.full(n, np.nan)


@dataclass
class RooflineClassModel:
    params: ClassParams = field(default_factory=ClassParams)
    columns: list[str] = field(default_factory=list)
    booster: Any = None  # lgbm
    linear: dict[str, list[float]] = field(
        default_factory=dict
    )  # logreg: median, mean, scale, coef, intercept
    texts: list[str] = field(default_factory=list)  # kNN memory: training kernels' code, labels, programs
    labels: list[int] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)
    cv: dict[str, Any] = field(default_factory=dict)  # the selection record (train side only)
    _vectorizer: Any = None
    # The saved booster's text, built into a Booster on first use: loading a predictor for op
    # questions (which never reach this model) must not pay LightGBM's ~1 s import.
    _booster_text: str | None = None
    # The folder whose numpy TF-IDF and flat trees (roofline_class_native) answer questions, when complete.
    _native_dir: Path | None = None
    _native: dict[str, Any] = field(default_factory=dict)
    # kNN inputs already computed, keyed by the content they come from (``knn_key``): the cross-validation's
    # candidates share one per fold (the kNN inputs read the fold's texts, labels and programs, no parameter)
    _knn_memo: dict[str, np.ndarray] | None = None

    def _lgbm(self) -> Any:
        if self.booster is None and self._booster_text:
            import lightgbm as lgb

            self.booster = lgb.Booster(model_str=self._booster_text)
        return self.booster

    def _native_part(self, name: str) -> Any:
        """The saved numpy TF-IDF (``tfidf``) or flat trees (``trees``), read on first use."""
        if name not in self._native:
            from components.models import roofline_class_native as native

            assert self._native_dir is not None
            if name == "tfidf":
                self._native[name] = native.NumpyTfidf.load(self._native_dir / native.TFIDF_FILE)
            else:
                from components.common.flat_trees import FlatTrees

                self._native[name] = FlatTrees.load(self._native_dir / native.TREES_FILE)
        return self._native[name]

    def _matrix(
        self, features: pd.DataFrame | list[dict], texts: list[str] | None, programs: list[str] | None
    ) -> np.ndarray:
        """The model's input matrix from a feature frame, or from ``class_feature_rows`` (no pandas)."""
        n, column = _column_reader(features)
        extra: dict[str, np.ndarray] = {}
        if self.params.knn:
            query, query_programs = texts or [""] * n, programs or [""] * n
            if self._native_dir is not None and self.texts:
                sims = self._native_part("tfidf").similarities(query)
                knn = knn_from_similarities(sims, query_programs, np.asarray(self.labels), self.programs)
            else:
                knn = self._fitted_knn(query, query_programs)
            extra = {name: knn[:, i] for i, name in enumerate(KNN_COLUMNS)}
        return _squash(
            np.column_stack(
                [extra[c] if c in extra else column(c) for c in self.columns]
                if self.columns
                else np.empty((n, 0))
            )
        )

    def _fitted_knn(self, query: list[str], query_programs: list[str]) -> np.ndarray:
        """``knn_inputs`` of ``query`` against this model's kNN memory (its TF-IDF fitted on first use), read
        from ``_knn_memo`` where the same content was computed before."""
        key = knn_key(query, query_programs, self.texts, self.labels, self.programs)
        if self._knn_memo is not None and key in self._knn_memo:
            return self._knn_memo[key].copy()
        if self._vectorizer is None:
            self._vectorizer = _vectorizer().fit(self.texts)
        knn = knn_inputs(
            query, query_programs, self.texts, np.asarray(self.labels), self.programs, self._vectorizer
        )
        if self._knn_memo is not None:
            self._knn_memo[key] = knn.copy()
        return knn

    def fit(
        self, features: pd.DataFrame, labels: pd.Series, texts: list[str], programs: list[str]
    ) -> RooflineClassModel:
        y = labels.astype(str).map({LABELS[0]: 0, LABELS[1]: 1}).to_numpy("int64")
        self.texts, self.labels, self.programs = list(texts), [int(v) for v in y], [str(p) for p in programs]
        self.columns = [c for c in features.columns if features[c].nunique(dropna=True) >= 2]
        if self.params.knn:
            self.columns += list(KNN_COLUMNS)
        self._vectorizer, self._native_dir, self._native = None, None, {}
        x = self._matrix(features, texts, programs)
        if self.params.learner == "lgbm":
            self.booster = _fit_lgbm(x, y, self.params)
        else:
            self.linear = _fit_logreg(x, y, self.params)
        return self

    def proba(
        self,
        features: pd.DataFrame | list[dict],
        texts: list[str] | None = None,
        programs: list[str] | None = None,
    ) -> np.ndarray:
        x = self._matrix(features, texts, programs)
        if self.params.learner == "lgbm":
            if self.booster is None and self._native_dir is not None:
                return np.asarray(self._native_part("trees").predict(x), dtype="float64")
            return np.asarray(self._lgbm().predict(x), dtype="float64")
        lin = {k: np.asarray(v, dtype="float64") for k, v in self.linear.items()}
        x = np.where(np.isnan(x), lin["median"], x)
        z = ((x - lin["mean"]) / lin["scale"]) @ lin["coef"] + lin["intercept"][0]
        return 1.0 / (1.0 + np.exp(-z))

    def predict(
        self, features: pd.DataFrame, texts: list[str] | None = None, programs: list[str] | None = None
    ) -> pd.Series:
        labels = np.where(self.proba(features, texts, programs) >= 0.5, LABELS[1], LABELS[0])
        return pd.Series(labels, index=features.index, dtype="string")

    def predict_kernel(
        self,
        kernel: Any,
        grid: tuple,
        block: tuple,
        spec: Any,
        source: str | None = None,
        language: str = "cuda",
    ) -> str:
        """Class of one compiled kernel (a KernelStatic) under a launch on a GPU (source questions)."""
        from components.devices.catalog import device_feature_vector
        from components.features.static.frames import static_feature_rows
        from components.models.roofline_class_features import class_feature_rows

        report = type("R", (), {"kernels": [kernel], "source_id": "q", "arch": ""})()
        row = static_feature_rows([report])[0]
        row.update(device_feature_vector(spec))
        row.update(dict(zip(LAUNCH_DIMS, [*grid, *block], strict=True)))
        row.update({"source_text": source, "language": language, "op": kernel.short_name, "kernel_id": "q"})
        text, _ = _kernel_text_of(row)
        proba = self.proba(class_feature_rows([row]), [text], ["<question>"])
        return LABELS[1] if proba[0] >= 0.5 else LABELS[0]

    def save(self, directory: Path) -> None:
        from components.common.atomic import atomic_write_text

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        spec = {
            "params": self.params.__dict__,
            "columns": self.columns,
            "cv": self.cv,
            "linear": self.linear,
            "booster": self.booster.model_to_string() if self.booster is not None else self._booster_text,
            "texts": self.texts,
            "labels": self.labels,
            "programs": self.programs,
        }
        atomic_write_text(directory / MODEL_FILE, json.dumps(spec))
        from components.models.roofline_class_native import save_native

        save_native(self, directory)  # what a question needs without scikit-learn or LightGBM

    @classmethod
    def load(cls, directory: Path) -> RooflineClassModel:
        spec = json.loads((Path(directory) / MODEL_FILE).read_text())
        model = cls(
            ClassParams(**spec["params"]),
            list(spec["columns"]),
            None,
            dict(spec.get("linear", {})),
            list(spec.get("texts", [])),
            list(spec.get("labels", [])),
            list(spec.get("programs", [])),
            dict(spec.get("cv", {})),
        )
        model._booster_text = spec.get("booster") or None
        from components.models.roofline_class_native import native_complete

        if native_complete(model, directory):
            model._native_dir = Path(directory)
        return model


def _fit_lgbm(x: np.ndarray, y: np.ndarray, params: ClassParams) -> Any:
    import lightgbm as lgb

    estimator = lgb.LGBMClassifier(
        n_estimators=params.n_estimators,
        learning_rate=params.learning_rate,
        num_leaves=params.num_leaves,
        min_child_samples=params.min_child_samples,
        subsample=0.8,
        subsample_freq=1,
        colsample_bytree=0.7,
        class_weight="balanced",
        random_state=params.seed,
        n_jobs=1,
        verbose=-1,
        deterministic=True,
        force_col_wise=True,
    )
    estimator.fit(x, y)
    return estimator.booster_


def _fit_logreg(x: np.ndarray, y: np.ndarray, params: ClassParams) -> dict[str, list[float]]:
    """Median imputation, standardisation, balanced L2 logistic regression; kept as plain arrays."""
    from sklearn.linear_model import LogisticRegression

    median = np.nanmedian(np.where(np.isfinite(x), x, np.nan), axis=0)
    median = np.where(np.isfinite(median), median, 0.0)
    filled = np.where(np.isnan(x), median, x)
    mean, scale = filled.mean(axis=0), filled.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=params.c, class_weight="balanced", max_iter=5000)
    model.fit((filled - mean) / scale, y)
    return {
        "median": median.tolist(),
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": model.coef_[0].tolist(),
        "intercept": model.intercept_.tolist(),
    }


CANDIDATES: tuple[ClassParams, ...] = (
    ClassParams("logreg", knn=False, c=0.1),
    ClassParams("logreg", knn=True, c=0.1),
    ClassParams("logreg", knn=True, c=1.0),
    ClassParams("lgbm", knn=False),
    ClassParams("lgbm", knn=True),
    ClassParams("lgbm", knn=True, num_leaves=15, n_estimators=300, min_child_samples=10),
)
CV_FOLDS = 2
CV_REPEATS = 3


def cross_validate(
    features: pd.DataFrame,
    labels: pd.Series,
    programs: pd.Series,
    texts: list[str],
    params: ClassParams,
    folds: int = CV_FOLDS,
    repeats: int = CV_REPEATS,
    knn_memo: dict[str, np.ndarray] | None = None,
) -> float:
    """Mean balanced accuracy of repeated GroupKFold by program on the given (train-side) rows.

    Two folds on purpose: a held-out program then has its sibling (the same HeCBench benchmark in
    the other language, -cuda/-omp) in training about half the time, as on the bolet split's test
    side (51% of its kernels); five folds would make that 80% and flatter a memorising model.
    """
    from sklearn.model_selection import GroupKFold

    from components.common.sampling import unit_hash

    y = labels.astype(str).map({LABELS[0]: 0, LABELS[1]: 1}).to_numpy("int64")
    progs = programs.astype(str).to_numpy()
    scores = []
    for repeat in range(repeats):
        groups = unit_hash(pd.Series(progs), f"roofline-class-cv-{repeat}")
        pred = np.zeros(len(y), dtype="int64")
        for train_idx, test_idx in GroupKFold(n_splits=folds).split(progs, y, np.asarray(groups)):
            model = RooflineClassModel(params=params, _knn_memo=knn_memo).fit(
                features.iloc[train_idx],
                labels.iloc[train_idx],
                [texts[i] for i in train_idx],
                [progs[i] for i in train_idx],
            )
            p = model.proba(
                features.iloc[test_idx], [texts[i] for i in test_idx], [progs[i] for i in test_idx]
            )
            pred[test_idx] = (p >= 0.5).astype("int64")
        scores.append(balanced_accuracy(y, pred))
    return float(np.mean(scores))


def select_params(
    features: pd.DataFrame,
    labels: pd.Series,
    programs: pd.Series,
    texts: list[str],
    candidates: tuple[ClassParams, ...] = CANDIDATES,
) -> tuple[ClassParams, dict[str, Any]]:
    """The candidate with the best cross-validated balanced accuracy on the train side (PROTOCOL)."""
    memo: dict[str, np.ndarray] = {}  # one fold's kNN inputs serve every candidate that reads them
    results = [
        (cross_validate(features, labels, programs, texts, p, knn_memo=memo), i, p)
        for i, p in enumerate(candidates)
    ]
    results.sort(key=lambda r: (-round(r[0], 3), r[1]))  # ties: the simpler (earlier) candidate
    best_score, _, best = results[0]
    record = {
        "protocol": PROTOCOL,
        "best_cv_balanced_accuracy": round(best_score, 4),
        "candidates": [{**p.__dict__, "cv": round(s, 4)} for s, _, p in results],
    }
    return best, record


def kernel_texts(frame: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(kernel code for the kNN memory, program) per row; the kernel's name where no code is found."""
    pairs = [_kernel_text_of(row._asdict()) for row in frame.itertuples(index=False)]
    return [t for t, _ in pairs], [p for _, p in pairs]


def _kernel_text_of(row: dict[str, Any]) -> tuple[str, str]:
    """``kernel_texts`` of one row given as a dict."""
    code = kernel_text(row.get("source_text"), row.get("language"), row.get("op"))
    text = strip_comments(code)[:MAX_TEXT_CHARS] if code else str(row.get("op") or "")
    return text, str(row.get("program") or row.get("kernel_id") or "")


def fit_class_model(train: pd.DataFrame, label_column: str, *, select: bool = True) -> RooflineClassModel:
    """Fit on program rows of a train side that carry ``label_column`` (with canonical columns attached)."""
    rows = train[train[label_column].notna()]
    features = class_feature_frame(rows)
    labels = rows[label_column].astype(str)
    texts, programs = kernel_texts(rows)
    if select and len(set(programs)) >= 2 * CV_FOLDS and labels.value_counts().min() >= 10:
        params, record = select_params(features, labels, pd.Series(programs), texts)
    else:
        params, record = (
            ClassParams(),
            {"protocol": "defaults (too few programs or labels to cross-validate)"},
        )
    model = RooflineClassModel(params=params).fit(features, labels, texts, programs)
    model.cv = record
    return model


def load_default_model() -> RooflineClassModel | None:
    """The class model saved by the last bolet training run (``<models>/roofline_class``), if any."""
    from components.platform.config import get_settings

    folder = get_settings().models_dir / "roofline_class"
    return RooflineClassModel.load(folder) if (folder / MODEL_FILE).is_file() else None


# ---------------------------------------------------------------------- the tabular family's hook


def attach_inputs(frame: pd.DataFrame, canonical_dir: Path | None = None) -> pd.DataFrame:
    """``frame`` with the canonical kernel/launch columns the class features read (if it lacks them).

    The feature table leaves source text and launch dimensions in the canonical tables; they are
    joined by kernel_id/measurement_id from ``canonical_dir`` (default ``<data>/canonical``).
    """
    from components.ingest.canonical import attach_canonical_columns

    if canonical_dir is None and frame.attrs.get("canonical_dir"):
        canonical_dir = Path(frame.attrs["canonical_dir"])
    if canonical_dir is None:
        from components.platform.config import get_settings

        canonical_dir = get_settings().data_dir / "canonical"
    kernels = tuple(c for c in KERNEL_COLUMNS if c not in frame.columns)
    measurements = tuple(c for c in MEASUREMENT_COLUMNS if c not in frame.columns)
    if not kernels and not measurements:
        return frame
    return attach_canonical_columns(frame, canonical_dir, kernels=kernels, measurements=measurements)


def program_rows(frame: pd.DataFrame) -> pd.Series:
    """Rows the class model answers: whole-program kernels with source (gpuFLOPBench)."""
    if "family" not in frame.columns or "source" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return (frame["family"].astype(str) == "program") & (frame["source"].astype(str) == "gpuflopbench")


MIN_TRAIN_KERNELS = 40
# Set in a train frame's attrs by a caller that knows no row the fit will be asked is a program row (an
# evaluation fold whose test side holds none): the class model would answer nothing, so it is not fitted.
NO_PROGRAMS_ASKED = "no_program_rows_asked"


def fit_for_tabular(train: pd.DataFrame, label_column: str) -> RooflineClassModel | None:
    """The class model for program rows of a tabular fit, or None when the train side has too few (or
    the caller marked that no program row will be asked: ``NO_PROGRAMS_ASKED``)."""
    if label_column not in train.columns or train.attrs.get(NO_PROGRAMS_ASKED):
        return None
    rows = train[program_rows(train) & train[label_column].notna()]
    rows.attrs = dict(train.attrs)
    labels = rows[label_column].astype(str)
    if len(rows) < MIN_TRAIN_KERNELS or labels.nunique() < 2:
        return None
    return fit_class_model(attach_inputs(rows), label_column)


def predict_for_tabular(model: RooflineClassModel, features: pd.DataFrame) -> pd.Series:
    """Predicted class of the program rows of ``features`` (index: those rows only)."""
    rows = features[program_rows(features)]
    rows.attrs = dict(features.attrs)
    if rows.empty:
        return pd.Series([], dtype="string")
    rows = attach_inputs(rows)
    texts, programs = kernel_texts(rows)
    return model.predict(class_feature_frame(rows), texts, programs)
