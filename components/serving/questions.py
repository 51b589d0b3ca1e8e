"""One question schema for ``kernelcast predict``, the HTTP server and the registered pyfunc: the answerer.

``answer_questions`` answers parsed questions (``components.serving.question_forms``): op questions in
one vectorised batch (``components.serving.op_answers``), source and module questions by their program
predictors (``components.serving.program_answers``). Every answer has the same keys
(``components.serving.answer_fields.ANSWER_KEYS``), None where unknown. ``answer_frame`` and
``QueryError`` here are what a registered model names as its answerer (``components.registry.pyfunc``).
"""

from __future__ import annotations

import json
from typing import Any

from components.physics.bounds import class_of_bound
from components.serving.answer_fields import ANSWER_KEYS
from components.serving.memory_fit import check_memory_fit
from components.serving.op_answers import _answer_ops
from components.serving.program_answers import _program_answers
from components.serving.query import QueryError
from components.serving.question_forms import QUESTION_COLUMNS, Question, _absent, parse_questions

__all__ = ["QueryError", "answer_frame", "answer_questions"]


def answer_questions(
    predictor: Any, questions: list[Question], *, model_version: str, allow_modules: bool = False
) -> list[dict[str, Any]]:
    """One answer dict (``ANSWER_KEYS``) per question, in question order."""
    modules = [q for q in questions if q.kind == "module"]
    if modules and not allow_modules:
        raise QueryError(
            f"question {modules[0].index}.module: module questions are disabled here "
            "(they trace user code; the operator enables them with --allow-modules)"
        )
    from components.serving.deadline import check as check_deadline

    answers: dict[int, dict[str, Any]] = {}
    ops = [q for q in questions if q.kind == "op"]
    for question in ops:  # refuse what cannot run on the GPU at all (components.serving.memory_fit)
        check_memory_fit(question)
    if ops:
        check_deadline(f"question {ops[0].index} (op questions)")
        for question, answer in zip(ops, _answer_ops(predictor, ops, model_version), strict=True):
            answers[id(question)] = answer
    groups: dict[tuple[str, str], list[Question]] = {}
    for question in questions:
        if question.kind != "op":
            groups.setdefault((question.kind, question.kernel_key()), []).append(question)
    for (kind, _), group in groups.items():
        check_deadline(f"question {group[0].index} ({kind})")
        for question, answer in zip(
            group, _program_answers(kind, predictor, group, model_version), strict=True
        ):
            answers[id(question)] = answer
    for answer in answers.values():  # every answer has every key (program answers carry no tier)
        for key in ANSWER_KEYS:
            answer.setdefault(key, None)
        if answer["bound_pipe"] is not None:  # the class is the bound's side, whichever tier answered
            answer["roofline_class"] = class_of_bound(answer["bound_pipe"])
    return [answers[id(q)] for q in questions]


def answer_frame(predictor: Any, frame: Any, *, model_version: str, allow_modules: bool = True) -> Any:
    """Question columns in, answer columns out (one row per question): what the registered pyfunc calls."""
    import pandas as pd

    rows = [
        {k: v for k, v in record.items() if k in QUESTION_COLUMNS or not _absent(v)}
        for record in frame.to_dict("records")
    ]
    answers = answer_questions(
        predictor, parse_questions(rows), model_version=model_version, allow_modules=allow_modules
    )
    columns = list(ANSWER_KEYS) + sorted({k for a in answers for k in a} - set(ANSWER_KEYS))
    frame = pd.DataFrame(answers, columns=columns)
    # The pyfunc's output schema is flat (components.registry.pyfunc): the breakdown stays JSON text there.
    frame["breakdown"] = [None if b is None else json.dumps(b) for b in frame["breakdown"]]
    return frame
