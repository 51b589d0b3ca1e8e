"""The roofline-class model's question-time parts in numpy only: its TF-IDF and booster, saved at train time.

Why: a ``.cu`` question asks the class model for one kernel. Refitting its TF-IDF vectorizer on the 4k
training kernels (scikit-learn's import plus the fit) and building its LightGBM booster cost about 2 CPU-s,
more than the rest of the question. What the fit produced is saved beside ``roofline_class.json`` instead:

- ``roofline_class_tfidf.npz``: the vocabulary (terms in column order), the idf, and the training kernels'
  TF-IDF rows as a CSC matrix (one column per term), so the kNN similarities of a question are a few
  column reads;
- ``roofline_class_trees.npz``: the booster as flat trees (``components.common.flat_trees``).

``NumpyTfidf`` repeats scikit-learn's ``TfidfVectorizer.transform`` step by step (lowercase, the token
pattern's ``findall``, counts in column order, ``log(tf) + 1``, times idf, L2 norm summed in order) and the
sparse product ``q @ T.T`` in the order SciPy accumulates it, so the similarities are the same bits
(``tests/unit/test_roofline_class_native.py`` compares both on real kernel sources). A folder saved before
these files existed still answers through scikit-learn and LightGBM.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

TFIDF_FILE = "roofline_class_tfidf.npz"
TREES_FILE = "roofline_class_trees.npz"


class NumpyTfidf:
    """A fitted ``TfidfVectorizer`` (sublinear tf, L2 norm) and its training rows, as numpy arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.terms = arrays["terms"]
        self.idf = arrays["idf"].astype(np.float64)
        self.token_pattern = str(arrays["token_pattern"])
        self.lowercase = bool(arrays["lowercase"])
        self.data = arrays["data"].astype(np.float64)  # training rows, CSC: per term, its rows and values
        self.rows = arrays["rows"].astype(np.int64)
        self.indptr = arrays["indptr"].astype(np.int64)
        self.n_rows = int(arrays["n_rows"])
        self._index: dict[str, int] | None = None
        self._regex = re.compile(self.token_pattern)

    @classmethod
    def from_vectorizer(cls, vectorizer: Any, texts: list[str]) -> NumpyTfidf:
        """The arrays of a fitted vectorizer (sublinear tf, L2 norm, unigrams) and of ``texts`` through it."""
        if not (vectorizer.sublinear_tf and vectorizer.norm == "l2" and vectorizer.ngram_range == (1, 1)):
            raise ValueError("NumpyTfidf repeats a sublinear-tf, L2-normed unigram TfidfVectorizer only")
        vocabulary = vectorizer.vocabulary_
        terms = np.empty(len(vocabulary), dtype=object)
        for term, column in vocabulary.items():
            terms[column] = term
        matrix = vectorizer.transform(texts).tocsc()
        matrix.sort_indices()
        return cls(
            {
                "terms": terms.astype(str),
                "idf": np.asarray(vectorizer.idf_, dtype=np.float64),
                "token_pattern": np.asarray(vectorizer.token_pattern),
                "lowercase": np.asarray(bool(vectorizer.lowercase)),
                "data": matrix.data,
                "rows": matrix.indices,
                "indptr": matrix.indptr,
                "n_rows": np.asarray(matrix.shape[0]),
            }
        )

    def save(self, path: Path) -> None:
        from components.common.atomic import atomic_write

        arrays = {
            "terms": self.terms,
            "idf": self.idf,
            "token_pattern": np.asarray(self.token_pattern),
            "lowercase": np.asarray(self.lowercase),
            "data": self.data,
            "rows": self.rows.astype(np.int32),
            "indptr": self.indptr.astype(np.int64),
            "n_rows": np.asarray(self.n_rows),
        }

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.savez_compressed(handle, **arrays)

        atomic_write(Path(path), write)

    @classmethod
    def load(cls, path: Path) -> NumpyTfidf:
        with np.load(path, allow_pickle=False) as data:
            return cls({k: data[k] for k in data.files})

    def transform_one(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(columns, values) of one text's TF-IDF row, columns ascending, as ``vectorizer.transform``."""
        if self._index is None:
            self._index = {str(t): i for i, t in enumerate(self.terms.tolist())}
        counts: dict[int, int] = {}
        for token in self._regex.findall(text.lower() if self.lowercase else text):
            column = self._index.get(token)
            if column is not None:
                counts[column] = counts.get(column, 0) + 1
        columns = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        values = np.log(np.asarray([counts[c] for c in columns.tolist()], dtype=np.float64)) + 1.0
        values *= self.idf[columns]
        # scikit-learn's inplace_csr_row_normalize_l2 sums the squares in column order: cumsum does too.
        total = float(np.cumsum(values * values)[-1]) if len(values) else 0.0
        if total != 0.0:
            values /= np.sqrt(total)
        return columns, values

    def similarities(self, texts: list[str]) -> np.ndarray:
        """``(transform(texts) @ transform(training texts).T).toarray()``: per text, per training row."""
        sims = np.zeros((len(texts), self.n_rows))
        for i, text in enumerate(texts):
            row = sims[i]
            # SciPy's CSR product adds each query term's contribution in column order: the same bits.
            for column, value in zip(*self.transform_one(text), strict=True):
                lo, hi = self.indptr[column], self.indptr[column + 1]
                row[self.rows[lo:hi]] += value * self.data[lo:hi]
        return sims


def save_native(model: Any, directory: Path) -> list[Path]:
    """Write the TF-IDF (kNN models) and flat-tree (LightGBM models) files of a fitted class model."""
    directory = Path(directory)
    written = []
    if model.params.knn and model.texts:
        vectorizer = model._vectorizer
        if vectorizer is None:
            from components.models.roofline_class import _vectorizer

            vectorizer = _vectorizer().fit(model.texts)
        NumpyTfidf.from_vectorizer(vectorizer, model.texts).save(directory / TFIDF_FILE)
        written.append(directory / TFIDF_FILE)
    booster = model._lgbm() if model.params.learner == "lgbm" else None
    if booster is not None:
        from components.common.flat_trees import FlatTrees

        FlatTrees.from_dump(booster.dump_model()).save(directory / TREES_FILE)
        written.append(directory / TREES_FILE)
    return written


def native_complete(model: Any, directory: Path) -> bool:
    """Whether ``directory`` holds every numpy file ``model`` answers with (else: the old path)."""
    directory = Path(directory)
    needs_tfidf = bool(model.params.knn and model.texts)
    needs_trees = model.params.learner == "lgbm"
    return (not needs_tfidf or (directory / TFIDF_FILE).is_file()) and (
        not needs_trees or (directory / TREES_FILE).is_file()
    )
