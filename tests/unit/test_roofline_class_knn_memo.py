"""The class model's cross-validation computes each fold's kNN inputs once for every candidate that reads them
(``roofline_class._knn_memo``, keyed by the content they come from): the same selection and model to the bit,
and a memo never answers for other texts, labels or programs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.models import roofline_class as rc
from components.models import roofline_class_features as rcf
from tests.unit.test_roofline_class import kernels  # noqa: F401  (the fixture: ~50 gpuFLOPBench programs)

LABEL = "roofline_class_published"


def _inputs(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, pd.Series, list[str]]:
    rows = frame[frame[LABEL].notna()]
    texts, programs = rc.kernel_texts(rows)
    return rcf.class_feature_frame(rows), rows[LABEL].astype(str), pd.Series(programs), texts


def test_the_selection_with_the_shared_memo_is_the_selection_without_it(
    kernels: pd.DataFrame,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    features, labels, programs, texts = _inputs(kernels)
    calls: list[int] = []
    original = rc.knn_inputs

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(rc, "knn_inputs", counted)
    shared = rc.select_params(features, labels, programs, texts)
    shared_calls = len(calls)
    # each candidate on its own (what every fit computed before the memo)
    alone = [rc.cross_validate(features, labels, programs, texts, p) for p in rc.CANDIDATES]
    scores = {(c["learner"], c["knn"], c["c"], c["num_leaves"]): c["cv"] for c in shared[1]["candidates"]}
    for params, score in zip(rc.CANDIDATES, alone, strict=True):
        assert scores[(params.learner, params.knn, params.c, params.num_leaves)] == round(score, 4)
    knn_candidates = sum(p.knn for p in rc.CANDIDATES)
    per_fold = rc.CV_FOLDS * rc.CV_REPEATS * 2  # a fold's train side (fit) and its test side (proba)
    assert shared_calls == per_fold  # once per fold, not once per kNN candidate
    assert len(calls) - shared_calls == per_fold * knn_candidates


def test_a_memo_answers_only_for_the_content_it_was_computed_from(kernels: pd.DataFrame) -> None:  # noqa: F811
    features, labels, _, texts = _inputs(kernels)
    programs = [str(p) for p in kernels.loc[kernels[LABEL].notna(), "program"]]
    memo: dict[str, np.ndarray] = {}
    params = rc.ClassParams("logreg", knn=True, c=1.0)
    half = len(texts) // 2
    model = rc.RooflineClassModel(params=params, _knn_memo=memo).fit(
        features.iloc[:half], labels.iloc[:half], texts[:half], programs[:half]
    )
    query, query_programs = texts[half:], programs[half:]
    first = model.proba(features.iloc[half:], query, query_programs)
    assert len(memo) == 2  # the train side's inputs (at fit) and these
    # Another memory (one training text changed): the memo's inputs for the old memory must not answer.
    changed = [*texts[:half]]
    changed[0] = changed[0] + " __syncthreads(); float extra = 1.0f;"
    other = rc.RooflineClassModel(params=params, _knn_memo=memo).fit(
        features.iloc[:half], labels.iloc[:half], changed, programs[:half]
    )
    fresh = rc.RooflineClassModel(params=params).fit(
        features.iloc[:half], labels.iloc[:half], changed, programs[:half]
    )
    np.testing.assert_array_equal(
        other.proba(features.iloc[half:], query, query_programs),
        fresh.proba(features.iloc[half:], query, query_programs),
    )
    # other labels, other programs: other keys too
    keys = {
        rc.knn_key(query, query_programs, texts[:half], model.labels, programs[:half]),
        rc.knn_key(query, query_programs, texts[:half], [1 - v for v in model.labels], programs[:half]),
        rc.knn_key(query, query_programs, texts[:half], model.labels, ["x", *programs[1:half]]),
        rc.knn_key(query[::-1], query_programs, texts[:half], model.labels, programs[:half]),
    }
    assert len(keys) == 4
    # and the same content read again answers from the memo, equal to what was computed
    again = rc.RooflineClassModel(params=params, _knn_memo=memo).fit(
        features.iloc[:half], labels.iloc[:half], texts[:half], programs[:half]
    )
    np.testing.assert_array_equal(again.proba(features.iloc[half:], query, query_programs), first)
